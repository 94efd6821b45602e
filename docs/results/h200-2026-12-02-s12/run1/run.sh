#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 12, device run 1 (27ef460's build): the C GPU tests, torch_test,
# then three rounds in turns of the 1 GiB discard pair, back to back and
# with 200 ms of device work before each pause, for the floor, vramd at
# 2a351f6 (build/old) and vramd at HEAD.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
nvidia-smi > $W/nvidia-smi.txt 2>&1; cat .head > $W/head.txt
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 100 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/c_tests.txt 2>&1
tail -3 $W/c_tests.txt; pack
TEST_TIMEOUT=170 VRAM_TEST_VERBOSE=1 timeout -s INT 175 $G exec build/tests/runner tests/gpu/torch_test.py > $W/torch_test.txt 2>&1
tail -3 $W/torch_test.txt; pack
for k in 1 2 3; do
  for r in 0 200; do
    timeout 40 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 --run-ms $r > $W/raw-$r-$k.txt 2>&1
    VRAMD_BIN=$PWD/build/old/vramd BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 --run-ms $r > $W/old-$r-$k.txt 2>&1
    BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 --run-ms $r > $W/new-$r-$k.txt 2>&1
  done
  pack
done
grep -H 'p50' $W/raw-* $W/old-* $W/new-*
pack
