# SPDX-License-Identifier: Apache-2.0
"""What the RL step's KV wake pays in cuMemCreate, and what it depends on.

bench/compare.py's RL step wakes 64 GiB of KV cache right after a trainer
process freed 100 GiB and the weights woke. Upstream torch_memory_saver's
KV create took ~3 ms there, vramd's daemon ~74 ms and the in-process floor
~61 (docs/results/h200-2026-12-01-s5). The three differ in how they make
the allocation: whether the creating process has a context current,
whether the allocation is GPUDirect RDMA capable, and whether it can be
exported as a POSIX fd (the daemon's must be). The probe makes
the same step in a creator process of its own:

    creator: create weights (16 GiB as 256 x 64 MiB) and KV (one 64 GiB)
    cycle:   creator releases KV, then weights
             trainer (bench/compare_child.py --trainer, torch) allocates
             100 GiB in 1 GiB tensors, writes, frees, empties its cache
             creator creates weights, waits --gap ms (the weights' restore),
             creates KV: timed

with each of the eight combinations (--modes flags), or with the flags of
torch_memory_saver and of vramd's daemon: "wake" creates the weights in
one burst, "wake-spread" paces their creates over the gap. "floor" and
"floor-interleaved" run bench/compare_raw.py's engine in this process,
with a real restore of the weights, all creates first (as the floor and
vramd do) or piece by piece (as torch_memory_saver does). "pump:P:MIB"
makes a burst wake while a thread of the creator creates and releases one
MIB allocation every P ms from the trainer's free on ("pump-all": from
the engine's release on, through the trainer's step, whose time it
prints); "-hold" keeps the last 64 of them instead of releasing each at
once. "floor-pump:P" runs the floor's engine with such a pump (2 MiB
every P ms) beside its real restore, from the weights' creates on, as
vramd's daemon would run it (docs/gpu.md, "The driver's clearing": in
the RL step the pump did not show, and the probe's pump had no copies
beside it). "floor-chunks:N" makes the floor's weights wake as a pipelined
resume would: N chunks made one at a time, each mapped and copied into
before the next (docs/gpu.md, "A pipelined resume"): whether N of them,
where torch_memory_saver makes 256, keep the clearing going.
"peer:N" and "peer-paced:N" take vramd's shape: a peer process with no
context (the daemon) makes the weights' N chunks and passes their fds to
this one (the engine), which imports, maps and copies into them; then the
peer makes the KV, timed. "peer" asks for every chunk at once, as vramd's
resume makes them today; "peer-paced" asks for chunk k+1 once chunk k-1
is copied, so the peer makes one chunk ahead of the copy: whether creates
spread over the restore keep the clearing going when another process
makes them.

    python3 bench/create_probe.py [--cycles 4] [--gap 490] [--modes M,..] [--scale F] [--out FILE.json]

--scale multiplies every size (a smaller device). With the fake driver
(tests/unit/cuda_fake/libcuda_fake.c, built as libcuda.so.1 on
LD_LIBRARY_PATH) and a stand-in torch on COMPARE_BASE_PYTHONPATH, a run
at --scale 0.004 checks every mode's calls without a GPU.

It prints one line per case: the KV create's min / median / max ms.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_raw import Driver, Group  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20

# The step's sizes, times --scale (a smaller device; the fake driver).
W_PIECES = 256  # the weights: this many allocations of 64 MiB
KV_BYTES = 64 * GiB
TRAINER_BYTES = 100 * GiB
TRAINER_TENSOR = GiB


def scale_sizes(f):
    global W_PIECES, KV_BYTES, TRAINER_BYTES, TRAINER_TENSOR
    g = 2 * MiB
    W_PIECES = max(1, round(256 * f))
    KV_BYTES = max(g, int(64 * GiB * f) // g * g)
    TRAINER_BYTES = max(g, int(100 * GiB * f) // g * g)
    TRAINER_TENSOR = min(GiB, TRAINER_BYTES)
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1


class Creator:
    """The creating side, in this process: only cuMemCreate/cuMemRelease,
    as vramd's daemon makes its chunks."""

    def __init__(self, ctx, rdma, fd):
        # The floor's driver: RDMA capable where the device allows it.
        d = Driver(context=bool(ctx))
        self.check = d.check
        self.prop = d.prop
        if fd:
            self.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        if not rdma:
            self.prop.allocFlags.gpuDirectRDMACapable = 0
        self.handles = {}

    def create(self, key, n, size):
        t0 = time.perf_counter()
        hs = []
        for _ in range(n):
            h = ctypes.c_uint64()
            self.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(self.prop),
                       ctypes.c_uint64(0))
            hs.append(h.value)
        self.handles[key] = hs
        return (time.perf_counter() - t0) * 1e3

    def release(self, key):
        for h in self.handles.pop(key):
            self.check("cuMemRelease", ctypes.c_uint64(h))


