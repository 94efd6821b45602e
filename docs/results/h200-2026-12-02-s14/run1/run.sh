#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 14 run 1: where the export's time goes; whether another process's chunks copy slower.
W=$OUT/w; mkdir -p $W
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build; G=tools/gpu-prepare.sh
pack() { tar czf $OUT/all.tgz -C $OUT w; }
mkdir -p /tmp/st && for d in .debs/extra/*.deb; do dpkg -x $d /tmp/st; done
ST="env LD_LIBRARY_PATH=/tmp/st/usr/lib/x86_64-linux-gnu /tmp/st/usr/bin/strace"
nvidia-smi --query-gpu=name,driver_version --format=csv > $W/gpu.txt 2>&1
{ build/xprobe/export_time 0 20 1; build/xprobe/export_time 1 20 1; build/xprobe/export_time 0 10 16; } > $W/export_time.txt 2>&1
$ST -f -T -tt -e trace=openat,ioctl,close,fcntl,mmap,munmap -o $W/export_strace.txt build/xprobe/export_time 0 3 1 > $W/export_strace_out.txt 2>&1
pack
timeout 200 $G exec python3 bench/copy_probe.py --cases chunks-overlap,peer-made,peer-paced,chunks-overlap,peer-made,peer-paced --cycles 5 --out $W/copy_peer.json > $W/copy_peer.txt 2>&1
pack
timeout 200 $G exec python3 bench/copy_probe.py --pin-slice-mib 256 --cases chunks-overlap,peer-made,peer-paced --cycles 5 > $W/copy_peer_slices.txt 2>&1
pack
echo done
