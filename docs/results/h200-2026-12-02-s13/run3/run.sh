#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 13, device run 3: the retained 16 GiB host restore with the
# daemon's chunks capped (--chunk-max), in turns, vramd alone.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w 2>/dev/null; }
one() { # tag args
	local t=$1; shift
	COMPARE_VRAMD_ARGS="$*" VRAM_LOG=debug OUT=$W/$t timeout -s INT 90 $G exec python3 bench/compare.py --backends vramd-retain,tms-retain \
		--workloads host --sweeps none --run-ms 200 --cycles 7 > $W/$t.log 2>&1
	rm -rf $W/$t/logs; echo "== $t $*"; grep -E "retain_cpu_backup|restore\(s\) in parts" $W/$t/compare.md | head -3; pack
}
for r in 1 2; do
	one def$r
	one c128-$r --chunk-max 128M
	one c256-$r --chunk-max 256M
	one c2g-$r --chunk-max 2G
done
