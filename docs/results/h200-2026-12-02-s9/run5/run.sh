#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 9, device run 5 (HEAD): the 1 GiB discard pair again, five
# rounds in turns: the floor, 5802688 (build-old), HEAD, HEAD with one
# reading thread; the 64-client ping with the clients' CPU; torch_test.py.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
W=$OUT/w; mkdir -p $W
S=$(date +%s)
st() { echo "$1 rc $2 $(( $(date +%s) - S ))s" >> $W/env.txt; tar czf $OUT/all.tgz -C $W .; }
OLD="VRAMD_BIN=$PWD/build-old/vramd VRAMCTL_BIN=$PWD/build-old/vramctl VRAM_BUILD=$PWD/build-old"
printf '#!/bin/sh\nexec %s/build/vramd --set io_threads=1 "$@"\n' "$PWD" > $W/vramd-io1; chmod +x $W/vramd-io1
echo "head $(cat .head); $(nproc) cpus; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > $W/env.txt
for k in 1 2 3 4 5; do
  timeout 20 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 > $W/raw1g-$k.txt 2>&1
  env $OLD BENCH_DAEMON_LOG=1 timeout 30 $G exec build-old/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/old1g-$k.txt 2>&1
  BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/new1g-$k.txt 2>&1
  VRAMD_BIN=$W/vramd-io1 BENCH_DAEMON_LOG=1 timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 > $W/io1g-$k.txt 2>&1
done; st 1g $?
env $OLD BENCH_ONLY=ping timeout 40 $G exec build/bench/rpc > $W/ping-old.txt 2>&1
for n in 1 2 4; do BENCH_ONLY=ping BENCH_IO_THREADS=$n timeout 40 $G exec build/bench/rpc > $W/ping-io$n.txt 2>&1; done; st ping $?
TEST_TIMEOUT=240 VRAM_TEST_VERBOSE=1 timeout -s INT 300 $G exec build/tests/runner tests/gpu/torch_test.py > $W/torch.log 2>&1; st torch $?
{ grep -E 'passed, .* failed' $W/torch.log; for f in $W/ping-*.txt; do echo "$(basename $f): $(grep '|      64 |' $f)"; done; grep -H p50 $W/raw1g-*.txt $W/old1g-*.txt $W/new1g-*.txt $W/io1g-*.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/all.tgz -C $W .
