#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 17, run 1: the GPU tests at f181ec4 (first since 780b426), then where the 64 GiB discard pause goes (daemon at debug, 9 cycles; export_probe's free shapes at 64 GiB) and the default host pause against the fault-in threads.
G=tools/gpu-prepare.sh
B=$PWD/build
export VRAMD_BIN=$B/vramd VRAMCTL_BIN=$B/vramctl VRAM_BUILD=$B
SECONDS=0
TEST_TIMEOUT=180 VRAM_TEST_VERBOSE=1 timeout 470 $G exec build/tests/runner build/tests/gpu/* build/tests/daemon_cuda_test build/tests/client_cuda_test tests/gpu/torch_test.py tests/gpu/tms_test.py > $OUT/gputests.txt 2>&1
echo "gpu tests rc=$? in ${SECONDS}s"; tail -3 $OUT/gputests.txt
left() { echo $((585 - SECONDS)); }
mkdir -p $OUT/d1
[ $(left) -gt 40 ] && COMPARE_VRAMD_ARGS="--log-level debug" OUT=$OUT/d1 timeout $(left) $G compare --sweeps none --workloads discard-one --backends tms,vramd,raw --run-ms 200 --cycles 9 > $OUT/d1.txt 2>&1
echo "d1 done at ${SECONDS}s"
[ $(left) -gt 30 ] && timeout $(left) $G exec python3 bench/export_probe.py --sizes-gib 64 --cycles 5 --gap 5 --out $OUT/export64.json > $OUT/export64.txt 2>&1
echo "export done at ${SECONDS}s"
for t in 16 4; do
  mkdir -p $OUT/pop$t
  [ $(left) -gt 25 ] && VRAM_POPULATE_THREADS=$t OUT=$OUT/pop$t timeout $(left) $G compare --sweeps none --workloads host --backends vramd --run-ms 200 > $OUT/pop$t.txt 2>&1
  echo "pop$t done at ${SECONDS}s"
done
rm -rf $OUT/*/compare/*.png
tar czf $OUT/diag.tgz -C $OUT d1 pop16 pop4 export64.json 2>/dev/null && rm -rf $OUT/d1 $OUT/pop16 $OUT/pop4 $OUT/export64.json
ls $OUT
