#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 8, device run 1: the C GPU cases at HEAD (the commits after
# ed91b56 never ran on the GPU), then issue 11's figures in one pass.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
R="$G exec build/tests/runner"
echo "head $(cat .head)" > $OUT/env.txt
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv >> $OUT/env.txt 2>&1
S=$(date +%s)
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 70 $R build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $OUT/c.log 2>&1
echo "c rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
timeout -s INT 470 $G figures > $OUT/figures.log 2>&1
echo "figures rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
grep -E '^(ok|FAIL|skip) |passed, .* failed' $OUT/c.log > $OUT/c.sum
cd $OUT && tar czf logs.tgz c.log figures.log && rm -f c.log figures.log
