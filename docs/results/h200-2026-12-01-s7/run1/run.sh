#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 7, device run 1: create_probe's floor modes (does a chunked
# wake keep the driver clearing?), then the GPU tests at HEAD.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> $OUT/env.txt 2>&1
S=$(date +%s)
timeout -s INT 150 $G exec python3 bench/create_probe.py --cycles 8 --modes floor,floor-interleaved,floor-chunks:20,floor-chunks:64,floor-pump:5 > $OUT/create_probe.txt 2>&1
echo "probe rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
OUT=$OUT/gpu timeout -s INT 400 $G test > $OUT/test.txt 2>&1
echo "test rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
cd $OUT && tar czf gpu.tgz gpu && rm -rf gpu
