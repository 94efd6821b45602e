#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 5, device run 4: a retained 16 GiB restore with 1, 2 and 4 copy streams.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
for s in 1 2 4; do
	VRAM_CUDA_COPY_STREAMS=$s VRAM_LOG=debug OUT=$OUT/s$s timeout 60 $G exec python3 bench/compare.py --workloads host --backends vramd-retain --sweeps none > $OUT/s$s.log 2>&1
	echo "streams $s rc $?"; grep -h "restored in" $OUT/s$s/logs/*.log | sed 's/.*restored in/restored in/' | tr '\n' ' '; echo
	grep -h "saved" $OUT/s$s/logs/*.log | sed 's/.*saved/saved/' | tr '\n' ' '; echo
done > $OUT/streams.txt 2>&1
tar czf $OUT/streams.tgz -C $OUT s1 s2 s4 2>/dev/null; rm -rf $OUT/s1 $OUT/s2 $OUT/s4
