#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 8, device run 2: torch_test.py and tms_test.py at HEAD.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
R="$G exec build/tests/runner"
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
TEST_TIMEOUT=150 VRAM_TEST_VERBOSE=1 timeout -s INT 200 $R tests/gpu/torch_test.py > $OUT/torch.log 2>&1
echo "torch rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
TEST_TIMEOUT=150 VRAM_TEST_VERBOSE=1 timeout -s INT 370 $R tests/gpu/tms_test.py > $OUT/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in torch tms; do grep -E '^(ok|FAIL|skip) |passed, .* failed' $OUT/$f.log > $OUT/$f.sum; done
cd $OUT && tar czf logs.tgz torch.log tms.log && rm -f torch.log tms.log