def pump_run(c, every_ms, size, hold, stop):
    """Creates one allocation of size every every_ms until stop; releases
    each at once, or (hold > 0) keeps the last hold of them."""
    held = []
    while not stop.wait(every_ms / 1e3):
        h = ctypes.c_uint64()
        c.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(c.prop), ctypes.c_uint64(0))
        held.append(h.value)
        while len(held) > hold:
            c.check("cuMemRelease", ctypes.c_uint64(held.pop(0)))
    for h in held:
        c.check("cuMemRelease", ctypes.c_uint64(h))


def creator_main(ctx, rdma, fd, gap_ms):
    c = Creator(ctx, rdma, fd)
    c.create("weights", W_PIECES, 64 * MiB)
    c.create("kv", 1, KV_BYTES)
    pump, pump_stop = None, threading.Event()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "release":
            c.release("kv")
            c.release("weights")
            r = {}
        elif cmd.startswith("pump:"):
            # From now until the next wake, a thread creates and releases
            # one small allocation every P ms (what vramd's daemon does
            # while a pool is paused: daemon/backend/cuda.c).
            _, every, mib, hold = cmd.split(":")
            pump_stop.clear()
            pump = threading.Thread(target=pump_run, args=(c, float(every), int(mib) * MiB, int(hold), pump_stop))
            pump.start()
            r = {}
        elif cmd in ("wake", "wake-spread"):
            # wake: the weights' creates in one burst, then the gap;
            # wake-spread: the same creates paced over the gap, as an
            # engine that creates each piece before copying it does.
            t0 = time.perf_counter()
            pace = gap_ms / 1e3 / W_PIECES if cmd == "wake-spread" else 0
            hs = []
            for _ in range(W_PIECES):
                c.create("one", 1, 64 * MiB)
                hs += c.handles.pop("one")
                if pace:
                    time.sleep(pace)
            c.handles["weights"] = hs
            w = (time.perf_counter() - t0) * 1e3
            if not pace:
                time.sleep(gap_ms / 1e3)
            kv_ms = c.create("kv", 1, KV_BYTES)
            if pump:
                pump_stop.set()
                pump.join()
                pump = None
            r = {"weights_ms": w, "kv_ms": kv_ms}
        else:
            break
        print(json.dumps(r), flush=True)
    return 0


def chunked_wake(d, w, n, base):
    """The weights' wake as a pipelined resume would make it: n chunks of
    w.bytes / n each, made one at a time, each mapped at its offset in the
    contiguous range base (the driver maps a handle from its start only)
    and copied into before the next is made (w's own allocations stay
    unmade; the chunks take their place and are released after)."""
    n = max(1, min(n, len(w.allocs)))
    per = len(w.allocs) // n
    made = []
    for k in range(n):
        pieces = w.allocs[k * per:(k + 1) * per] if k < n - 1 else w.allocs[k * per:]
        size = sum(a.size for a in pieces)
        off = pieces[0].host_off
        h = d.u64()
        d.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(d.prop), d.u64(0))
        made.append((off, size, h.value))
        d.check("cuMemMap", d.u64(base + off), ctypes.c_size_t(size), ctypes.c_size_t(0), d.u64(h.value), d.u64(0))
        d.check("cuMemSetAccess", d.u64(base + off), ctypes.c_size_t(size), ctypes.byref(d.access),
                ctypes.c_size_t(1))
        d.check("cuMemcpyHtoDAsync_v2", d.u64(base + off), ctypes.c_void_p(w.host + off), ctypes.c_size_t(size),
                ctypes.c_void_p(0))
        d.sync()
    return made


def chunked_release(d, base, made):
    for off, size, h in made:
        d.check("cuMemUnmap", d.u64(base + off), ctypes.c_size_t(size))
        d.check("cuMemRelease", d.u64(h))


