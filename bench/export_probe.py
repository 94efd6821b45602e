# SPDX-License-Identifier: Apache-2.0
"""Whether a chunk's export can run beside its map and set access.

A discard pool's resume in vramd today: the daemon creates the chunk and
exports it as a POSIX fd (~0.85 ms a handle on the H200), the engine
imports, maps and sets access. torch_memory_saver creates, maps and sets
access in the engine and exports nothing, which is the 64 GiB discard
row's gap (docs/gpu.md, "Small pools pay a fixed control cost"). If the
engine created the chunk, it could map it at once and export it on a
second thread for the daemon to hold; this probe measures, in one process
with a context, per cycle and size:

    create                       cuMemCreate
    export                       cuMemExportToShareableHandle alone
    map                          cuMemMap + cuMemSetAccess alone
    serial                       create, export, then map + access
    overlap                      create, then export on a thread beside
                                 map + access (wall time)
    import                       create + export, import, map + access
                                 (vramd's path today, in one process)

and what the reference drop that frees the memory costs (unmap, release
or close, and a device sync), by how the allocation was made and which
reference goes last:

    free-plain                   no shareable handle type (as
                                 torch_memory_saver's): unmap + release
    free-fdtype                  the POSIX fd type, never exported:
                                 unmap + release
    free-exported                exported, the fd closed first: unmap +
                                 release of the creating handle
    free-byfd                    exported, imported and mapped, the
                                 handles released: close of the fd
                                 (bench/gpu_raw's order)
    free-vramd                   exported, imported and mapped, the fd
                                 closed first (the daemon lets go at the
                                 pause's start): unmap + release of the
                                 imported handle (the mapper's)
    free-held                    exported, imported and mapped, with the
                                 creating handle and the fd still held:
                                 unmap + release of the imported handle,
                                 which frees nothing (a vramd mapper's
                                 step in a pause, the daemon's drop after)
    close-mapped                 exported, the creating handle released,
                                 imported and mapped: the fd's close
                                 alone, which frees nothing (vramd's
                                 drop at a pause's start)
    release-mapped               exported with the creating handle kept,
                                 imported and mapped, the fd closed
                                 first: the creating handle's release
                                 alone, which frees nothing (the drop at
                                 a pause's start of a daemon that holds
                                 the handle rather than the fd)
    free-kept                    exported with the creating handle kept,
                                 imported and mapped; the mapper's unmap
                                 and release first: close of the fd, then
                                 release of the creating handle (the
                                 daemon's drop when it keeps the handle)

Each case unmaps, releases and closes what it made and waits --gap ms
before the next (the driver hands the size just freed back at once).

--aligns-mib runs every case again for each alignment of the virtual
range (cuMemAddressReserve's alignment; 0 is the driver's default, the
allocation granularity, as torch_memory_saver and vramd reserve today):
whether a range aligned past 2 MiB maps and sets access faster.

    python3 bench/export_probe.py [--sizes-gib 64,1] [--aligns-mib 0] [--cycles 7] [--gap 5] [--out FILE.json]

It prints one line per size and case: min / median / max ms; without a
CUDA driver it says so and exits 77. With the
fake driver (tests/unit/cuda_fake/libcuda_fake.c as libcuda.so.1 on
LD_LIBRARY_PATH) and --scale it checks its calls without a GPU.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_raw import Driver, skip_without_driver  # noqa: E402

GiB = 1 << 30
POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


class Probe:
    def __init__(self, d, size, align):
        self.d = d
        self.d.prop.requestedHandleTypes = POSIX_FD
        self.size = self.d.round_up(size)
        p = self.d.u64()
        self.d.check("cuMemAddressReserve", ctypes.byref(p), ctypes.c_size_t(self.size),
                     ctypes.c_size_t(align), self.d.u64(0), self.d.u64(0))
        self.ptr = p.value
        if align and self.ptr % align:
            raise RuntimeError(f"cuMemAddressReserve gave {self.ptr:#x}, not aligned to {align:#x}")

        # The same allocation without a shareable handle type.
        self.plain = type(self.d.prop)()
        ctypes.memmove(ctypes.byref(self.plain), ctypes.byref(self.d.prop), ctypes.sizeof(self.plain))
        self.plain.requestedHandleTypes = 0

    def create(self, plain=False):
        h = self.d.u64()
        self.d.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(self.size),
                     ctypes.byref(self.plain if plain else self.d.prop), self.d.u64(0))
        return h.value

    def export(self, h):
        fd = ctypes.c_int(-1)
        self.d.check("cuMemExportToShareableHandle", ctypes.byref(fd), self.d.u64(h),
                     ctypes.c_int(POSIX_FD), self.d.u64(0))
        return fd.value

    def imported(self, fd):
        h = self.d.u64()
        self.d.check("cuMemImportFromShareableHandle", ctypes.byref(h),
                     ctypes.c_void_p(fd), ctypes.c_int(POSIX_FD))
        return h.value

    def map(self, h):
        d = self.d
        d.check("cuMemMap", d.u64(self.ptr), ctypes.c_size_t(self.size), ctypes.c_size_t(0), d.u64(h), d.u64(0))
        d.check("cuMemSetAccess", d.u64(self.ptr), ctypes.c_size_t(self.size), ctypes.byref(d.access),
                ctypes.c_size_t(1))

    def close(self):
        self.d.check("cuMemAddressFree", self.d.u64(self.ptr), ctypes.c_size_t(self.size))

    def drop(self, handles, fds, mapped):
        d = self.d
        if mapped:
            d.check("cuMemUnmap", d.u64(self.ptr), ctypes.c_size_t(self.size))
        for h in handles:
            d.check("cuMemRelease", d.u64(h))
        for fd in fds:
            os.close(fd)
        d.sync()


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t0) * 1e3, r


def case_once(p, name):
    """One cycle of case name; returns its timed ms."""
    if name == "create":
        ms, h = timed(p.create)
        p.drop([h], [], False)
    elif name == "export":
        h = p.create()
        ms, fd = timed(lambda: p.export(h))
        p.drop([h], [fd], False)
    elif name == "map":
        h = p.create()
        ms, _ = timed(lambda: p.map(h))
        p.drop([h], [], True)
    elif name == "serial":
        def run():
            h = p.create()
            fd = p.export(h)
            p.map(h)
            return h, fd
        ms, (h, fd) = timed(run)
        p.drop([h], [fd], True)
    elif name == "overlap":
        def run():
            h = p.create()
            out = {}
            t = threading.Thread(target=lambda: out.setdefault("fd", p.export(h)))
            t.start()
            p.map(h)
            t.join()
            return h, out["fd"]
        ms, (h, fd) = timed(run)
        p.drop([h], [fd], True)
    elif name == "import":
        def run():
            h = p.create()
            fd = p.export(h)
            p.d.check("cuMemRelease", p.d.u64(h))
            h2 = p.imported(fd)
            p.map(h2)
            return h2, fd
        ms, (h, fd) = timed(run)
        p.drop([h], [fd], True)
    elif name.startswith("free-"):
        ms = case_free(p, name[5:])
    elif name in ("close-mapped", "release-mapped"):
        ms = case_free(p, name)
    else:
        raise ValueError(name)
    return ms


def case_free(p, how):
    """Makes and maps one allocation as how says; returns the ms of the
    drop that frees it."""
    d = p.d
    if how in ("plain", "fdtype"):
        h = p.create(plain=how == "plain")
        p.map(h)
        ms, _ = timed(lambda: p.drop([h], [], True))
        return ms
    h = p.create()
    fd = p.export(h)
    if how == "exported":
        p.map(h)
        os.close(fd)
        ms, _ = timed(lambda: p.drop([h], [], True))
        return ms
    if how in ("close-mapped", "release-mapped"):
        h2 = p.imported(fd)
        p.map(h2)
        if how == "close-mapped":
            d.check("cuMemRelease", d.u64(h))
            ms, _ = timed(lambda: os.close(fd))
        else:
            os.close(fd)
            ms, _ = timed(lambda: d.check("cuMemRelease", d.u64(h)))
        p.drop([h2], [], True)
        return ms
    if how == "held":
        h2 = p.imported(fd)
        p.map(h2)
        ms, _ = timed(lambda: p.drop([h2], [], True))
        p.drop([h], [fd], False)
        return ms
    if how == "kept":
        h2 = p.imported(fd)
        p.map(h2)
        d.check("cuMemUnmap", d.u64(p.ptr), ctypes.c_size_t(p.size))
        d.check("cuMemRelease", d.u64(h2))
        def daemon_drop():
            os.close(fd)
            p.drop([h], [], False)
        ms, _ = timed(daemon_drop)
        return ms
    d.check("cuMemRelease", d.u64(h))
    h2 = p.imported(fd)
    p.map(h2)
    if how == "byfd":
        d.check("cuMemUnmap", d.u64(p.ptr), ctypes.c_size_t(p.size))
        d.check("cuMemRelease", d.u64(h2))
        ms, _ = timed(lambda: p.drop([], [fd], False))
        return ms
    if how == "vramd":
        os.close(fd)
        ms, _ = timed(lambda: p.drop([h2], [], True))
        return ms
    raise ValueError(how)


CASES = ["create", "export", "map", "serial", "overlap", "import",
         "free-plain", "free-fdtype", "free-exported", "free-byfd", "free-vramd",
         "free-held", "free-kept", "close-mapped", "release-mapped"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-gib", default="64,1")
    ap.add_argument("--aligns-mib", default="0",
                    help="virtual range alignments to run every case at (0: the default)")
    ap.add_argument("--cycles", type=int, default=7)
    ap.add_argument("--gap", type=float, default=5, help="ms between cycles")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every size")
    ap.add_argument("--out")
    a = ap.parse_args()
    rc = skip_without_driver("export_probe")
    if rc:
        return rc
    rows = []
    d = Driver()
    aligns = [int(x) for x in a.aligns_mib.split(",")]
    for g in [float(x) for x in a.sizes_gib.split(",")]:
        for align in aligns:
            p = Probe(d, int(g * GiB * a.scale), align << 20)
            at = f" align {align} MiB" if align else ""
            for name in CASES:
                ms = []
                for _ in range(a.cycles):
                    ms.append(case_once(p, name))
                    time.sleep(a.gap / 1e3)
                rows.append({"size": p.size, "align": align << 20, "case": name, "ms": ms})
                print(f"{g:g} GiB{at} {name:13s} {min(ms):8.3f} / {statistics.median(ms):8.3f} / "
                      f"{max(ms):8.3f} ms", flush=True)
            p.close()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
