#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 15, run 2: issue 11's figures at the build's head.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
FIGURES_RUN_MS=200 tools/gpu-prepare.sh figures > $OUT/figures.log 2>&1
echo rc=$?; tail -5 $OUT/figures.log; cat $OUT/figures.txt | head -80