def range_reserve(d, size):
    p = d.u64()
    d.check("cuMemAddressReserve", ctypes.byref(p), ctypes.c_size_t(size), ctypes.c_size_t(0), d.u64(0), d.u64(0))
    return p.value


def floor_cycles(trainer, cycles, interleaved, pump_ms=0, chunks=0):
    """The floor's engine (bench/compare_raw.py) in this process: weights
    with a pinned backup, KV without; the KV create timed after the
    weights' wake, which creates every piece before copying any (as the
    floor and vramd do) or creates, maps and copies piece by piece (as
    torch_memory_saver does)."""
    d = Driver()
    w = Group(d, [64 * MiB] * W_PIECES, True)
    kv = Group(d, [KV_BYTES], False)
    kv_ms, w_ms = [], []
    base = range_reserve(d, w.bytes) if chunks else 0
    for _ in range(cycles):
        kv.pause()
        w.pause()
        trainer.step(TRAINER_BYTES, TRAINER_TENSOR)
        pump, stop = None, threading.Event()
        if pump_ms:
            # vramd's pump beside a real restore's copies: from the
            # weights' creates on, as the daemon runs it.
            pump = threading.Thread(target=pump_run, args=(d, pump_ms, 2 * MiB, 0, stop))
            pump.start()
        t0 = time.perf_counter()
        made = None
        if chunks:
            made = chunked_wake(d, w, chunks, base)
        elif interleaved:
            for a in w.allocs:
                h = d.u64()
                d.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(a.size), ctypes.byref(d.prop), d.u64(0))
                a.handle = h.value
                d.check("cuMemMap", d.u64(a.ptr), ctypes.c_size_t(a.size), ctypes.c_size_t(0), d.u64(a.handle),
                        d.u64(0))
                d.check("cuMemSetAccess", d.u64(a.ptr), ctypes.c_size_t(a.size), ctypes.byref(d.access),
                        ctypes.c_size_t(1))
                d.check("cuMemcpyHtoD_v2", d.u64(a.ptr), ctypes.c_void_p(w.host + a.host_off),
                        ctypes.c_size_t(a.size))
            d.sync()
        else:
            w.resume()
        t1 = time.perf_counter()
        a = kv.allocs[0]
        h = d.u64()
        d.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(a.size), ctypes.byref(d.prop), d.u64(0))
        t2 = time.perf_counter()
        if pump:
            stop.set()
            pump.join()
        a.handle = h.value
        d.check("cuMemMap", d.u64(a.ptr), ctypes.c_size_t(a.size), ctypes.c_size_t(0), d.u64(a.handle), d.u64(0))
        d.check("cuMemSetAccess", d.u64(a.ptr), ctypes.c_size_t(a.size), ctypes.byref(d.access), ctypes.c_size_t(1))
        d.sync()
        w_ms.append((t1 - t0) * 1e3)
        kv_ms.append((t2 - t1) * 1e3)
        if made is not None:
            # Back to the group's own allocations, unmade, for its pause.
            chunked_release(d, base, made)
            w._map_all()
    if base:
        d.check("cuMemAddressFree", d.u64(base), ctypes.c_size_t(w.bytes))
    w.close()
    kv.close()
    return kv_ms, w_ms


def peer_main(fd):
    """The daemon's side of the peer modes, in a process of its own with no
    context and vramd's daemon's flags: makes each chunk it is asked for,
    exports it as a POSIX fd, releases its own handle (the fd holds the
    allocation, as in daemon/backend/cuda.c) and passes the fd back
    (SCM_RIGHTS); makes the KV's one allocation when asked, timed."""
    import socket

    s = socket.socket(fileno=fd)
    c = Creator(0, 1, 1)
    kv = None
    while True:
        msg = s.recv(256)
        if not msg:
            return 0
        op = json.loads(msg)
        h = ctypes.c_uint64()
        if op["op"] == "make":
            c.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(op["size"]), ctypes.byref(c.prop),
                    ctypes.c_uint64(0))
            out = ctypes.c_int(-1)
            c.check("cuMemExportToShareableHandle", ctypes.byref(out), h, ctypes.c_int(1), ctypes.c_uint64(0))
            c.check("cuMemRelease", h)
            socket.send_fds(s, [b"{}"], [out.value])
            os.close(out.value)
        elif op["op"] == "kv":
            t0 = time.perf_counter()
            c.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(KV_BYTES), ctypes.byref(c.prop),
                    ctypes.c_uint64(0))
            ms = (time.perf_counter() - t0) * 1e3
            kv = h.value
            s.send(json.dumps({"ms": ms}).encode())
        elif op["op"] == "kv-release":
            if kv is not None:
                c.check("cuMemRelease", ctypes.c_uint64(kv))
            kv = None
            s.send(b"{}")


