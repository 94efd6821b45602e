#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 10, device run 5 (54bd62e's build): bench/rpc's ping at its own
# defaults (5000 iterations, 32 uncounted calls a client), three rounds;
# then the size, count and mapper sweeps with 5 cycles a point, as far as
# the device time allows.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
echo "head $(cat .head)" > $W/env.txt
for r in 1 2 3; do
  echo "## r$r" >> $W/ping.txt
  BENCH_ONLY=ping timeout 30 $G exec build/bench/rpc 2>&1 | grep -E '^\| ping' >> $W/ping.txt
done
echo "## warmup0" >> $W/ping.txt
BENCH_ONLY=ping BENCH_WARMUP=0 timeout 30 $G exec build/bench/rpc 2>&1 | grep -E '^\| ping' >> $W/ping.txt
echo "ping $(( $(date +%s) - S ))s" >> $W/env.txt; pack
for sw in size count mappers; do
  left=$(( 205 - ($(date +%s) - S) ))
  [ $left -lt 20 ] && break
  OUT=$W/$sw timeout $left $G compare --workloads none --sweeps $sw --sweep-cycles 5 > $W/$sw.log 2>&1
  echo "$sw rc $? $(( $(date +%s) - S ))s" >> $W/env.txt
  rm -f $W/$sw/compare/logs.tgz
  pack
done
