#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 5, device run 1: upstream scenarios at HEAD; host and RL compare.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
TEST_TIMEOUT=200 VRAM_TEST_VERBOSE=1 timeout 300 $G exec build/tests/runner tests/gpu/tms_test.py > $OUT/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
BENCH_DAEMON_LOG=1 OUT=$OUT/cmp timeout $(( 560 - ($(date +%s) - S) )) $G compare --sweeps none --workloads host,rl > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
tar czf $OUT/cmp.tgz -C $OUT cmp 2>/dev/null && rm -rf $OUT/cmp
