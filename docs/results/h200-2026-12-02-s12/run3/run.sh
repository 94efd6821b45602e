#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 12, device run 3 (27ef460's build): tms_test against upstream's
# own tests, through vramd.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
TEST_TIMEOUT=400 VRAM_TEST_VERBOSE=1 timeout -s INT 500 $G exec build/tests/runner tests/gpu/tms_test.py > $W/tms_test.txt 2>&1
tail -5 $W/tms_test.txt
tar czf $OUT/all.tgz -C $OUT w
