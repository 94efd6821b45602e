#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 6, device run 7: the pump turned on after a resume's own creates
# (first stroke one period later): the 64 GiB discard pool and the RL step
# through vramd and the floor, then the RL step through vramd without the
# pump.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout -s INT 150 $G exec python3 bench/compare.py --workloads discard-one,rl --backends vramd,raw --sweeps none --out $OUT/pump > $OUT/pump.log 2>&1
echo "pump rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_CUDA_PUMP_MS=0 timeout -s INT 80 $G exec python3 bench/compare.py --workloads discard-one,rl --backends vramd --sweeps none --out $OUT/nopump > $OUT/nopump.log 2>&1
echo "nopump rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for d in pump nopump; do tar czf $OUT/$d-logs.tgz -C $OUT/$d logs vramd.log 2>/dev/null; rm -rf $OUT/$d/logs; done
