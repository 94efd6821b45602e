#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a host backup's pages cost before a copy can use them, on a GPU
machine: a backup given back after each resume (torch_memory_saver's
default) is allocated, zeroed and pinned again at every pause.

For SIZE GiB of host memory, per layout: the time to fault the pages in
(MADV_POPULATE_WRITE from T threads), to pin them (cuMemHostRegister, in
slices of S MiB), to unpin them and to give them back (MADV_REMOVE or
munmap); and, for comparison, cuMemHostAlloc in pieces of 64 MiB (what
torch_memory_saver's pinned backups cost) and its cuMemFreeHost, and in
one piece; the rate of a copy to and from the device, one synchronous
cuMemcpy per slice or piece (whether pinned 4 KiB pages copy slower than
the driver's own pinned memory); and the
populate and the pin of a memfd overlapped, slice by slice, with one or
four pinning threads (whether a save could hide the pin behind the
faulting in).

    bench/host_pin.py [--size-gib 16] [--threads 1,8] [--slices 256,1024]
                      [--rounds 2] [--no-overlap] [--dir DIR]
                      [--kinds memfd,anon,hostalloc]

--dir puts the "memfd" cases' pages in an unnamed file of DIR instead
(O_TMPFILE), as vramd's host_backup_dir does: a tmpfs mounted
huge=within_size gives them huge pages whatever shmem_enabled says.

Prints one line per case, ms and GB/s. Needs libcuda and a GPU.
"""

import argparse
import ctypes
import os
import threading
import time

GiB = 1 << 30
MiB = 1 << 20
MADV_REMOVE = 9
MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23
PROT_RW = 3
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS = 1, 2, 0x20
MFD_CLOEXEC = 1

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.memfd_create.argtypes = [ctypes.c_char_p, ctypes.c_uint]


def check_libc(r, what):
    if r == -1 or r is None:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return r


class Cuda:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ok("cuInit", 0)
        dev = ctypes.c_int()
        self.ok("cuDeviceGet", ctypes.byref(dev), 0)
        ctx = ctypes.c_void_p()
        self.ok("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.ok("cuCtxSetCurrent", ctx)

    def ok(self, name, *args):
        r = getattr(self.lib, name)(*args)
        if r != 0:
            raise RuntimeError(f"{name}: CUresult {r}")


def populate(addr, size, threads):
    """MADV_POPULATE_WRITE over [addr, addr+size) from threads threads
    (ctypes lets go of the GIL, so they run at once)."""
    per = (size // threads + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
    errs = []

    def run(off, n):
        if libc.madvise(ctypes.c_void_p(addr + off), n, MADV_POPULATE_WRITE) != 0:
            errs.append(ctypes.get_errno())

    ts = []
    for off in range(0, size, per):
        t = threading.Thread(target=run, args=(off, min(per, size - off)))
        t.start()
        ts.append(t)
    for t in ts:
        t.join()
    if errs:
        raise OSError(errs[0], f"MADV_POPULATE_WRITE: {os.strerror(errs[0])}")


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


BACKUP_DIR = None  # --dir


def memfd_map(size):
    """A memfd (or an unnamed file of --dir) of size bytes mapped shared,
    as libvram maps a backup: (fd, address)."""
    if BACKUP_DIR:
        fd = os.open(BACKUP_DIR, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    else:
        fd = check_libc(libc.memfd_create(b"host_pin", MFD_CLOEXEC), "memfd_create")
    os.ftruncate(fd, size)
    return fd, check_libc(libc.mmap(None, size, PROT_RW, MAP_SHARED, fd, 0), "mmap")


def memfd_give_back(fd, addr, size):
    """Punches the memfd's pages (as a give-back does), then unmaps and
    closes it; returns the punch's ms."""
    t = timed(lambda: libc.madvise(ctypes.c_void_p(addr), size, MADV_REMOVE))
    libc.munmap(ctypes.c_void_p(addr), size)
    os.close(fd)
    return t


def copy_both(cu, dev, pieces):
    """Copies the host pieces [(addr, len), ..] to dev (back to back) and
    back, one synchronous cuMemcpy per piece; (to host, to device) ms."""
    def run(name, args):
        off = 0
        for addr, n in pieces:
            cu.ok(name, *args(addr, off, n))
            off += n

    d2h = timed(lambda: run("cuMemcpyDtoH_v2", lambda a, o, n: (ctypes.c_void_p(a), ctypes.c_uint64(dev + o), ctypes.c_size_t(n))))
    h2d = timed(lambda: run("cuMemcpyHtoD_v2", lambda a, o, n: (ctypes.c_uint64(dev + o), ctypes.c_void_p(a), ctypes.c_size_t(n))))
    return d2h, h2d


def unregister(cu, addr, offs):
    """Unpins the slices registered at addr + each of offs; the ms."""
    return timed(lambda: [cu.ok("cuMemHostUnregister", ctypes.c_void_p(addr + off)) for off in offs])


def case_mapped(cu, dev, size, kind, threads, slice_mib, huge):
    if kind == "memfd":
        fd, addr = memfd_map(size)
    else:
        fd = -1
        addr = check_libc(libc.mmap(None, size, PROT_RW, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), "mmap")
    if huge:
        libc.madvise(ctypes.c_void_p(addr), size, MADV_HUGEPAGE)
    sl = slice_mib * MiB
    t_pop = timed(lambda: populate(addr, size, threads))

    def reg():
        for off in range(0, size, sl):
            cu.ok("cuMemHostRegister_v2", ctypes.c_void_p(addr + off), ctypes.c_size_t(min(sl, size - off)), 1)

    t_reg = timed(reg)
    d2h, h2d = copy_both(cu, dev, [(addr + off, min(sl, size - off)) for off in range(0, size, sl)])
    t_unreg = unregister(cu, addr, range(0, size, sl))
    if kind == "memfd":
        t_free = memfd_give_back(fd, addr, size)
    else:
        t_free = timed(lambda: libc.munmap(ctypes.c_void_p(addr), size))
    return t_pop, t_reg, t_unreg, t_free, d2h, h2d


def case_overlap(cu, size, threads, slice_mib, reg_threads):
    """memfd pages faulted in and pinned slice by slice with the two
    overlapped: one thread pins each slice as soon as it is faulted in
    (reg_threads 1), or reg_threads pin threads take slices as they come.
    Returns the total time, then the unpin and punch, ms."""
    fd, addr = memfd_map(size)
    sl = slice_mib * MiB
    offs = list(range(0, size, sl))
    ready = threading.Semaphore(0)
    lock = threading.Lock()
    nxt = [0]
    errs = []

    def pinner():
        while True:
            ready.acquire()
            with lock:
                if nxt[0] >= len(offs):
                    return
                off = offs[nxt[0]]
                nxt[0] += 1
            try:
                cu.ok("cuMemHostRegister_v2", ctypes.c_void_p(addr + off), ctypes.c_size_t(min(sl, size - off)), 1)
            except RuntimeError as e:
                errs.append(e)

    def run():
        ps = [threading.Thread(target=pinner) for _ in range(reg_threads)]
        for t in ps:
            t.start()
        for off in offs:
            populate(addr + off, min(sl, size - off), threads)
            ready.release()
        for _ in ps:
            ready.release()
        for t in ps:
            t.join()

    t_all = timed(run)
    if errs:
        raise errs[0]
    t_unreg = unregister(cu, addr, offs)
    return t_all, t_unreg, memfd_give_back(fd, addr, size)


def case_hostalloc(cu, dev, size, piece):
    ptrs = []

    def alloc():
        for _ in range(0, size, piece):
            p = ctypes.c_void_p()
            cu.ok("cuMemHostAlloc", ctypes.byref(p), ctypes.c_size_t(piece), 1)
            ptrs.append(p)

    def free():
        for p in ptrs:
            cu.ok("cuMemFreeHost", p)

    t_alloc = timed(alloc)
    d2h, h2d = copy_both(cu, dev, [(p.value, piece) for p in ptrs])
    t_free = timed(free)
    return t_alloc, t_free, d2h, h2d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gib", type=int, default=16)
    ap.add_argument("--threads", default="1,8")
    ap.add_argument("--slices", default="256,1024")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-overlap", action="store_true", help="leave out the overlapped populate-and-pin cases")
    ap.add_argument("--dir", help="the memfd cases' pages in an unnamed file of DIR (a huge-page tmpfs, say)")
    ap.add_argument("--kinds", default="memfd,anon,hostalloc", help="subset of memfd,anon,hostalloc")
    a = ap.parse_args()
    global BACKUP_DIR
    BACKUP_DIR = a.dir
    kinds = a.kinds.split(",")
    size = a.size_gib * GiB
    cu = Cuda()
    dev = ctypes.c_uint64()
    cu.ok("cuMemAlloc_v2", ctypes.byref(dev), ctypes.c_size_t(size))
    dev = dev.value
    rate = lambda ms: size / (ms / 1e3) / 1e9 if ms > 0 else 0.0
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
        shm = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read().strip()
    except OSError:
        thp = shm = "?"
    where = f"; memfd cases in {a.dir}" if a.dir else ""
    print(f"host_pin: {a.size_gib} GiB, {os.cpu_count()} CPUs, THP {thp}, shmem THP {shm}{where}; ms (GB/s)")
    for r in range(a.rounds):
        for kind in [k for k in ("memfd", "anon") if k in kinds]:
            for huge in ((False,) if kind == "memfd" else (False, True)):
                for th in [int(x) for x in a.threads.split(",")]:
                    for sl in [int(x) for x in a.slices.split(",")]:
                        p, g, u, f, d2h, h2d = case_mapped(cu, dev, size, kind, th, sl, huge)
                        name = f"{kind}{'+thp' if huge else ''} {th:2d} thr {sl:5d} MiB"
                        print(f"  round {r} {name:28s} populate {p:8.1f} ({rate(p):5.1f})  register {g:7.1f} ({rate(g):5.1f})"
                              f"  unregister {u:7.1f}  give back {f:7.1f}  pause-side total {p + g:8.1f}"
                              f"  copy to host {d2h:6.1f} ({rate(d2h):4.1f}) to device {h2d:6.1f} ({rate(h2d):4.1f})", flush=True)
        for th in [int(x) for x in a.threads.split(",")] if not a.no_overlap and "memfd" in kinds else []:
            for sl in [int(x) for x in a.slices.split(",")]:
                for rt in (1, 4):
                    t, u, f = case_overlap(cu, size, th, sl, rt)
                    name = f"memfd {th:2d} thr {sl:5d} MiB, {rt} pinning"
                    print(f"  round {r} {name:28s} populate+pin overlapped {t:8.1f} ({rate(t):5.1f})"
                          f"  unregister {u:7.1f}  give back {f:7.1f}", flush=True)
        for piece in (64 * MiB, size) if "hostalloc" in kinds else ():
            al, fr, d2h, h2d = case_hostalloc(cu, dev, size, piece)
            name = f"cuMemHostAlloc {piece // MiB} MiB"
            print(f"  round {r} {name:28s} alloc {al:8.1f} ({rate(al):5.1f})  free {fr:7.1f}"
                  f"  copy to host {d2h:6.1f} ({rate(d2h):4.1f}) to device {h2d:6.1f} ({rate(h2d):4.1f})", flush=True)


if __name__ == "__main__":
    main()
