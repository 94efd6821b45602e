#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 11, device run 5 (0e94479's build, the machine of run 4 still
# warm): two commands sent inline, torch_test, then rounds 2 and 3 of
# run 4's discard pairs. 222 s of device time were left after the first,
# too few for tms_test.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
TEST_TIMEOUT=170 VRAM_TEST_VERBOSE=1 timeout -s INT 175 $G exec build/tests/runner tests/gpu/torch_test.py > $W/torch_test.txt 2>&1
for k in 2 3; do
  timeout 40 $G exec build/bench/gpu_raw --sizes 1,16 --policies discard --no-gap --cycles 10 > $W/raw-$k.txt 2>&1
  VRAMD_BIN=$PWD/build/old/vramd BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 --run-ms 200 > $W/old-run-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 --run-ms 200 > $W/new-run-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 > $W/new-b2b-$k.txt 2>&1
done
