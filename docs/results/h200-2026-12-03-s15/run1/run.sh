#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 15, run 1: libvram's two-lane restore order against one set of streams with events.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/gpu.txt 2>&1
C=lanes,lanes-events,chunks-overlap,map-first,whole
for r in 1 2; do
  echo "== round $r, gap 0" >> $OUT/copy_lanes.txt
  timeout 200 $G exec python3 bench/copy_probe.py --gap 0 --cycles 7 --cases $C >> $OUT/copy_lanes.txt 2>&1
  echo "== round $r, gap 0, 256 MiB pin slices" >> $OUT/copy_lanes.txt
  timeout 200 $G exec python3 bench/copy_probe.py --gap 0 --cycles 7 --pin-slice-mib 256 --cases lanes,lanes-events,chunks-overlap >> $OUT/copy_lanes.txt 2>&1
done
cat $OUT/copy_lanes.txt
