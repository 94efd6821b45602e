#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 16, run 1: a pause then a resume at once, the release at the end of the save (vramd) or chunk by chunk during it (torch_memory_saver).
G=tools/gpu-prepare.sh
P="timeout 150 $G exec python3 bench/copy_probe.py --cycles 7 --gap 100"
f=$OUT/pause_release.txt
for r in 1 2; do
  for n in 20 256; do
    echo "== round $r, $n chunks" >> $f
    $P --chunks $n --cases pause-end,pause-each,pause-lag,save-whole,whole >> $f 2>&1
  done
done
echo "== 64 chunks" >> $f
$P --chunks 64 --cases pause-end,pause-each,pause-lag >> $f 2>&1
cat $f
