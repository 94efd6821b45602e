#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 15, run 3: copy engines against SM copies right after a release; the copy rate against the idle time after a release.
G=tools/gpu-prepare.sh
P="timeout 120 $G exec python3 bench/copy_probe.py --cycles 7"
f=$OUT/copy_sm.txt
for r in 1 2; do
  for g in 0 20; do
    echo "== round $r, gap $g ms" >> $f
    $P --gap $g --cases whole,sm-whole,lanes,sm-lanes >> $f 2>&1
  done
done
echo "== gap 0, grid 264 x 1024" >> $f
$P --gap 0 --cases sm-whole,sm-lanes --sm-blocks 264 --sm-threads 1024 >> $f 2>&1
echo "== gap 0, grid 1056 x 256" >> $f
$P --gap 0 --cases sm-whole,sm-lanes --sm-blocks 1056 --sm-threads 256 >> $f 2>&1
for g in 2 5 10 50 100; do
  echo "== gap $g ms" >> $OUT/copy_gap.txt
  $P --gap $g --cases whole,lanes >> $OUT/copy_gap.txt 2>&1
done
cat $f $OUT/copy_gap.txt
