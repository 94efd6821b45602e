#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 8: libvram's registry under a reader-writer lock
# (build/) against the same tree with its mutex (build-head/, f7b8170),
# both with HEAD's daemon: the 64-client ping, three rounds in turns, at
# io_threads 4 (the default here) and 1.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
S=$(date +%s)
HEAD="VRAMD_BIN=$PWD/build-head/vramd VRAMCTL_BIN=$PWD/build-head/vramctl VRAM_BUILD=$PWD/build-head"
for k in 1 2 3; do
  for n in 4 1; do
    env $HEAD BENCH_ONLY=ping BENCH_IO_THREADS=$n timeout 40 $G exec build-head/bench/rpc > $W/ping-mutex-io$n-$k.txt 2>&1
    BENCH_ONLY=ping BENCH_IO_THREADS=$n timeout 40 $G exec build/bench/rpc > $W/ping-rwlock-io$n-$k.txt 2>&1
  done
  tar czf $OUT/all.tgz -C $W .
done
echo "done $(( $(date +%s) - S ))s; head $(cat .head)" > $OUT/env.txt
for f in $W/ping-*.txt; do echo "$(basename $f): $(grep '|      64 |' $f)"; done > $OUT/summary.txt
tar czf $OUT/all.tgz -C $W .
