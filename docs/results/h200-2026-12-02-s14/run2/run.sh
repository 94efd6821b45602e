#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 14 run 2, part 1: the GPU tests.
W=$OUT/w; mkdir -p $W
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build; G=tools/gpu-prepare.sh
TEST_TIMEOUT=180 VRAM_TEST_VERBOSE=1 timeout -s INT 400 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test tests/gpu/torch_test.py tests/gpu/tms_test.py > $W/ctests.log 2>&1
grep -E '^(ok|FAIL|skip) |passed, .* failed' $W/ctests.log
tar czf $OUT/all.tgz -C $OUT w
