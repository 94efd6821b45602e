#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 10, device run 1 (292de00 + bench/sock_probe.c): the machine's
# own socket ping floor, the 64-client ping at HEAD, then every GPU test.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
nproc > $W/env.txt; echo "head $(cat .head)" >> $W/env.txt
for a in "64 4" "64 8" "64 16" "16 4" "1 1"; do
  timeout 60 build/bench/sock_probe $a 5000 >> $W/sock.txt 2>&1
done
SOCK_PROBE_POLL_US=50 SOCK_PROBE_SPIN_US=50 timeout 60 build/bench/sock_probe 64 4 5000 >> $W/sock.txt 2>&1
echo "sock $(( $(date +%s) - S ))s" >> $W/env.txt; pack
for r in 1 2; do
  BENCH_ONLY=ping timeout 60 $G exec build/bench/rpc >> $W/ping.txt 2>&1
  BENCH_ONLY=ping BENCH_IO_THREADS=8 timeout 60 $G exec build/bench/rpc >> $W/ping.txt 2>&1
done
echo "ping $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 60 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/c.log 2>&1
echo "c rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=200 VRAM_TEST_VERBOSE=1 timeout -s INT 170 $G exec build/tests/runner tests/gpu/torch_test.py > $W/torch.log 2>&1
echo "torch rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=240 VRAM_TEST_VERBOSE=1 timeout -s INT 290 $G exec build/tests/runner tests/gpu/tms_test.py > $W/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s" >> $W/env.txt
for f in c torch tms; do grep -E '^(ok|FAIL|skip) |passed, .* failed' $W/$f.log > $W/$f.sum; done
pack
