#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 8, device run 4: transitions that poll (transition_spin_ms,
# VRAM_SPIN_MS) against the same build with polling off, in one run: the
# 1 GiB discard pool (alternating, twice), its floor, and the side-by-side
# on the RL step and the discard workloads.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
NOSPIN=$OUT/vramd-nospin
printf '#!/bin/sh\nexec %s --set transition_spin_ms=0 "$@"\n' "$PWD/build/vramd" > $NOSPIN
chmod +x $NOSPIN
echo "head $(cat .head); $(nproc) cpus" > $OUT/env.txt
S=$(date +%s)
for k in 1 2; do
	BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $OUT/v1g-on-$k.txt 2>&1
	BENCH_DAEMON_LOG=1 VRAM_SPIN_MS=0 VRAMD_BIN=$NOSPIN timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $OUT/v1g-off-$k.txt 2>&1
done
timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $OUT/raw1g.txt 2>&1
echo "1g rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
OUT=$OUT/on timeout -s INT 330 $G compare --sweeps none --workloads rl,discard-one,discard-many > $OUT/cmp-on.log 2>&1
echo "compare on rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
VRAM_SPIN_MS=0 VRAMD_BIN=$NOSPIN OUT=$OUT/off timeout -s INT 150 $G exec python3 bench/compare.py --sweeps none --workloads rl,discard-one,discard-many --backends vramd > $OUT/cmp-off.log 2>&1
echo "compare off rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
for f in $OUT/v1g-*.txt $OUT/raw1g.txt; do echo "== $f"; grep -E "p50" $f; done > $OUT/summary.txt
cp $OUT/on/compare/compare.md $OUT/on.md 2>/dev/null
cp $OUT/off/compare.md $OUT/off.md 2>/dev/null
rm -f $NOSPIN
cd $OUT && tar czf all.tgz on off v1g-*.txt raw1g.txt cmp-on.log cmp-off.log && rm -rf on off v1g-*.txt raw1g.txt cmp-on.log cmp-off.log
