#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 13, device run 4 (762f173's build): the GPU C tests, then issue
# 11's figures with 200 ms of device work before each pause.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w 2>/dev/null; }
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 100 $G exec build/tests/runner build/tests/gpu/cuda_test build/tests/client_cuda_test > $W/ctests.log 2>&1
grep -E "passed" $W/ctests.log; grep "^FAIL" $W/ctests.log; pack
( while sleep 60; do pack; done ) & t=$!
FIGURES_RUN_MS=200 OUT=$W timeout -s INT 470 $G figures > $W/figures.log 2>&1
kill $t; pack
tail -70 $W/figures/figures.txt 2>/dev/null || tail -20 $W/figures.log
