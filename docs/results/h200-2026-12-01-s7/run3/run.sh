#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 7, device run 3: the resume in parts against upstream
# torch_memory_saver on every workload, then the RL step and the host
# workload through vramd with the parts off (VRAM_RESUME_IN_PARTS=0).
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
VRAM_LOG=debug OUT=$OUT/cmp timeout -s INT 420 $G compare --sweeps none --workloads host,rl,discard-one,discard-many > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_RESUME_IN_PARTS=0 VRAM_LOG=debug timeout -s INT 110 $G exec python3 bench/compare.py --workloads rl,host --backends vramd --sweeps none --out $OUT/noparts > $OUT/noparts.log 2>&1
echo "noparts rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
cd $OUT && for d in cmp noparts; do [ -d $d ] && tar czf $d.tgz $d && rm -rf $d; done
