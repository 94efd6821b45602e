#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 13, device run 6: whether the backup's pages (a memfd's 4 KiB
# against a huge=within_size tmpfs file's 2 MiB) or its registrations (one
# call against 256 MiB slices from each chunk's start) cost the restore's
# copy rate; bench/copy_probe.py, 16 GiB in 20 chunks, two rounds in turns.
W=$OUT/w; mkdir -p $W /tmp/hb
mount -t tmpfs -o huge=within_size,size=24G tmpfs /tmp/hb && grep " /tmp/hb " /proc/mounts > $W/mount.txt
one() { # tag args
	local t=$1; shift
	timeout -s INT 60 tools/gpu-prepare.sh exec python3 bench/copy_probe.py --cases chunks-map,chunks-overlap,map-first,save-chunks "$@" > $W/$t.txt 2>&1
	echo "== $t"; cat $W/$t.txt; tar czf $OUT/all.tgz -C $OUT w
}
for r in 1 2; do
	one memfd-one-$r
	one memfd-slices-$r --pin-slice-mib 256
	one file-one-$r --backup-dir /tmp/hb
	one file-slices-$r --backup-dir /tmp/hb --pin-slice-mib 256
done
umount /tmp/hb
