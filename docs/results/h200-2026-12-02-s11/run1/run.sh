#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 11, device run 1 (build of .head): export_probe at three
# alignments of the range; the ping A/B of the caller's poll with the
# event thread (build/old = 2a351f6, build = HEAD), five rounds in turns;
# the socket floor; the C GPU tests.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w; }
S=$(date +%s)
{ echo "head $(cat .head)"; nproc; nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; } > $W/env.txt 2>&1
timeout 170 $G exec python3 bench/export_probe.py --sizes-gib 64,1 --aligns-mib 0,512,2048 --cycles 7 --gap 5 --out $W/export_probe.json > $W/export_probe.txt 2>&1
echo "export_probe rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
BENCH_ONLY=ping timeout 220 $G exec python3 bench/rpc_ab.py build/old build --rounds 5 --iters 20000 --configs 0,2 > $W/rpc_ab.txt 2>&1
echo "rpc_ab rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
for r in 1 2; do
  timeout 30 $G exec build/bench/sock_probe 64 4 5000 >> $W/sock.txt 2>&1
done
echo "sock rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 90 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test > $W/ctests.txt 2>&1
echo "ctests rc $? $(( $(date +%s) - S ))s" >> $W/env.txt; pack
