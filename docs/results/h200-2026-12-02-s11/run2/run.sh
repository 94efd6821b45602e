#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 11, device run 2 (build of .head): export_probe's free cases at
# 1 and 16 GiB; the 1 GiB discard pair in three rounds, in turns: the
# floor, vramd at 2a351f6 (build/old/vramd: the fd is the daemon's only
# reference), vramd at HEAD (the handle kept, released last), with both
# logs; then torch_test and tms_test.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
{ echo "head $(cat .head)"; nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; } > $W/env.txt 2>&1
timeout 120 $G exec python3 bench/export_probe.py --sizes-gib 1,16 --cycles 9 --gap 5 --out $W/export_probe.json > $W/export_probe.txt 2>&1
echo "export_probe rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
for k in 1 2 3; do
  timeout 40 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $W/raw1g-$k.txt 2>&1
  VRAMD_BIN=$PWD/build/old/vramd VRAM_LOG=debug BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 > $W/old1g-$k.txt 2>&1
  VRAM_LOG=debug BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1,16 --policies discard --cycles 10 > $W/new1g-$k.txt 2>&1
  echo "round $k $(( $(date +%s) - S ))s" >> $W/env.txt; pack
done
TEST_TIMEOUT=170 VRAM_TEST_VERBOSE=1 timeout -s INT 180 $G exec build/tests/runner tests/gpu/torch_test.py > $W/torch_test.txt 2>&1
echo "torch_test rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
left=$(( 570 - ($(date +%s) - S) ))
TEST_TIMEOUT=$left VRAM_TEST_VERBOSE=1 timeout -s INT $left $G exec build/tests/runner tests/gpu/tms_test.py > $W/tms_test.txt 2>&1
echo "tms_test rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
