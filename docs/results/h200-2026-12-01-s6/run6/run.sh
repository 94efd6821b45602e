#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 6, device run 6: the 1 GiB discard pool (floor, vramd), the
# 64-client ping, the whole comparison with the clearing pump and the
# soft hold's linger, then the RL step through vramd without the pump.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout 40 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $OUT/raw1g.txt 2>&1
BENCH_DAEMON_LOG=1 timeout 40 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $OUT/vramd1g.txt 2>&1
echo "1g rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
BENCH_ONLY=ping timeout 60 $G exec build/bench/rpc > $OUT/rpc.txt 2>&1
echo "rpc rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_LOG=debug OUT=$OUT/cmp timeout -s INT 400 $G compare --sweeps none --workloads host,rl,discard-one,discard-many > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_CUDA_PUMP_MS=0 OUT=$OUT/nopump timeout -s INT 60 $G exec python3 bench/compare.py --workloads rl --backends vramd --sweeps none --out $OUT/nopump > $OUT/nopump.log 2>&1
echo "nopump rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
tar czf $OUT/cmp.tgz -C $OUT cmp nopump 2>/dev/null && rm -rf $OUT/cmp $OUT/nopump
