#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 10, device run 2: the 64-client ping, counting each client's
# first calls or not (BENCH_WARMUP), with the reading threads polling
# (BENCH_IO_POLL_US) and the clients polling (VRAM_CALL_SPIN_US), against
# the machine's own socket floor (bench/sock_probe) in the same run.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
cat .head > $W/env.txt
row() { # label, then env settings
  local label=$1; shift
  echo "## $label" >> $W/ping.txt
  env "$@" BENCH_ONLY=ping BENCH_ITERS=20000 timeout 60 $G exec build/bench/rpc 2>&1 | grep -E '^\| ping' >> $W/ping.txt
}
timeout 60 build/bench/sock_probe 64 4 5000 >> $W/sock.txt 2>&1
for r in 1 2 3; do
  row "r$r warmup0" BENCH_WARMUP=0
  row "r$r default" BENCH_WARMUP=32
  row "r$r spin100" VRAM_CALL_SPIN_US=100
  row "r$r spin30" VRAM_CALL_SPIN_US=30
  row "r$r iopoll200" BENCH_IO_POLL_US=200
  row "r$r iopoll200+spin100" BENCH_IO_POLL_US=200 VRAM_CALL_SPIN_US=100
  row "r$r io8" BENCH_IO_THREADS=8
  row "r$r io8+spin100" BENCH_IO_THREADS=8 VRAM_CALL_SPIN_US=100
  row "r$r io1" BENCH_IO_THREADS=1
  pack
done
timeout 60 build/bench/sock_probe 64 4 5000 >> $W/sock.txt 2>&1
timeout 60 build/bench/sock_probe 64 8 5000 >> $W/sock.txt 2>&1
pack
