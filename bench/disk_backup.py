#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The disk backup policy's rate against the disk's own, in one run.

Starts a vramd (host backend by default; --backend cuda on a GPU machine)
whose backup_dir is DIR, makes a VRAM_POLICY_DISK pool of SIZE, fills it,
and times pause (the saver writes the backup file and syncs it) and resume
(it reads the file back; the daemon dropped its pages from the page cache
after the pause, so the read is from the disk). On the same directory, in
the same run, dd writes SIZE with conv=fsync and reads it back after its
pages were dropped. Prints MB/s for each and the ratios:

    bench/disk_backup.py [--dir DIR] [--size-mib N] [--rounds R]

VRAMD_BIN and VRAM_BUILD as for the tests (default build/). The pool's
backup is released after each resume (VRAM_POOL_RELEASE_BACKUP, the
compat layers' default), so every pause writes a sparse file again, as
the first pause of a retained backup does.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python")]
os.environ.setdefault("VRAM_BUILD", os.path.join(ROOT, "build"))
os.environ.setdefault("VRAMD_BIN", os.path.join(os.environ["VRAM_BUILD"], "vramd"))

import vram  # noqa: E402
import vramtest  # noqa: E402

MiB = 1 << 20


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def dd_rates(d, size):
    path = os.path.join(d, "dd.bench")
    bs = 4 * MiB
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", f"bs={bs}", f"count={size // bs}",
                    "conv=fsync", "status=none"], check=True)
    w = size / (time.perf_counter() - t0)
    drop_cache(path)
    t0 = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", f"bs={bs}", "status=none"], check=True)
    r = size / (time.perf_counter() - t0)
    os.unlink(path)
    return w, r


cpu = []  # (pause, resume) CPU seconds per GiB in this process, per round


def vram_rates(d, size, backend):
    conf = os.path.join(d, "vramd.conf")
    with open(conf, "w") as f:
        f.write(f"backup_dir = {d}\n")
    extra = ["--config", conf, "--ack-timeout-ms", "60000"]
    daemon = vramtest.Daemon(backend=backend, capacity=f"{2 * size // MiB}M", devices=1, extra=extra)
    try:
        c = vram.connect(daemon.socket, name="disk-bench")
        p = c.create_pool("disk-bench", policy=vram.Policy.DISK, reserve_bytes=size, retain_backup=False)
        p.reserve(size)
        if backend == "host":
            v = p.view(p.base, size)
            v[:] = os.urandom(MiB) * (size // MiB)
        # The copies run in this process (the saver and restorer are
        # libvram's, here): its CPU time says what they cost, however
        # loaded the machine is.
        c0 = time.process_time()
        t0 = time.perf_counter()
        p.pause()
        t1 = time.perf_counter()
        c1 = time.process_time()
        p.resume()
        t2 = time.perf_counter()
        c2 = time.process_time()
        cpu.append(((c1 - c0) * (1 << 30) / size, (c2 - c1) * (1 << 30) / size))
        c.close()
        if os.environ.get("VRAM_BENCH_VERBOSE"):
            for line in daemon.log().splitlines():
                if " took " in line:
                    print("   ", line.strip())
        return size / (t1 - t0), size / (t2 - t1)
    finally:
        daemon.stop()
        os.unlink(conf)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="backup_dir to measure (default: a new one in /var/tmp)")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="host")
    a = ap.parse_args()
    size = a.size_mib * MiB
    d = a.dir or tempfile.mkdtemp(prefix="vram-disk-bench-", dir="/var/tmp")
    os.makedirs(d, exist_ok=True)
    print(f"disk backup, {a.size_mib} MiB in {d}, {a.rounds} rounds (MB/s)")
    print(f"{'round':>5} {'dd write':>9} {'pause':>9} {'ratio':>6} {'dd read':>9} {'resume':>9} {'ratio':>6}")
    sums = [0.0] * 4
    for i in range(a.rounds):
        # Alternated, so that a disk that drifts over the run is seen by both.
        dw, dr = dd_rates(d, size)
        pw, pr = vram_rates(d, size, a.backend)
        for k, x in enumerate((dw, pw, dr, pr)):
            sums[k] += x
        print(f"{i + 1:>5} {dw / 1e6:9.0f} {pw / 1e6:9.0f} {pw / dw:6.2f} {dr / 1e6:9.0f} {pr / 1e6:9.0f} {pr / dr:6.2f}")
    dw, pw, dr, pr = (x / a.rounds for x in sums)
    print(f"{'mean':>5} {dw / 1e6:9.0f} {pw / 1e6:9.0f} {pw / dw:6.2f} {dr / 1e6:9.0f} {pr / 1e6:9.0f} {pr / dr:6.2f}")
    pc = sum(c[0] for c in cpu) / len(cpu)
    rc = sum(c[1] for c in cpu) / len(cpu)
    print(f"client CPU per GiB: pause {pc * 1e3:.0f} ms, resume {rc * 1e3:.0f} ms")
    if a.dir is None:
        os.rmdir(d)


if __name__ == "__main__":
    main()
