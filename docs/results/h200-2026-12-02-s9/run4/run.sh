#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 4: the side-by-side (bench/compare.py without the
# sweeps) at HEAD, libvram's debug log on for the restores' copies and gaps.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
S=$(date +%s)
VRAM_LOG=debug OUT=$OUT timeout 570 $G compare --sweeps none --workloads host,rl,discard-one,discard-many > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s; head $(cat .head)" > $OUT/env.txt