def peer_cycles(trainer, cycles, n, paced, scale):
    """vramd's shape: the weights' chunks made in a peer process (peer_main,
    as the daemon makes them) and imported, mapped and copied into here (as
    the engine's libvram restores them), then the KV created in the peer,
    timed. All n chunks asked for at once (as vramd's resume makes them
    today), or paced: chunk k+1 asked for once chunk k-1 is copied, so the
    peer makes one ahead of the copy (the pipelined resume's plan)."""
    import socket

    d = Driver()
    piece = 64 * MiB
    n = max(1, min(n, W_PIECES))
    per = W_PIECES // n
    sizes = [per * piece] * (n - 1) + [(W_PIECES - per * (n - 1)) * piece]
    offs = [sum(sizes[:k]) for k in range(n)]
    total = sum(sizes)
    hp = ctypes.c_void_p()
    d.check("cuMemAllocHost_v2", ctypes.byref(hp), ctypes.c_size_t(total))
    host = hp.value
    base = range_reserve(d, total)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--scale", str(scale),
                          "--peer", str(theirs.fileno())], pass_fds=[theirs.fileno()])
    theirs.close()
    handles = {}

    def ask_make(k):
        mine.send(json.dumps({"op": "make", "size": sizes[k]}).encode())

    def take(k):
        msg, fds, _, _ = socket.recv_fds(mine, 256, 1)
        if not fds:
            raise RuntimeError(f"peer sent no fd (rc {p.poll()})")
        h = d.u64()
        d.check("cuMemImportFromShareableHandle", ctypes.byref(h), ctypes.c_void_p(fds[0]), ctypes.c_int(1))
        os.close(fds[0])
        handles[k] = h.value
        d.check("cuMemMap", d.u64(base + offs[k]), ctypes.c_size_t(sizes[k]), ctypes.c_size_t(0), h, d.u64(0))
        d.check("cuMemSetAccess", d.u64(base + offs[k]), ctypes.c_size_t(sizes[k]), ctypes.byref(d.access),
                ctypes.c_size_t(1))

    def copy(k):
        d.check("cuMemcpyHtoDAsync_v2", d.u64(base + offs[k]), ctypes.c_void_p(host + offs[k]),
                ctypes.c_size_t(sizes[k]), ctypes.c_void_p(0))

    def call(op):
        mine.send(json.dumps({"op": op}).encode())
        return json.loads(mine.recv(256))

    def release():
        # The engine's pause: the peer's KV, then the weights' chunks here.
        call("kv-release")
        for k, h in handles.items():
            d.check("cuMemUnmap", d.u64(base + offs[k]), ctypes.c_size_t(sizes[k]))
            d.check("cuMemRelease", d.u64(h))
        handles.clear()

    kv_ms, w_ms = [], []
    for _ in range(cycles):
        release()
        trainer.step(TRAINER_BYTES, TRAINER_TENSOR)
        t0 = time.perf_counter()
        if paced:
            ask_make(0)
            take(0)
            copy(0)
            if n > 1:
                ask_make(1)
            for k in range(1, n):
                take(k)
                d.sync()  # chunk k-1 copied
                copy(k)
                if k + 1 < n:
                    ask_make(k + 1)
        else:
            for k in range(n):
                ask_make(k)
            for k in range(n):
                take(k)
            for k in range(n):
                copy(k)
        d.sync()
        w_ms.append((time.perf_counter() - t0) * 1e3)
        kv_ms.append(call("kv")["ms"])
    release()
    mine.close()
    p.wait(60)
    d.check("cuMemAddressFree", d.u64(base), ctypes.c_size_t(total))
    d.check("cuMemFreeHost", ctypes.c_void_p(host))
    return kv_ms, w_ms


