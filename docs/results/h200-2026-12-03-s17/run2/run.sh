#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 17, run 2: issue 11's figures at f181ec4, with 580 s and the archive packed whatever happens.
G=tools/gpu-prepare.sh
FIGURES_RUN_MS=200 timeout 575 $G figures > $OUT/figures.out 2>&1
echo "figures rc=$?"
[ -f $OUT/figures.tgz ] || { rm -f $OUT/figures/compare/*.png; tar czf $OUT/figures.tgz -C $OUT figures && rm -rf $OUT/figures; }
tail -80 $OUT/figures.txt 2>/dev/null || tail -40 $OUT/figures.out
