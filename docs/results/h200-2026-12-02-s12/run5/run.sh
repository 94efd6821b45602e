#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 12, device run 5 (the build of .head): what the GPUDirect RDMA
# flag costs the floor's chunks (bench/gpu_raw with and without
# --no-rdma), beside vramd (whose chunks have it), three rounds in turns,
# back to back and with 200 ms of device work before each pause.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
echo "head $(cat .head)" > $W/env.txt
for k in 1 2 3; do
  for r in 0 200; do
    timeout 60 $G exec build/bench/gpu_raw --sizes 1,16 --policies discard --no-gap --cycles 10 --run-ms $r > $W/raw-$r-$k.txt 2>&1
    timeout 60 $G exec build/bench/gpu_raw --sizes 1,16 --policies discard --no-gap --cycles 10 --run-ms $r --no-rdma > $W/plain-$r-$k.txt 2>&1
    BENCH_DAEMON_LOG=1 timeout 60 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 --run-ms $r > $W/vramd-$r-$k.txt 2>&1
  done
  pack
done
grep -H 'p50\|chunks$' $W/raw-* $W/plain-* $W/vramd-* | grep -v 'raw VMM'
pack
