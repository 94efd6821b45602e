#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 9 (HEAD, after the registry's reader-writer lock):
# the C GPU cases and the CUDA unit tests, then torch_test.py.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
S=$(date +%s)
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 60 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $OUT/c.log 2>&1
echo "c rc $? $(( $(date +%s) - S ))s; head $(cat .head)" > $OUT/env.txt
TEST_TIMEOUT=200 VRAM_TEST_VERBOSE=1 timeout -s INT 170 $G exec build/tests/runner tests/gpu/torch_test.py > $OUT/torch.log 2>&1
echo "torch rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in c torch; do grep -E '^(ok|FAIL|skip) |passed, .* failed' $OUT/$f.log > $OUT/$f.sum; done
