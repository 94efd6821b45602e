#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 6, device run 4: the KV-create probe with a pump (a small
# create and release every P ms after the trainer's free).
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout 200 $G exec python3 bench/create_probe.py --cycles 4 --modes wake,pump:2:2,pump:5:2,pump:10:2,pump:25:2,pump-all:5:2,pump:5:64 --out $OUT/create_probe3.json > $OUT/create_probe3.txt 2>&1
echo "probe rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
