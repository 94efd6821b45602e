#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 13, device run 1: the GPU C tests (the restore in parts bit for
# bit), then the host and RL rows with 200 ms of work before each pause:
# upstream and the pipelined restore (this build) side by side, then the
# restore before it (build/old, 810bcc6) alone.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
pack() { tar czf $OUT/all.tgz -C $OUT w 2>/dev/null; }
TEST_TIMEOUT=120 VRAM_TEST_VERBOSE=1 timeout -s INT 100 $G exec build/tests/runner build/tests/gpu/cuda_test build/tests/client_cuda_test > $W/ctests.log 2>&1
grep -E "^(ok|FAIL|skip) |passed" $W/ctests.log; pack
VRAM_LOG=debug OUT=$W/new1 timeout -s INT 330 $G compare --workloads host,rl --sweeps none --run-ms 200 > $W/new1.log 2>&1
pack
b=$PWD/build/old
VRAM_LOG=debug VRAMD_BIN=$b/vramd VRAMCTL_BIN=$b/vramctl VRAM_BUILD=$b OUT=$W/old1 \
	timeout -s INT 120 $G exec python3 bench/compare.py --backends vramd,vramd-retain \
	--workloads host,rl --sweeps none --run-ms 200 > $W/old1.log 2>&1
rm -rf $W/old1/logs; pack
for f in new1 old1; do echo "== $f"; cat $W/$f/compare.md 2>/dev/null | head -60 || tail -5 $W/$f.log; done
