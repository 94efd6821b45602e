#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 10, device run 3 (54bd62e): the 64-client ping with the new
# windows (the defaults) against both off, five rounds in turns, the
# socket floor before and after; then every GPU test.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
cat .head > $W/env.txt
S=$(date +%s)
row() { # label, then env settings
  local label=$1; shift
  echo "## $label" >> $W/ping.txt
  env "$@" BENCH_ONLY=ping BENCH_ITERS=20000 timeout 60 $G exec build/bench/rpc 2>&1 | grep -E '^\| ping' >> $W/ping.txt
}
timeout 60 build/bench/sock_probe 64 4 5000 >> $W/sock.txt 2>&1
for r in 1 2 3 4 5; do
  row "r$r windows" X=1
  row "r$r off" BENCH_IO_POLL_US=0 VRAM_CALL_SPIN_US=0
done
row "r6 windows, warmup0" BENCH_WARMUP=0
row "r6 off, warmup0" BENCH_WARMUP=0 BENCH_IO_POLL_US=0 VRAM_CALL_SPIN_US=0
row "r7 windows, 5000 iters, warmup0" BENCH_WARMUP=0 BENCH_ITERS=5000
timeout 60 build/bench/sock_probe 64 4 5000 >> $W/sock.txt 2>&1
echo "ping $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 60 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/c.log 2>&1
echo "c rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=200 VRAM_TEST_VERBOSE=1 timeout -s INT 180 $G exec build/tests/runner tests/gpu/torch_test.py > $W/torch.log 2>&1
echo "torch rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=240 VRAM_TEST_VERBOSE=1 timeout -s INT 280 $G exec build/tests/runner tests/gpu/tms_test.py > $W/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s" >> $W/env.txt
for f in c torch tms; do grep -E '^(ok|FAIL|skip) |passed, .* failed' $W/$f.log > $W/$f.sum; done
pack
