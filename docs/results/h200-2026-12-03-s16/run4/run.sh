#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 16, run 4 (a208df8): the host workload's default pause with saves in parts, the backup faulted in ahead over the whole layout.
mkdir -p $OUT/parts
OUT=$OUT/parts timeout 100 tools/gpu-prepare.sh compare --sweeps none --workloads host --backends vramd,vramd-retain --run-ms 200 > $OUT/parts.txt 2>&1
grep "^| host\|^| same\|^- vramd" $OUT/parts.txt
rm -rf $OUT/parts
