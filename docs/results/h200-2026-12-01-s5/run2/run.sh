#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 5, device run 2: the pipelined save (host and RL, vramd and the
# floor, with libvram's and vramd's logs), host_pin's copy rates, then as
# much of tms_test.py as fits.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
VRAM_LOG=debug OUT=$OUT/cmp timeout $(left 330) $G compare --sweeps none --workloads host,rl --backends vramd,vramd-retain,raw > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
tar czf $OUT/cmp.tgz -C $OUT cmp 2>/dev/null && rm -rf $OUT/cmp
timeout $(left 420) $G exec python3 bench/host_pin.py --threads 8 --slices 256 --rounds 1 --no-overlap > $OUT/host_pin.txt 2>&1
echo "host_pin rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
TEST_TIMEOUT=200 VRAM_TEST_VERBOSE=1 timeout $(left 570) $G exec build/tests/runner tests/gpu/tms_test.py > $OUT/tms.log 2>&1
echo "tms rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
