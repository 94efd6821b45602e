#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 11, device run 4 (build of .head): the C GPU tests; the 1 GiB
# and 16 GiB discard pairs in one round: the floor, vramd at
# 2a351f6 (build/old/vramd) and HEAD with 200 ms idle before each pause,
# HEAD back to back; the side-by-side with 200 ms idle before each pause.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
{ echo "head $(cat .head)"; nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; } > $W/env.txt 2>&1
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 100 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/ctests.txt 2>&1
echo "ctests rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
for k in 1; do
  timeout 40 $G exec build/bench/gpu_raw --sizes 1,16 --policies discard --no-gap --cycles 10 > $W/raw-$k.txt 2>&1
  VRAMD_BIN=$PWD/build/old/vramd BENCH_DAEMON_LOG=1 timeout 60 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 --run-ms 200 > $W/old-run-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 60 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 --run-ms 200 > $W/new-run-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 60 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 > $W/new-b2b-$k.txt 2>&1
  echo "round $k $(( $(date +%s) - S ))s" >> $W/env.txt; pack
done
left=$(( 575 - ($(date +%s) - S) ))
VRAM_LOG=debug OUT=$W/cmp timeout $left $G compare --sweeps none --workloads host,rl,discard-one,discard-many --run-ms 200 > $W/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $W/env.txt
rm -f $W/cmp/compare/logs.tgz; pack
