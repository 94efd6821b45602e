#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 7 (HEAD): bench/compare.py's sweeps (size 1-128
# GiB, allocation count 1-4096, mappers 1-8), three cycles a point, each
# sweep its own invocation so that one cut short leaves the others;
# everything packed into $OUT/all.tgz after each.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
S=$(date +%s)
for sw in size count mappers; do
  case $sw in size) t=170 ;; count) t=150 ;; mappers) t=100 ;; esac
  OUT=$W/$sw timeout $t $G compare --workloads none --sweeps $sw --sweep-cycles 3 > $W/$sw.log 2>&1
  echo "$sw rc $? $(( $(date +%s) - S ))s; head $(cat .head)" >> $W/env.txt
  rm -f $W/$sw/compare/logs.tgz
  tar czf $OUT/all.tgz -C $W .
done
cp $W/env.txt $OUT/env.txt
