# SPDX-License-Identifier: Apache-2.0
"""The raw in-process floor of bench/compare.py: the allocations a workload
makes, made directly with the CUDA driver's VMM calls through ctypes, in
one process, with no daemon, no torch and no allocator in between.

One allocation is one tensor of the workload (torch's caching allocator
gives every tensor of 10 MiB or more a segment of its own, and
torch_memory_saver turns each segment into one cuMemCreate): a 64 GiB
tensor is one 64 GiB cuMemCreate, 1024 tensors of 16 MiB are 1024 of them.
Every allocation has its own reserved virtual range, kept across pauses as
both libraries keep theirs.

    pause:  (backup) cuMemcpyDtoH of every allocation into one pinned host
            buffer made once and kept; cuMemUnmap + cuMemRelease of each
    resume: cuMemCreate + cuMemMap + cuMemSetAccess of each; (backup)
            cuMemcpyHtoD back; cuCtxSynchronize

All of it on one thread, in the workload's order: the floor is what the
same allocations cost with nothing added, not the best any layout could do
(bench/gpu_raw measures vramd's own chunking).
"""

import ctypes
import time

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _Prop(ctypes.Structure):
    # CUmemAllocationProp (common/cuda_driver.h)
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class CudaError(RuntimeError):
    pass


def skip_without_driver(prog):
    """77, with a line saying so, when libcuda.so.1 cannot be loaded (a
    skip, as the GPU benchmarks and tools/gpu-prepare.sh say it); else
    None."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"{prog}: skipped: no CUDA driver here ({e})")
        return 77
    return None


class Driver:
    """libcuda.so.1 with a primary context current on device (none with
    context=False, as vramd's daemon runs)."""

    def __init__(self, device=0, context=True):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.u64 = ctypes.c_uint64
        self.check("cuInit", 0)
        dev = ctypes.c_int()
        self.check("cuDeviceGet", ctypes.byref(dev), device)
        self.dev = dev.value
        if context:
            ctx = ctypes.c_void_p()
            self.check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.dev)
            self.check("cuCtxSetCurrent", ctx)
        self.prop = _Prop()
        self.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        self.prop.location.id = self.dev
        # As torch_memory_saver (and vramd) make them: GPUDirect RDMA
        # capable where the device allows it (attribute 110).
        rdma = ctypes.c_int()
        if self.lib.cuDeviceGetAttribute(ctypes.byref(rdma), 110, self.dev) == 0:
            self.prop.allocFlags.gpuDirectRDMACapable = 1 if rdma.value else 0
        self.access = _AccessDesc()
        self.access.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        self.access.location.id = self.dev
        self.access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        g = ctypes.c_size_t()
        self.check(
            "cuMemGetAllocationGranularity",
            ctypes.byref(g),
            ctypes.byref(self.prop),
            CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
        self.granularity = g.value

    def check(self, name, *args):
        r = getattr(self.lib, name)(*args)
        if r != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorName(r, ctypes.byref(s))
            raise CudaError(f"{name}: {r} {s.value.decode() if s.value else ''}")

    def mem_info(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.check("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def sync(self):
        self.check("cuCtxSynchronize")

    def busy(self, ms):
        """Keeps the device running for ms: memsets of a 64 MiB scratch
        allocation (made on the first call), one at a time."""
        n = 64 << 20
        if not getattr(self, "scratch", None):
            p = self.u64()
            self.check("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(n))
            self.scratch = p.value
        end = time.perf_counter() + ms / 1000.0
        while time.perf_counter() < end:
            self.check("cuMemsetD32_v2", self.u64(self.scratch), ctypes.c_uint(0), ctypes.c_size_t(n // 4))
            self.sync()

    def round_up(self, n):
        g = self.granularity
        return (n + g - 1) // g * g


class Alloc:
    """One allocation: its reserved range and, while mapped, its handle."""

    __slots__ = ("size", "ptr", "handle", "host_off")

    def __init__(self, size, host_off):
        self.size = size
        self.ptr = 0
        self.handle = None
        self.host_off = host_off


class Group:
    """A tag's allocations (count x size each), paused and resumed as one:
    the floor of one torch_memory_saver tag."""

    def __init__(self, drv, sizes, backup):
        self.drv = drv
        self.backup = backup
        self.allocs = []
        off = 0
        for s in sizes:
            s = drv.round_up(s)
            self.allocs.append(Alloc(s, off))
            off += s
        self.bytes = off
        self.host = None
        if backup:
            # Pinned once and kept: the best a backup can do (what
            # retain_cpu_backup gives upstream after its first cycle).
            p = ctypes.c_void_p()
            drv.check("cuMemAllocHost_v2", ctypes.byref(p), ctypes.c_size_t(off))
            self.host = p.value
        for a in self.allocs:
            p = drv.u64()
            drv.check("cuMemAddressReserve", ctypes.byref(p), ctypes.c_size_t(a.size),
                      ctypes.c_size_t(0), drv.u64(0), drv.u64(0))
            a.ptr = p.value
        self._map_all()
        self.fill()

    def _map_all(self):
        d = self.drv
        for a in self.allocs:
            h = d.u64()
            d.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(a.size), ctypes.byref(d.prop), d.u64(0))
            a.handle = h.value
            d.check("cuMemMap", d.u64(a.ptr), ctypes.c_size_t(a.size), ctypes.c_size_t(0), d.u64(a.handle), d.u64(0))
            d.check("cuMemSetAccess", d.u64(a.ptr), ctypes.c_size_t(a.size), ctypes.byref(d.access), ctypes.c_size_t(1))

    def fill(self):
        """Writes a byte per allocation (untimed), so the memory is touched
        as the torch workloads touch theirs."""
        for i, a in enumerate(self.allocs):
            self.drv.check("cuMemsetD8_v2", self.drv.u64(a.ptr), ctypes.c_ubyte(1 + i % 251), ctypes.c_size_t(a.size))
        self.drv.sync()

    def pause(self):
        d = self.drv
        if self.backup:
            for a in self.allocs:
                d.check("cuMemcpyDtoH_v2", ctypes.c_void_p(self.host + a.host_off), d.u64(a.ptr), ctypes.c_size_t(a.size))
        for a in self.allocs:
            d.check("cuMemUnmap", d.u64(a.ptr), ctypes.c_size_t(a.size))
            d.check("cuMemRelease", d.u64(a.handle))
            a.handle = None
        d.sync()

    def resume(self):
        d = self.drv
        self._map_all()
        if self.backup:
            for a in self.allocs:
                d.check("cuMemcpyHtoD_v2", d.u64(a.ptr), ctypes.c_void_p(self.host + a.host_off), ctypes.c_size_t(a.size))
        d.sync()

    def content_ok(self):
        """Whether the first and last byte of every allocation still hold
        what fill() wrote; for a group without backup (a discard pool,
        the graph's), whether every allocation is there again at its
        address: a byte written at each end reads back."""
        d = self.drv
        b = ctypes.c_ubyte()
        if not self.backup:
            for a in self.allocs:
                for off in (0, a.size - 1):
                    d.check("cuMemsetD8_v2", d.u64(a.ptr + off), ctypes.c_ubyte(0x5A), ctypes.c_size_t(1))
                    d.check("cuMemcpyDtoH_v2", ctypes.byref(b), d.u64(a.ptr + off), ctypes.c_size_t(1))
                    if b.value != 0x5A:
                        return False
            return True
        for i, a in enumerate(self.allocs):
            for off in (0, a.size - 1):
                d.check("cuMemcpyDtoH_v2", ctypes.byref(b), d.u64(a.ptr + off), ctypes.c_size_t(1))
                if b.value != 1 + i % 251:
                    return False
        return True

    def close(self):
        d = self.drv
        for a in self.allocs:
            if a.handle is not None:
                d.check("cuMemUnmap", d.u64(a.ptr), ctypes.c_size_t(a.size))
                d.check("cuMemRelease", d.u64(a.handle))
                a.handle = None
            d.check("cuMemAddressFree", d.u64(a.ptr), ctypes.c_size_t(a.size))
        if self.host:
            d.check("cuMemFreeHost", ctypes.c_void_p(self.host))
            self.host = None
