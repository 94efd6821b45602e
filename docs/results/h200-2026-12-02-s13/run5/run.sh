#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 13, device run 5: the 64 GiB discard tensor again, twice, all
# backends, with 200 ms of work before each pause.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
for r in 1 2; do
	VRAM_LOG=debug OUT=$W/d$r timeout -s INT 150 $G compare --workloads discard-one --sweeps none --run-ms 200 --cycles 7 > $W/d$r.log 2>&1
	grep -E "discard, 64" $W/d$r/compare/compare.md | head -2
	tar czf $OUT/all.tgz -C $OUT w
done
