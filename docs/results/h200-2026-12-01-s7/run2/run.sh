#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 7, device run 2: create_probe's chunked and peer modes (do
# creates spread over the restore keep the driver clearing when another
# process makes them?), then tests/gpu/tms_test.py whole.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout -s INT 200 $G exec python3 bench/create_probe.py --cycles 8 --modes floor,floor-interleaved,floor-chunks:20,peer:20,peer-paced:20,peer-paced:64 --out $OUT/create_probe.json > $OUT/create_probe.txt 2>&1
echo "probe rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
TEST_TIMEOUT=200 VRAM_TEST_VERBOSE=1 timeout -s INT 370 $G exec build/tests/runner tests/gpu/tms_test.py > $OUT/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
