#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 3: reading threads for the sessions that only ping
# (server.c's placement) against 5802688 (build-old): the 1 GiB discard
# pair, the 64-client ping with the daemon in its own session and in the
# bench's; vramd's 16 GiB host restore right after a pause and after a gap;
# the C GPU tests. Packed into $OUT/all.tgz after each step.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
S=$(date +%s)
st() { echo "$1 rc $2 $(( $(date +%s) - S ))s" >> $W/env.txt; tar czf $OUT/all.tgz -C $W .; }
OLD="VRAMD_BIN=$PWD/build-old/vramd VRAMCTL_BIN=$PWD/build-old/vramctl VRAM_BUILD=$PWD/build-old"
echo "head $(cat .head); $(nproc) cpus; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $W/env.txt
for k in 1 2 3; do
  timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $W/raw1g-$k.txt 2>&1
  env $OLD BENCH_DAEMON_LOG=1 timeout 30 $G exec build-old/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/old1g-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/new1g-$k.txt 2>&1
done; st 1g $?
for k in 1 2; do
  for ds in 1 0; do
    env $OLD BENCH_ONLY=ping BENCH_DAEMON_SESSION=$ds timeout 40 $G exec build/bench/rpc > $W/ping-old-s$ds-$k.txt 2>&1
    for n in 1 2 4; do BENCH_ONLY=ping BENCH_DAEMON_SESSION=$ds BENCH_IO_THREADS=$n timeout 40 $G exec build/bench/rpc > $W/ping-io$n-s$ds-$k.txt 2>&1; done
  done
done; st ping $?
BENCH_DAEMON_LOG=1 timeout 90 $G exec build/bench/gpu_vramd --sizes 16 --policies host --cycles 4 > $W/host16.txt 2>&1; st host16 $?
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 90 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/c.log 2>&1; st c $?
{ grep -E '^(ok|FAIL|skip) |passed, .* failed' $W/c.log | tail -2; for f in $W/ping-*.txt; do echo "$(basename $f): $(grep '|      64 |' $f)"; done; grep -H p50 $W/raw1g-*.txt $W/old1g-*.txt $W/new1g-*.txt $W/host16.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/all.tgz -C $W .
