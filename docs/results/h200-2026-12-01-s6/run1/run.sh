#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 6, device run 1: the KV-create probe, then the whole comparison
# (no sweeps) at HEAD with libvram's and vramd's debug logs.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
timeout 90 $G exec python3 bench/create_probe.py --cycles 4 --out $OUT/create_probe.json > $OUT/create_probe.txt 2>&1
echo "probe rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_LOG=debug OUT=$OUT/cmp timeout -s INT 440 $G compare --sweeps none --workloads host,rl,discard-one,discard-many > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
tar czf $OUT/cmp.tgz -C $OUT cmp 2>/dev/null && rm -rf $OUT/cmp
