#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 16, run 2: issue 11's figures with saves in parts (780b426); then the host workload again with VRAM_SAVE_IN_PARTS=0, the save whole as before, in the same sitting.
G=tools/gpu-prepare.sh
FIGURES_RUN_MS=200 timeout 430 $G figures > $OUT/figures.out 2>&1
tail -60 $OUT/figures.out
mkdir -p $OUT/whole
VRAM_SAVE_IN_PARTS=0 OUT=$OUT/whole timeout 150 $G compare --sweeps none --workloads host --backends vramd,vramd-retain --run-ms 200 > $OUT/whole.txt 2>&1
tail -30 $OUT/whole.txt
