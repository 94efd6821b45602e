#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 1 (HEAD): the restore's copy shapes, the copy sweep
# (the pinned limit in the same run), the C GPU tests, the 1 GiB pair in
# three rounds and the 64-client ping. Each writes into $OUT as it goes.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
R="$G exec build/tests/runner"
S=$(date +%s)
st() { echo "$1 rc $2 $(( $(date +%s) - S ))s" >> $OUT/env.txt; }
echo "head $(cat .head); $(nproc) cpus; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $OUT/env.txt
timeout 150 $G exec python3 bench/copy_probe.py --out $OUT/cp.json > $OUT/cp.txt 2>&1; st cp $?
timeout 60 $G exec python3 bench/copy_probe.py --cases whole,chunks,chunks-overlap --streams 4 --cycles 3 > $OUT/cp-s4.txt 2>&1; st cp4 $?
timeout 60 $G exec python3 bench/copy_probe.py --cases whole,chunks --streams 1 --cycles 3 > $OUT/cp-s1.txt 2>&1; st cp1 $?
timeout 60 $G exec python3 bench/copy_probe.py --cases whole,chunks --piece-mib 1024 --cycles 3 > $OUT/cp-p1g.txt 2>&1; st cpp $?
timeout 90 $G exec build/bench/gpu_raw --sizes 16 --policies host --copy-sweep --cycles 3 > $OUT/sweep.txt 2>&1; st sweep $?
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 90 $R build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $OUT/c.log 2>&1; st c $?
for k in 1 2 3; do
  timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $OUT/raw1g-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $OUT/vramd1g-$k.txt 2>&1
done; st 1g $?
BENCH_ONLY=ping timeout 40 $G exec build/bench/rpc > $OUT/ping.txt 2>&1; st ping $?
grep -E '^(ok|FAIL|skip) |passed, .* failed' $OUT/c.log > $OUT/tests.sum
