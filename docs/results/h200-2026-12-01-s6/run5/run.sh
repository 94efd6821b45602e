#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 6, device run 5: the pump, 8 cycles: released at once or held.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout 240 $G exec python3 bench/create_probe.py --cycles 8 --modes wake,wake-spread,pump:5:2,pump-hold:5:2,pump-all:5:2,pump-all-hold:5:2,pump:1:2 --out $OUT/create_probe4.json > $OUT/create_probe4.txt 2>&1
echo "probe rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
