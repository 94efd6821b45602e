# SPDX-License-Identifier: Apache-2.0
"""Why a host pool's restore copies slower than the copy sweep, and
whether mapping the next chunk during a copy would win the gaps back.

A restore in parts (docs/gpu.md, "A resume in parts") copied 16 GiB in
333 ms of copies (51.5 GB/s) plus ~10 ms between them, where
bench/gpu_raw's sweep copies at 55 GB/s: the copies are issued per chunk
(~20 of them, ~820 MiB each), each waited for before the next chunk is
mapped. This probe copies --size GiB from a registered memfd (as libvram
holds a backup) into device memory made with the VMM calls, in these
shapes, one process with a context:

    whole           one chunk, mapped beforehand: pieces round-robin on the
                    streams, one wait at the end (the sweep's shape)
    chunks          --chunks chunks, mapped beforehand; each chunk's pieces
                    waited for before the next chunk's are issued
    chunks-map      each chunk created, mapped and given access, then
                    copied and waited for, before the next (vramd today)
    chunks-overlap  chunk k+1 created and mapped while chunk k copies,
                    then chunk k waited for (a restore that overlaps)
    map-first       every chunk created and mapped, then every piece
                    issued and one wait (the floor's shape)
    peer-made       chunks-overlap's order, the chunks made beforehand
                    (untimed) by a peer process with no context
                    (bench/create_probe.py's peer), as vramd's daemon
                    makes them (the fd handle type, exported,
                    the peer's handle released) and imported here: whether
                    another process's chunks copy slower
    peer-paced      vramd's pipeline: the peer makes two chunks ahead of
                    the copy, chunk k+2 asked for once chunk k is copied,
                    each imported and mapped when it comes while the one
                    before copies: whether the peer's creates and exports
                    during the copies slow them
    lanes           libvram's restore in parts: chunk k's pieces on lane
                    k % 2 (streams of its own), chunk k+1 made, mapped and
                    issued on the other lane before chunk k is waited for,
                    so two chunks' copies are queued at once
    lanes-events    the same order on one set of streams, an event
                    recorded on each after a chunk's pieces and chunk k's
                    events waited for: the next chunk queued behind the
                    current one on the same streams
    sm-whole        whole's copy made by the SMs instead of a copy engine:
                    one kernel (bench/copy_kernel.cu, built with nvcc -ptx)
                    loads the registered host memory and stores it
    sm-lanes        lanes' order, each chunk copied by one such kernel on
                    its lane's first stream
    pause-end       a pause then at once a resume, each timed (two rows):
                    every chunk saved to the host, then every chunk
                    released (vramd's pause), then lanes' restore
    pause-each      the same, each chunk saved, waited for and released
                    before the next (torch_memory_saver's pause)
    pause-lag       the same, chunk k+1's save queued on the other lane
                    before chunk k is waited for and released: whether
                    releasing during the save moves the driver's clearing
                    out of the resume, and what it costs the save

The sm- cases run only when named in --cases, and need nvcc on PATH
(the kernel is built for compute_90, Hopper or later): whether
the copy engines, shared with the driver's clearing of what was just
released, are what slows a restore right after a pause.

and, device to host (a save), whole and chunks. Each case runs --cycles
times; the map cases release their chunks after each cycle and wait --gap
ms. Pieces are --piece-mib (256) on --streams (2), libvram's defaults.

The host memory is a memfd registered in one call, unless --backup-dir
DIR makes it an unnamed file there (what vramd's host_backup_dir holds: a
tmpfs mounted huge=within_size gives it huge pages) and --pin-slice-mib N
registers it in slices of N MiB from each chunk's start, as libvram pins
a backup (256; the whole cases are then left out, as their pieces would
span two slices): whether the pages or the registrations cost the rate.

    python3 bench/copy_probe.py [--size 16] [--chunks 20] [--cycles 5] [--gap 20]
                                [--backup-dir DIR] [--pin-slice-mib N] [--out FILE.json]

It prints one line per case: ms min / median / max and GB/s at the
median; without a CUDA driver it says so and exits 77. With the fake driver (tests/unit/cuda_fake/libcuda_fake.c as
libcuda.so.1 on LD_LIBRARY_PATH) and --scale it checks its calls without
a GPU.
"""

