#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 17, run 3 (bf1de83): cuda_test and daemon_cuda_test on the GPU; the 1 GiB discard pool in turns (floor, vramd, vramd holding a context) with each chunk's create and export timed; the RL step and the 64 GiB discard pool with and without the context; what a given-back backup's pages cost in a huge-page tmpfs.
G=tools/gpu-prepare.sh
B=$PWD/build
export VRAMD_BIN=$B/vramd VRAMCTL_BIN=$B/vramctl VRAM_BUILD=$B
SECONDS=0
left() { echo $((560 - SECONDS)); }
timeout 60 $G exec build/tests/runner build/tests/gpu/cuda_test build/tests/daemon_cuda_test > $OUT/ctests.txt 2>&1
echo "ctests rc=$? at ${SECONDS}s"; tail -1 $OUT/ctests.txt
W=$OUT/g1; mkdir -p $W
for k in 1 2 3 4 5; do
  timeout 30 $G exec build/bench/gpu_raw --sizes 1 --policies discard --no-gap --cycles 10 --run-ms 200 > $W/raw-$k.txt 2>&1
  BENCH_DAEMON_LOG=debug timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 --run-ms 200 > $W/vramd-$k.txt 2>&1
  VRAM_CUDA_CONTEXT=1 BENCH_DAEMON_LOG=debug timeout 30 $G exec build/bench/gpu_vramd --sizes 1 --policies discard --cycles 10 --run-ms 200 > $W/ctx-$k.txt 2>&1
done
echo "1g done at ${SECONDS}s"
for k in 1 2 3 4 5; do grep -h "p50" $W/raw-$k.txt $W/vramd-$k.txt $W/ctx-$k.txt; done
for v in none ctx; do
  mkdir -p $OUT/c-$v
  [ $(left) -gt 70 ] || break
  if [ $v = ctx ]; then export VRAM_CUDA_CONTEXT=1; fi
  OUT=$OUT/c-$v timeout $(left) $G compare --sweeps none --workloads rl,discard-one --backends vramd,vramd-retain --run-ms 200 > $OUT/c-$v.txt 2>&1
  unset VRAM_CUDA_CONTEXT
  echo "compare $v done at ${SECONDS}s"
  grep -E "wake|discard, 64|engine pause" $OUT/c-$v.txt | head -8
done
[ $(left) -gt 40 ] && mkdir -p /tmp/hp && mount -t tmpfs -o huge=within_size,size=40G none /tmp/hp && timeout $(left) $G exec python3 bench/host_pin.py --dir /tmp/hp --kinds memfd --threads 8,16 --slices 256 --rounds 2 --no-overlap > $OUT/host_pin.txt 2>&1; umount /tmp/hp
cat $OUT/host_pin.txt
rm -f $OUT/c-*/compare/*.png
tar czf $OUT/r3.tgz -C $OUT g1 c-none c-ctx && rm -rf $OUT/g1 $OUT/c-none $OUT/c-ctx
echo "end at ${SECONDS}s"
