#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 8, device run 5: the GPU tests at HEAD with polling on (the
# default on this host): the C cases, tms_test.py's backup, RL and vLLM
# cases; then the 1 GiB discard pair and the 64-client ping.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
R="$G exec build/tests/runner"
echo "head $(cat .head); $(nproc) cpus" > $OUT/env.txt
S=$(date +%s)
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 60 $R build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $OUT/c.log 2>&1
echo "c rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in backup rl_example vllm_basic; do
	TEST_FILTER=$f TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 60 $R tests/gpu/tms_test.py > $OUT/tms-$f.log 2>&1
	echo "tms $f rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
done
timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $OUT/raw1g.txt 2>&1
BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $OUT/vramd1g.txt 2>&1
BENCH_ONLY=ping timeout 40 $G exec build/bench/rpc > $OUT/ping.txt 2>&1
echo "bench rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in $OUT/*.log; do grep -E '^(ok|FAIL|skip) |passed, .* failed' $f; done > $OUT/tests.sum
{ grep p50 $OUT/raw1g.txt $OUT/vramd1g.txt; grep -E '^\| ping' $OUT/ping.txt; } > $OUT/summary.txt
cd $OUT && tar czf all.tgz *.log raw1g.txt vramd1g.txt ping.txt && rm -f *.log raw1g.txt vramd1g.txt ping.txt
