#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 11, device run 3 (build of .head): export_probe's free and
# close cases at 1, 4 and 16 GiB; the C GPU tests.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
{ echo "head $(cat .head)"; nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; } > $W/env.txt 2>&1
timeout 150 $G exec python3 bench/export_probe.py --sizes-gib 1,4,16 --cycles 9 --gap 5 --out $W/export_probe.json > $W/export_probe.txt 2>&1
echo "export_probe rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 90 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/ctests.txt 2>&1
echo "ctests rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
