#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 6, device run 3: the KV-create probe's modes (burst, spread,
# the floor's engine batched and interleaved), then the RL step with the
# soft gate's linger.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout 150 $G exec python3 bench/create_probe.py --cycles 4 --out $OUT/create_probe2.json > $OUT/create_probe2.txt 2>&1
echo "probe rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_LOG=debug OUT=$OUT/cmp timeout -s INT 300 $G compare --sweeps none --workloads rl > $OUT/compare-rl.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
tar czf $OUT/cmp.tgz -C $OUT cmp 2>/dev/null && rm -rf $OUT/cmp
