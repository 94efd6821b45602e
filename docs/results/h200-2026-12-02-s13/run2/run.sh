#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 13, device run 2: the retained 16 GiB host restore with the copy
# settings varied (pieces, streams per lane), in turns, vramd alone.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w 2>/dev/null; }
one() { # tag env...
	local t=$1; shift
	env VRAM_LOG=debug "$@" OUT=$W/$t timeout -s INT 90 $G exec python3 bench/compare.py --backends vramd-retain \
		--workloads host --sweeps none --run-ms 200 --cycles 7 > $W/$t.log 2>&1
	rm -rf $W/$t/logs; echo "== $t $*"; grep -E "retain_cpu_backup|restores in parts|retain:" $W/$t/compare.md | head -3; pack
}
for r in 1 2; do
	one def$r X=1
	one p64-$r VRAM_CUDA_COPY_PIECE_MB=64
	one s1-$r VRAM_CUDA_COPY_STREAMS=1
	one s4-$r VRAM_CUDA_COPY_STREAMS=4
	one p1g-$r VRAM_CUDA_COPY_PIECE_MB=1024
done
