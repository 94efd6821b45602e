#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 12, device run 2 (27ef460's build): issue 11's figures with 200 ms
# of device work before each pause (the compare, the 1 GiB pair against the
# floor with the same work, the ping, copy_probe).
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
W=$OUT/w; mkdir -p $W
( while sleep 60; do tar czf $OUT/all.tgz -C $OUT w 2>/dev/null; done ) & t=$!
FIGURES_RUN_MS=200 OUT=$W timeout -s INT 570 tools/gpu-prepare.sh figures > $W/figures.log 2>&1
kill $t; tail -60 $W/figures/figures.txt 2>/dev/null || tail -20 $W/figures.log
tar czf $OUT/all.tgz -C $OUT w