import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_raw import Driver, skip_without_driver  # noqa: E402
from host_pin import check_libc, libc, memfd_map  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
STREAM_NON_BLOCKING = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
PEER_AHEAD = 2  # daemon/pool.h's POOL_PARTS_AHEAD


O_TMPFILE = 0o20000000 | os.O_DIRECTORY
MADV_HUGEPAGE = 14


def backup_map(size, backup_dir):
    """The host memory: a memfd, or an unnamed file in backup_dir asking
    for huge pages, as libvram maps a backup: (fd, address)."""
    if not backup_dir:
        return memfd_map(size)
    fd = os.open(backup_dir, O_TMPFILE | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    addr = check_libc(libc.mmap(None, size, 3, 1, fd, 0), "mmap")
    libc.madvise(ctypes.c_void_p(addr), size, MADV_HUGEPAGE)
    return fd, addr


class Probe:
    def __init__(self, total, n_chunks, piece, n_streams, backup_dir=None, pin_slice=0):
        self.d = d = Driver()
        self.chunk = d.round_up(max(total // n_chunks, 1))
        self.n = n_chunks
        self.size = self.chunk * n_chunks
        self.piece = piece
        p = d.u64()
        d.check("cuMemAddressReserve", ctypes.byref(p), ctypes.c_size_t(self.size), ctypes.c_size_t(0),
                d.u64(0), d.u64(0))
        self.base = p.value
        self.fd, self.host = backup_map(self.size, backup_dir)
        check_libc(libc.madvise(ctypes.c_void_p(self.host), self.size, 23), "MADV_POPULATE_WRITE")
        # One registration, or slices from each chunk's start.
        step = pin_slice or self.size
        for c in range(0, self.size, self.chunk if pin_slice else self.size):
            end = min(c + (self.chunk if pin_slice else self.size), self.size)
            for off in range(c, end, step):
                n = min(step, end - off)
                d.check("cuMemHostRegister_v2", ctypes.c_void_p(self.host + off), ctypes.c_size_t(n),
                        ctypes.c_uint(0))
        self.lanes = []
        for _ in range(2):
            lane = []
            for _ in range(n_streams):
                s = ctypes.c_void_p()
                d.check("cuStreamCreate", ctypes.byref(s), ctypes.c_uint(STREAM_NON_BLOCKING))
                lane.append(s)
            self.lanes.append(lane)
        self.streams = self.lanes[0]
        self.handles = {}  # offset -> (handle, size)

    def make(self, off, size):
        d = self.d
        h = d.u64()
        d.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(d.prop), d.u64(0))
        self.map(off, size, h)

    def map(self, off, size, h):
        """Maps handle h at off with access; release_all unmaps and
        releases it."""
        d = self.d
        d.check("cuMemMap", d.u64(self.base + off), ctypes.c_size_t(size), ctypes.c_size_t(0), h, d.u64(0))
        d.check("cuMemSetAccess", d.u64(self.base + off), ctypes.c_size_t(size), ctypes.byref(d.access),
                ctypes.c_size_t(1))
        self.handles[off] = (h.value, size)

    def release(self, off):
        """Unmaps and releases the chunk mapped at off."""
        h, size = self.handles.pop(off)
        self.d.check("cuMemUnmap", self.d.u64(self.base + off), ctypes.c_size_t(size))
        self.d.check("cuMemRelease", self.d.u64(h))

    def release_all(self):
        for off in list(self.handles):
            self.release(off)
        self.d.sync()

    def issue(self, off, size, to_host, next_stream=0, streams=None):
        """Issues [off, off + size) in pieces round-robin on streams
        (the first lane's); returns the next stream index."""
        d = self.d
        streams = streams or self.streams
        done = 0
        while done < size:
            n = min(self.piece, size - done)
            dev = d.u64(self.base + off + done)
            host = ctypes.c_void_p(self.host + off + done)
            s = streams[next_stream]
            if to_host:
                d.check("cuMemcpyDtoHAsync_v2", host, dev, ctypes.c_size_t(n), s)
            else:
                d.check("cuMemcpyHtoDAsync_v2", dev, host, ctypes.c_size_t(n), s)
            done += n
            next_stream = (next_stream + 1) % len(streams)
        return next_stream

    def wait(self, streams=None):
        for s in streams or self.streams:
            self.d.check("cuStreamSynchronize", s)

    def sm_load(self, blocks, threads):
        """Builds and loads bench/copy_kernel.cu for the sm- cases."""
        d = self.d
        with tempfile.TemporaryDirectory() as t:
            ptx = os.path.join(t, "k.ptx")
            try:
                subprocess.run(["nvcc", "-arch=compute_90", "-ptx", "-o", ptx,
                                os.path.join(os.path.dirname(os.path.abspath(__file__)), "copy_kernel.cu")],
                               check=True)
            except FileNotFoundError:
                raise SystemExit("copy_probe: the sm- cases build their kernel with nvcc, which is not on PATH")
            with open(ptx, "rb") as f:
                image = ctypes.create_string_buffer(f.read() + b"\0")
        self.module = ctypes.c_void_p()
        d.check("cuModuleLoadData", ctypes.byref(self.module), image)
        self.kernel = ctypes.c_void_p()
        d.check("cuModuleGetFunction", ctypes.byref(self.kernel), self.module, b"copy_h2d")
        dp = d.u64()
        d.check("cuMemHostGetDevicePointer_v2", ctypes.byref(dp), ctypes.c_void_p(self.host), ctypes.c_uint(0))
        self.host_dev = dp.value
        self.sm_grid = (blocks, threads)

    def sm_check(self):
        """Copies the whole range once by the kernel and compares a few
        16-byte spots with the host's: a wrong kernel would time nothing
        worth reading."""
        d = self.d
        spots = [0, self.size // 2 + 16 * 7, self.size - 16]
        for k, off in enumerate(spots):
            ctypes.memmove(self.host + off, bytes([k + 1]) * 16, 16)
        self.make(0, self.size)
        self.sm_issue(0, self.size, self.streams[0])
        self.wait()
        for k, off in enumerate(spots):
            got = ctypes.create_string_buffer(16)
            d.check("cuMemcpyDtoH_v2", got, d.u64(self.base + off), ctypes.c_size_t(16))
            if got.raw != bytes([k + 1]) * 16:
                raise RuntimeError(f"sm-copy: wrong bytes at {off}: {got.raw.hex()}")
        self.release_all()

    def sm_issue(self, off, size, stream):
        """One kernel copying [off, off + size) host to device on stream."""
        src = self.d.u64(self.host_dev + off)
        dst = self.d.u64(self.base + off)
        n = self.d.u64(size // 16)
        args = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.byref(src), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(dst), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
        b, t = self.sm_grid
        self.d.check("cuLaunchKernel", self.kernel, ctypes.c_uint(b), ctypes.c_uint(1), ctypes.c_uint(1),
                     ctypes.c_uint(t), ctypes.c_uint(1), ctypes.c_uint(1), ctypes.c_uint(0), stream, args,
                     ctypes.c_void_p(0))

    def record(self):
        """An event on each of the first lane's streams, recorded now."""
        evs = []
        for s in self.streams:
            e = ctypes.c_void_p()
            self.d.check("cuEventCreate", ctypes.byref(e), ctypes.c_uint(0))
            self.d.check("cuEventRecord", e, s)
            evs.append(e)
        return evs

    def wait_events(self, evs):
        for e in evs:
            self.d.check("cuEventSynchronize", e)
            self.d.check("cuEventDestroy_v2", e)


class Peer:
    """This process's end of peer_main."""

    def __init__(self, p):
        self.p = p
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                   "create_probe.py"),
                                      "--peer", str(theirs.fileno())], pass_fds=[theirs.fileno()])
        theirs.close()
        self.sock = mine

    def ask(self, size):
        self.sock.send(json.dumps({"op": "make", "size": size}).encode())

    def take(self):
        _, fds, _, _ = socket.recv_fds(self.sock, 256, 1)
        if not fds:
            raise RuntimeError(f"the peer sent no fd (rc {self.proc.poll()})")
        return fds[0]

    def map(self, off, fd):
        """Imports fd and maps it at off, as libvram maps a chunk."""
        d = self.p.d
        h = d.u64()
        d.check("cuMemImportFromShareableHandle", ctypes.byref(h), ctypes.c_void_p(fd),
                ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        os.close(fd)
        self.p.map(off, self.p.chunk, h)

    def close(self):
        self.sock.close()
        self.proc.wait(60)


def overlap(p, offs, map_at, copied=lambda k: None):
    """chunks-overlap's order: chunk k+1 mapped (map_at(k + 1)) while
    chunk k copies, then chunk k waited for and copied(k) told."""
    map_at(0)
    for k, off in enumerate(offs):
        p.issue(off, p.chunk, False)
        if k + 1 < len(offs):
            map_at(k + 1)
        p.wait()
        copied(k)


def lanes(p, offs, events, sm=False):
    """libvram's restore order: chunk k issued, then chunk k - 1 waited
    for; on two lanes of streams, or on one with events; sm: by a
    kernel."""
    wait = p.wait_events if events else p.wait
    older = None
    for k, off in enumerate(offs):
        p.make(off, p.chunk)
        if sm:
            mine = p.lanes[k % 2][:1]
            p.sm_issue(off, p.chunk, mine[0])
        elif events:
            p.issue(off, p.chunk, False)
            mine = p.record()
        else:
            mine = p.lanes[k % 2]
            p.issue(off, p.chunk, False, streams=mine)
        if older is not None:
            wait(older)
        older = mine
    if older is not None:
        wait(older)


def pause_cycle(p, shape, offs):
    """A pause followed at once by a resume: the chunks made and waited
    --gap for (untimed), each saved to the host and released, in one of
    three orders, then restored in libvram's order (lanes); returns
    (pause ms, resume ms)."""
    for off in offs:
        p.make(off, p.chunk)
    p.d.sync()
    time.sleep(p.gap / 1e3)
    t0 = time.perf_counter()
    if shape == "pause-end":
        # vramd today: every chunk saved, then every chunk released.
        for off in offs:
            p.issue(off, p.chunk, True)
        p.wait()
        p.release_all()
    elif shape == "pause-each":
        # torch_memory_saver's order: each saved, waited for, released.
        for off in offs:
            p.issue(off, p.chunk, True)
            p.wait()
            p.release(off)
    else:
        # pause-lag: chunk k+1's save queued on the other lane before
        # chunk k is waited for and released, so the copies never stop.
        for k, off in enumerate(offs):
            p.issue(off, p.chunk, True, streams=p.lanes[k % 2])
            if k:
                p.wait(p.lanes[(k - 1) % 2])
                p.release(offs[k - 1])
        p.wait(p.lanes[(len(offs) - 1) % 2])
        p.release(offs[-1])
    t1 = time.perf_counter()
    lanes(p, offs, False)
    t2 = time.perf_counter()
    p.release_all()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def peer_cycle(p, case, offs):
    peer = p.peer
    if case == "peer-made":
        for _ in offs:
            peer.ask(p.chunk)
        fds = [peer.take() for _ in offs]
        t0 = time.perf_counter()
        overlap(p, offs, lambda k: peer.map(offs[k], fds[k]))
    else:
        def copied(k):
            if k + PEER_AHEAD < len(offs):
                peer.ask(p.chunk)

        t0 = time.perf_counter()
        for _ in range(min(PEER_AHEAD, len(offs))):
            peer.ask(p.chunk)
        overlap(p, offs, lambda k: peer.map(offs[k], peer.take()), copied)
    ms = (time.perf_counter() - t0) * 1e3
    p.release_all()
    return ms


def cycle(p, case):
    """One cycle of case; returns its timed ms (the untimed set-up and
    release around it excluded)."""
    offs = [k * p.chunk for k in range(p.n)]
    to_host = case.startswith("save-")
    shape = case[len("save-"):] if to_host else case
    if shape in ("whole", "chunks", "sm-whole"):
        if not p.handles:
            if shape != "chunks":
                p.make(0, p.size)
            else:
                for off in offs:
                    p.make(off, p.chunk)
        t0 = time.perf_counter()
        if shape == "whole":
            p.issue(0, p.size, to_host)
            p.wait()
        elif shape == "sm-whole":
            p.sm_issue(0, p.size, p.streams[0])
            p.wait()
        else:
            for off in offs:
                p.issue(off, p.chunk, to_host)
                p.wait()
        ms = (time.perf_counter() - t0) * 1e3
        p.release_all()
        return ms
    if shape.startswith("peer-"):
        return peer_cycle(p, shape, offs)
    if shape.startswith("pause-"):
        return pause_cycle(p, shape, offs)
    t0 = time.perf_counter()
    if shape == "chunks-map":
        for off in offs:
            p.make(off, p.chunk)
            p.issue(off, p.chunk, False)
            p.wait()
    elif shape == "chunks-overlap":
        overlap(p, offs, lambda k: p.make(offs[k], p.chunk))
    elif shape in ("lanes", "lanes-events", "sm-lanes"):
        lanes(p, offs, shape == "lanes-events", shape == "sm-lanes")
    elif shape == "map-first":
        for off in offs:
            p.make(off, p.chunk)
        s = 0
        for off in offs:
            s = p.issue(off, p.chunk, False, s)
        p.wait()
    else:
        raise ValueError(case)
    ms = (time.perf_counter() - t0) * 1e3
    p.release_all()
    return ms


CASES = ["whole", "chunks", "chunks-map", "chunks-overlap", "map-first", "peer-made", "peer-paced", "lanes",
         "lanes-events", "save-whole", "save-chunks", "pause-end", "pause-each", "pause-lag"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=float, default=16, help="GiB copied")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--piece-mib", type=int, default=256)
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--gap", type=float, default=20, help="ms between cycles")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the size")
    ap.add_argument("--backup-dir", help="host memory in an unnamed file here (else a memfd)")
    ap.add_argument("--pin-slice-mib", type=int, default=0, help="register in slices of this (0: one call)")
    ap.add_argument("--sm-blocks", type=int, default=528, help="the sm- cases' grid")
    ap.add_argument("--sm-threads", type=int, default=512)
    ap.add_argument("--out")
    a = ap.parse_args()
    rc = skip_without_driver("copy_probe")
    if rc:
        return rc
    p = Probe(int(a.size * GiB * a.scale), a.chunks, a.piece_mib * MiB, a.streams, a.backup_dir,
              a.pin_slice_mib * MiB)
    where = f"a file in {a.backup_dir}" if a.backup_dir else "a memfd"
    pins = f"in {a.pin_slice_mib} MiB slices" if a.pin_slice_mib else "in one call"
    print(f"copy_probe: {p.size / GiB:.2f} GiB in {p.n} chunks of {p.chunk / MiB:.0f} MiB, "
          f"{a.piece_mib} MiB pieces on {a.streams} streams, from {where} registered {pins}", flush=True)
    rows = []
    cases = a.cases.split(",")
    p.peer = Peer(p) if any(c.startswith("peer-") for c in cases) else None
    if any(c.startswith("sm-") for c in cases):
        p.sm_load(a.sm_blocks, a.sm_threads)
        p.sm_check()
        print(f"sm-copy: {a.sm_blocks} blocks of {a.sm_threads} threads, checked", flush=True)
    p.gap = a.gap
    for case in cases:
        if a.pin_slice_mib and case.endswith("whole"):
            # Its pieces run from the range's start, across the chunks'
            # slices: the driver refuses a copy that spans two.
            print(f"{case:15s} left out: pinned in slices", flush=True)
            continue
        got = []
        for _ in range(a.cycles):
            got.append(cycle(p, case))
            time.sleep(a.gap / 1e3)
        # The pause- cases give (pause, resume) per cycle: a row each.
        named = ([(f"{case}:{half}", [g[i] for g in got]) for i, half in enumerate(("pause", "resume"))]
                 if case.startswith("pause-") else [(case, got)])
        for name, ms in named:
            med = statistics.median(ms)
            rows.append({"case": name, "bytes": p.size, "ms": ms})
            print(f"{name:15s} {min(ms):9.2f} / {med:9.2f} / {max(ms):9.2f} ms  {p.size / med / 1e6:6.1f} GB/s",
                  flush=True)
    if p.peer:
        p.peer.close()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
