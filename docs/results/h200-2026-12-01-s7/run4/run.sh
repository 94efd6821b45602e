#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 7, device run 4: the GPU tests that restore host pools, with the
# resume in parts: the C cases, torch_test.py, tms_test.py's backup, RL and
# vLLM cases; then the 1 GiB discard pool against its floor.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
R="$G exec build/tests/runner"
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 60 $R build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $OUT/c.log 2>&1
echo "c rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 190 $R tests/gpu/torch_test.py > $OUT/torch.log 2>&1
echo "torch rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in backup rl_example vllm_basic; do
TEST_FILTER=$f TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 80 $R tests/gpu/tms_test.py > $OUT/tms-$f.log 2>&1
echo "tms $f rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
done
timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $OUT/raw1g.txt 2>&1
BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $OUT/vramd1g.txt 2>&1
echo "1g rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in $OUT/*.log; do grep -E '^(ok|FAIL|skip) |passed, .* failed' $f > $f.sum; done
