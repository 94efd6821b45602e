#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 2: the reading threads (daemon/io.h) against the
# last build without them (build-old, 5802688): the 64-client ping, the
# 1 GiB discard pair; the C GPU tests; the restore's copy with a long gap
# (the driver's clearing beside the copy?); the copy sweep (the limit).
# Everything goes into $OUT/w and is packed into $OUT/all.tgz after each step.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
S=$(date +%s)
st() { echo "$1 rc $2 $(( $(date +%s) - S ))s" >> $W/env.txt; tar czf $OUT/all.tgz -C $W .; }
echo "head $(cat .head); $(nproc) cpus; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $W/env.txt
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 90 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/c.log 2>&1; st c $?
OLD="VRAMD_BIN=$PWD/build-old/vramd VRAMCTL_BIN=$PWD/build-old/vramctl VRAM_BUILD=$PWD/build-old"
for k in 1 2; do
  env $OLD BENCH_ONLY=ping timeout 40 $G exec build-old/bench/rpc > $W/ping-old-$k.txt 2>&1
  for n in 1 2 4 8; do BENCH_ONLY=ping BENCH_IO_THREADS=$n timeout 40 $G exec build/bench/rpc > $W/ping-io$n-$k.txt 2>&1; done
done; st ping $?
for k in 1 2 3; do
  timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $W/raw1g-$k.txt 2>&1
  env $OLD BENCH_DAEMON_LOG=1 timeout 30 $G exec build-old/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/old1g-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/new1g-$k.txt 2>&1
done; st 1g $?
timeout 60 $G exec python3 bench/copy_probe.py --cases whole,chunks,chunks-map --cycles 4 --gap 500 --out $W/cp-gap500.json > $W/cp-gap500.txt 2>&1; st cpgap $?
timeout 60 $G exec python3 bench/copy_probe.py --cases whole,chunks,chunks-map --cycles 4 --gap 20 --out $W/cp-gap20.json > $W/cp-gap20.txt 2>&1; st cp20 $?
timeout 100 $G exec build/bench/gpu_raw --sizes 16 --policies host --copy-sweep --cycles 3 > $W/sweep.txt 2>&1; st sweep $?
{ grep -E '^(ok|FAIL|skip) |passed, .* failed' $W/c.log | tail -3; grep -H '| ping' $W/ping-*.txt /dev/null; grep -H p50 $W/raw1g-*.txt $W/old1g-*.txt $W/new1g-*.txt; cat $W/cp-gap500.txt $W/cp-gap20.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/all.tgz -C $W .
