#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 6 (HEAD): tms_test.py, upstream torch_memory_saver's
# scenarios through vram.compat.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
S=$(date +%s)
TEST_TIMEOUT=240 VRAM_TEST_VERBOSE=1 timeout -s INT 560 $G exec build/tests/runner tests/gpu/tms_test.py > $OUT/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s; head $(cat .head)" > $OUT/env.txt
grep -E '^(ok|FAIL|skip) |passed, .* failed' $OUT/tms.log > $OUT/tms.sum