def ask(p, cmd):
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"creator died (rc {p.wait()})")
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--gap", type=float, default=490.0, help="ms between the weights' and the KV's create")
    ap.add_argument("--modes", default="wake,wake-spread,floor,floor-interleaved",
                    help="flags (all eight create combinations), wake, wake-spread, floor, floor-interleaved, "
                    "pump:P:MIB, pump-all:P:MIB, pump-hold:P:MIB, pump-all-hold:P:MIB, floor-pump:P, floor-chunks:N, "
                    "peer:N, peer-paced:N")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="every size times this (default 1: the RL step's 16 + 64 GiB and 100 GiB)")
    ap.add_argument("--out")
    ap.add_argument("--creator", nargs=3, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--peer", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    scale_sizes(a.scale)
    if a.creator:
        return creator_main(*a.creator, a.gap)
    if a.peer is not None:
        return peer_main(a.peer)

    from compare_child import Trainer

    trainer = Trainer()
    rows = []
    print(f"KV create (one {KV_BYTES / GiB:g} GiB cuMemCreate) after a trainer freed {TRAINER_BYTES / GiB:g} GiB, "
          f"weights {W_PIECES} x 64 MiB, {a.cycles} cycles, ms min / median / max")

    def row(label, kv, w, **kw):
        rows.append(dict(kw, case=label, kv_ms=kv, weights_ms=w))
        print(f"{label}: KV {min(kv):.1f} / {statistics.median(kv):.1f} / {max(kv):.1f}   "
              f"weights {statistics.median(w):.1f}", flush=True)

    modes = a.modes.split(",")
    combos = [(c, r, f) for c in (1, 0) for r in (1, 0) for f in (0, 1)]
    if "flags" not in modes:
        combos = [(1, 1, 0), (0, 1, 1)]  # torch_memory_saver's, vramd's daemon's
    for cmd in [m for m in ("wake", "wake-spread") if m in modes or (m == "wake" and "flags" in modes)]:
        for ctx, rdma, fd in combos:
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--gap", str(a.gap), "--scale", str(a.scale),
                                  "--creator", str(ctx), str(rdma), str(fd)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"creator did not start (rc {p.wait()})")
            kv, w = [], []
            for _ in range(a.cycles):
                ask(p, "release")
                trainer.step(TRAINER_BYTES, TRAINER_TENSOR)
                r = ask(p, cmd)
                kv.append(r["kv_ms"])
                w.append(r["weights_ms"])
            p.stdin.close()
            p.wait(60)
            row(f"{cmd} ctx {ctx} rdma {rdma} fd {fd}", kv, w, ctx=ctx, rdma=rdma, fd=fd)
    for m in [m for m in modes if m.startswith("pump")]:
        # pump:P:MIB (from the trainer's free on) or pump-all:P:MIB (from
        # the engine's release on, through the trainer's whole step), with
        # vramd's daemon's flags, then a burst wake.
        kind, every, mib = m.split(":")[:3]
        hold = 64 if kind.endswith("-hold") else 0
        kind = kind.removesuffix("-hold")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--gap", str(a.gap), "--scale", str(a.scale),
                              "--creator", "0", "1", "1"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"creator did not start (rc {p.wait()})")
        kv, w, tr = [], [], []
        for _ in range(a.cycles):
            ask(p, "release")
            if kind == "pump-all":
                ask(p, f"pump:{every}:{mib}:{hold}")
            t = trainer.step(TRAINER_BYTES, TRAINER_TENSOR)
            tr.append(t["alloc_ms"] + t["write_ms"] + t["free_ms"])
            if kind == "pump":
                ask(p, f"pump:{every}:{mib}:{hold}")
            r = ask(p, "wake")
            kv.append(r["kv_ms"])
            w.append(r["weights_ms"])
        p.stdin.close()
        p.wait(60)
        row(f"{m} (trainer {statistics.median(tr):.1f})", kv, w, trainer_ms=tr)
    for m in ("floor", "floor-interleaved"):
        if m in modes:
            kv, w = floor_cycles(trainer, a.cycles, m == "floor-interleaved")
            row(m, kv, w)
    for m in [m for m in modes if m.startswith("floor-pump:")]:
        kv, w = floor_cycles(trainer, a.cycles, False, float(m.split(":")[1]))
        row(m, kv, w)
    for m in [m for m in modes if m.startswith("floor-chunks:")]:
        kv, w = floor_cycles(trainer, a.cycles, False, chunks=int(m.split(":")[1]))
        row(m, kv, w)
    for m in [m for m in modes if m.startswith(("peer:", "peer-paced:"))]:
        kind, n = m.split(":")
        kv, w = peer_cycles(trainer, a.cycles, int(n), kind == "peer-paced", a.scale)
        row(m, kv, w)
    trainer.close()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
