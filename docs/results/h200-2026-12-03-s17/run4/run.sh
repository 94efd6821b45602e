#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 17, run 4 (0e8f3dc): the size and count sweeps with plots, 5 cycles, in the time left.
G=tools/gpu-prepare.sh
SECONDS=0
for s in size count; do
  left=$((370 - SECONDS)); [ $left -gt 60 ] || break
  mkdir -p $OUT/$s
  OUT=$OUT/$s timeout $left $G compare --workloads none --sweeps $s --sweep-cycles 5 --run-ms 200 > $OUT/$s.txt 2>&1
  echo "$s rc=$? at ${SECONDS}s"
  rm -rf $OUT/$s/compare/logs.tgz
done
tail -30 $OUT/size.txt
tar czf $OUT/sweeps.tgz -C $OUT size count 2>/dev/null && rm -rf $OUT/size $OUT/count
# then, on the same machine: OUT=$OUT/mappers tools/gpu-prepare.sh compare --workloads none --sweeps mappers --sweep-cycles 5 --run-ms 200
