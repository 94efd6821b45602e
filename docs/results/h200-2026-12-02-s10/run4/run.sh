#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 10, device run 4 (HEAD): the side-by-side (bench/compare.py
# without the sweeps, libvram's debug log on), then the 1 GiB discard pair
# against the floor in five rounds in turns.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
echo "head $(cat .head); $(nproc) cpus; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $W/env.txt
VRAM_LOG=debug OUT=$W timeout 420 $G compare --sweeps none --workloads host,rl,discard-one,discard-many > $W/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
for k in 1 2 3 4 5; do
  timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $W/raw1g-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/new1g-$k.txt 2>&1
  [ $(( $(date +%s) - S )) -gt 540 ] && break
done
echo "1g $(( $(date +%s) - S ))s" >> $W/env.txt
grep -H p50 $W/raw1g-*.txt $W/new1g-*.txt > $W/1g.sum 2>&1
pack
