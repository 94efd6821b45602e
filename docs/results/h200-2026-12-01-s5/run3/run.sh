#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 5, device run 3: the whole comparison (no sweeps) with host
# backups in a tmpfs mounted huge=within_size (host_backup_dir), libvram's
# and vramd's logs.
export VRAMD_BIN=$PWD/build/vramd VRAMCTL_BIN=$PWD/build/vramctl VRAM_BUILD=$PWD/build
G=tools/gpu-prepare.sh
echo "head $(cat .head)" > $OUT/env.txt
S=$(date +%s)
H=/mnt/vramd-huge
ARGS=
if mkdir -p $H && mount -t tmpfs -o huge=within_size,size=80G,mode=0755 vramd-huge $H; then
	ARGS="--set host_backup_dir=$H"
	# Does the mount give huge pages? 1 GiB file, faulted in.
	python3 - $H >> $OUT/env.txt 2>&1 <<'PY'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_RDWR, 0o600)
os.ftruncate(fd, 1 << 30)
m = mmap.mmap(fd, 1 << 30)
for i in range(0, 1 << 30, 1 << 21):
    m[i] = 1
hp = [l for l in open("/proc/meminfo") if l.startswith(("ShmemHugePages", "ShmemPmdMapped"))]
print("probe 1 GiB in huge tmpfs:", " ".join(x.split(":")[0] + "=" + x.split()[1] + "kB" for x in hp))
PY
fi
echo "vramd args: $ARGS" >> $OUT/env.txt
VRAM_LOG=debug COMPARE_VRAMD_ARGS="$ARGS" OUT=$OUT/cmp timeout -s INT 520 $G compare --sweeps none --workloads host,rl,discard-one,discard-many > $OUT/compare.log 2>&1
echo "compare rc $? $(( $(date +%s) - S ))s" >> $OUT/env.txt
tar czf $OUT/cmp.tgz -C $OUT cmp 2>/dev/null && rm -rf $OUT/cmp
umount $H 2>/dev/null
