# SPDX-License-Identifier: Apache-2.0
"""torch_memory_saver's backup semantics and vLLM's sleep levels through
vram.compat, on the host backend: when a backup's host memory goes back
(a resume that does not retain it), when get_cpu_backup is valid (paused,
or retained after a resume, at the same address), the "mmap" backend
(pageable), level 1 keeping the weights and level 2 keeping no host copy,
and vramd's SleepModeBackend in vLLM's factory.

As in test_vllm_wake.py, a stand-in ``torch`` module sits in sys.modules
and vram.torch is given pools made here. The stand-in has what
get_cpu_backup calls: a tensor with data_ptr/nbytes/dtype/shape, and
frombuffer, whose result is the bytes it was given (a view, or a copy
after clone)."""

import ctypes
import errno
import os
import sys
import types

import pytest

import vram
import vramtest
from vramtest import MiB


class FakeTensor:
    """A "CUDA tensor" at a pool address (the host backend's memory is
    host memory, so its bytes can be read)."""

    is_cuda = True
    dtype = "uint8"

    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes, self.shape = ptr, nbytes, (nbytes,)

    def data_ptr(self):
        return self.ptr

    def is_contiguous(self):
        return True

    def stride(self):
        return (1,)


class HostView:
    """What the stand-in frombuffer returns: the buffer itself."""

    def __init__(self, buf, copied=False):
        self.buf, self.copied = buf, copied

    def view(self, *_):
        return self

    def clone(self):
        return HostView(bytes(self.buf), True)

    def data_ptr(self):
        return ctypes.addressof(self.buf)

    def tobytes(self):
        return bytes(self.buf)


@pytest.fixture
def daemon(monkeypatch):
    d = vramtest.Daemon(capacity="256M", devices=1)
    monkeypatch.setenv("VRAM_SOCKET", d.socket)
    try:
        yield d
    finally:
        rc = d.stop()
        if rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


@pytest.fixture
def stand_in(monkeypatch, daemon):
    """vram.torch over a client of the test's daemon; pools(kinds) makes
    one pool per (tag, kind) as vram.torch's tag_pool would, retained as
    the compat layer asks."""
    fake_torch = types.ModuleType("torch")
    fake_torch.cuda = types.ModuleType("torch.cuda")
    fake_torch.uint8 = "uint8"
    fake_torch.frombuffer = lambda buf, dtype: HostView(buf)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.delitem(sys.modules, "vram.torch", raising=False)
    import vram.torch as vt

    c = vram.connect(daemon.socket, name="engine")
    c.start_thread()
    pools = {}

    def make(tag, kind, retain=True):
        p = c.create_pool(
            f"torch.test.{tag}",
            tag=tag,
            backup=bool(kind),
            reserve_bytes=128 * MiB,
            retain_backup=retain and bool(kind),
            pageable_backup=kind == "pageable",
        )
        pools[(tag, kind, 0)] = vt._TagPool(tag, kind, 0, p, None)
        return p

    monkeypatch.setattr(vt, "_state", types.SimpleNamespace(client=c, pools=pools))
    try:
        yield vt, c, make
    finally:
        c.close()


def _held(client, pool):
    # A backup given back leaves this process at once and its pages go on
    # a libvram thread; the next use of the backup (here, asking for its
    # address) waits for that, so the daemon's figure is final after it.
    try:
        pool.backup()
    except vram.VramError:
        pass
    [pi] = client.list_pools(name=pool.name)
    return pi.backup_bytes


def _saver():
    import vram.compat.torch_memory_saver as tms

    s = tms.TorchMemorySaver()
    s.hook_mode = "torch"
    return s


def _tensor(pool, seed, n=MiB):
    ptr = pool.alloc(n)
    data = vramtest.pattern(n, seed)
    pool.view(ptr, n)[:] = data
    return FakeTensor(ptr, n), data


@pytest.mark.parametrize("kind", [True, "pageable"], ids=["pinned", "mmap"])
def test_backup_released_by_a_resume_that_does_not_retain(stand_in, kind):
    vt, c, make = stand_in
    w = make("weights", kind)
    kv = make("kv_cache", False)
    t, data = _tensor(w, 1)
    k, _ = _tensor(kv, 2)
    s = _saver()
    assert s.retain_cpu_backup is False
    s.pause()
    assert _held(c, w) >= MiB
    got = s.get_cpu_backup(t)
    assert got.copied and got.tobytes() == data
    assert s.get_cpu_backup(k) is None  # no backup: None, as upstream
    s.resume()
    assert bytes(w.view(t.ptr, MiB)) == data
    # Not retained: only valid while paused, and its pages went back.
    assert s.get_cpu_backup(t) is None
    assert _held(c, w) == 0
    assert bytes(kv.view(k.ptr, MiB)) != vramtest.pattern(MiB, 2)


def test_retained_backup_keeps_its_address_until_a_non_retaining_resume(stand_in):
    vt, c, make = stand_in
    w = make("weights", True)
    t, data = _tensor(w, 3)
    s = _saver()
    s.pause("weights")
    first = s.get_cpu_backup(t, zero_copy=True)
    assert not first.copied and first.tobytes() == data
    addr = first.data_ptr()
    s.retain_cpu_backup = True
    s.resume("weights")
    after = s.get_cpu_backup(t, zero_copy=True)
    assert after.data_ptr() == addr and after.tobytes() == data
    assert _held(c, w) >= MiB
    # Turning retention off keeps what is held until the next resume.
    s.retain_cpu_backup = False
    assert s.get_cpu_backup(t, zero_copy=True).data_ptr() == addr
    data2 = vramtest.pattern(MiB, 4)
    w.view(t.ptr, MiB)[:] = data2
    s.pause("weights")
    again = s.get_cpu_backup(t, zero_copy=True)
    assert again.data_ptr() == addr and again.tobytes() == data2
    s.resume("weights")
    assert s.get_cpu_backup(t) is None
    assert _held(c, w) == 0
    assert bytes(w.view(t.ptr, MiB)) == data2


def test_retain_from_the_environment(monkeypatch):
    import vram.compat.torch_memory_saver as tms

    monkeypatch.setenv("TMS_RETAIN_CPU_BACKUP", "1")
    assert tms.TorchMemorySaver().retain_cpu_backup is True
    monkeypatch.setenv("TMS_RETAIN_CPU_BACKUP", "0")
    assert tms.TorchMemorySaver().retain_cpu_backup is False


def test_region_options_as_upstream_checks_them(monkeypatch):
    s = _saver()
    k = s._kind
    assert k(False, False, None) is False
    assert k(True, False, None) is True  # pinned, the default
    assert k(True, False, "pinned") is True
    assert k(True, False, "mmap") == "pageable"
    assert k(False, True, None) == "disk"
    monkeypatch.setenv("TMS_INIT_CPU_BACKUP_BACKEND", "mmap")
    assert k(True, False, None) == "pageable"
    assert k(True, False, "pinned") is True  # the argument wins
    with pytest.raises(ValueError):
        k(False, False, "mmap")
    with pytest.raises(ValueError):
        k(True, False, "bogus")
    with pytest.raises(AssertionError):
        k(True, True, None)


def test_vram_torch_backup_kinds(monkeypatch):
    fake_torch = types.ModuleType("torch")
    fake_torch.cuda = types.ModuleType("torch.cuda")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.delitem(sys.modules, "vram.torch", raising=False)
    import vram.torch as vt

    assert vt.backup_kind(False) is False and vt.backup_kind(None) is False
    assert vt.backup_kind(True) is True and vt.backup_kind("host") is True
    assert vt.backup_kind("mmap") == "pageable" and vt.backup_kind("disk") == "disk"
    with pytest.raises(ValueError):
        vt.backup_kind("tape")


def test_set_disk_backup_dir_creates_it(tmp_path):
    s = _saver()
    d = tmp_path / "a" / "b"
    s.set_disk_backup_dir(str(d))
    assert d.is_dir()


# ---- vLLM's levels ---------------------------------------------------------


def _allocator():
    from vram.compat.vllm import CuMemAllocator

    a = CuMemAllocator()
    a._backup = {"weights": True, "kv_cache": False}
    return a


def test_vllm_level_1_keeps_the_weights_level_2_keeps_no_host_copy(stand_in):
    vt, c, make = stand_in
    w = make("weights", True, retain=False)
    make("kv_cache", False)
    t, data = _tensor(w, 5)
    a = _allocator()

    a.sleep(offload_tags=("weights",))  # level 1
    assert _held(c, w) >= MiB
    a.wake_up(tags=["weights"])  # staged: weights first
    assert vt.is_paused("kv_cache") and not vt.is_paused("weights")
    assert bytes(w.view(t.ptr, MiB)) == data
    a.wake_up(tags=["kv_cache"])
    assert _held(c, w) == 0  # restored: the host copy went back

    a.sleep(offload_tags=())  # level 2: vLLM reloads the weights
    assert vt.is_paused("weights")
    # As the daemon sees it at once, with no wait through the handle: the
    # sleep's drop of a paused backup is done when it returns.
    [pi] = c.list_pools(name=w.name)
    assert pi.backup_bytes == 0, pi
    a.wake_up()
    assert bytes(w.view(t.ptr, MiB)) == bytes(MiB)


def test_vllm_discard_keeps_nothing(stand_in):
    vt, c, make = stand_in
    w = make("weights", True, retain=False)
    t, _ = _tensor(w, 6)
    a = _allocator()
    a.discard(("weights",))
    assert vt.is_paused("weights") and _held(c, w) == 0
    a.wake_up(["weights"])
    assert bytes(w.view(t.ptr, MiB)) == bytes(MiB)


@pytest.fixture
def fake_vllm(monkeypatch):
    """vllm.device_allocator.sleep_mode_backend as vllm-project/vllm#44074
    has it: the ABC and the factory (its registry empty)."""
    import abc

    mod = types.ModuleType("vllm.device_allocator.sleep_mode_backend")

    class SleepModeBackend(abc.ABC):
        def __init__(self):
            self._state = "RUNNING"

        @abc.abstractmethod
        def suspend(self, level=1): ...

        @abc.abstractmethod
        def resume(self, tags=None): ...

        def state(self):
            return self._state

    class SleepModeBackendFactory:
        _registry = {}

        @classmethod
        def register_backend(cls, name, module_path, class_name):
            if name in cls._registry:
                raise ValueError(name)
            import importlib

            cls._registry[name] = lambda: getattr(importlib.import_module(module_path), class_name)

        @classmethod
        def get_backend_class(cls, name):
            return cls._registry[name]()

    mod.SleepModeBackend = SleepModeBackend
    mod.SleepModeBackendFactory = SleepModeBackendFactory
    for name in ("vllm", "vllm.device_allocator"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    import vram.compat.vllm as v

    monkeypatch.setattr(v, "_backend_class", None)
    return mod


def test_vllm_sleep_mode_backend_registers_and_runs(stand_in, fake_vllm, monkeypatch):
    import vram.compat.vllm as v

    vt, c, make = stand_in
    w = make("weights", True, retain=False)
    make("kv_cache", False)
    t, data = _tensor(w, 7)
    a = _allocator()
    monkeypatch.setattr(v.CuMemAllocator, "instance", a)

    assert v.register_sleep_mode_backend() is True
    assert v.register_sleep_mode_backend() is True  # twice: no error
    cls = fake_vllm.SleepModeBackendFactory.get_backend_class("vram")
    assert issubclass(cls, fake_vllm.SleepModeBackend)
    assert cls.preserves_communicators()
    b = cls()
    b.suspend(level=1)
    assert b.state() == "SUSPENDED" and vt.is_paused("weights")
    b.resume(["weights"])
    assert b.state() == "RUNNING" and bytes(w.view(t.ptr, MiB)) == data
    b.resume(["kv_cache"])

    # A resume that cannot fit: RuntimeError, still suspended.
    b.suspend(level=1)
    other = vram.connect(os.environ["VRAM_SOCKET"], name="trainer")
    try:
        hog = other.create_pool("hog", reserve_bytes=256 * MiB)
        hog.reserve(224 * MiB)  # the weights (64 MiB) cannot fit
        with pytest.raises(RuntimeError) as ei:
            b.resume(None)
        assert ei.value.__cause__.errno == errno.ENOMEM
        assert b.state() == "SUSPENDED"
    finally:
        other.close()
    b.resume(None)
    assert bytes(w.view(t.ptr, MiB)) == data


def test_vllm_without_sleep_mode_backend(monkeypatch):
    import vram.compat.vllm as v

    monkeypatch.setitem(sys.modules, "vllm.device_allocator.sleep_mode_backend", None)
    monkeypatch.setattr(v, "_backend_class", None)
    assert v.register_sleep_mode_backend() is False
    assert v._sleep_mode_backend_class() is None


# ---- hook_mode "preload": libvram-preload.so's pools -------------------------

_PRELOAD_SCRIPT = r"""
import ctypes, os, sys, types
fake = ctypes.CDLL(os.environ["CUDART_FAKE"], mode=ctypes.RTLD_GLOBAL)
me = ctypes.CDLL(None)
me.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
me.vram_preload_region_enter.argtypes = [ctypes.c_char_p, ctypes.c_int]

class HostView:
    def __init__(self, buf, copied=False):
        self.buf, self.copied = buf, copied
    def view(self, *_):
        return self
    def clone(self):
        return HostView(bytes(self.buf), True)
    def data_ptr(self):
        return ctypes.addressof(self.buf)
    def tobytes(self):
        return bytes(self.buf)

class T:
    is_cuda = True
    dtype = "uint8"
    def __init__(self, ptr, n):
        self.ptr, self.nbytes, self.shape = ptr, n, (n,)
    def data_ptr(self):
        return self.ptr
    def is_contiguous(self):
        return True

torch = types.ModuleType("torch")
torch.cuda = types.ModuleType("torch.cuda")
torch.uint8 = "uint8"
torch.frombuffer = lambda buf, dtype: HostView(buf)
sys.modules["torch"] = torch

import vram
import vram.compat.torch_memory_saver as tms

MiB = 1 << 20
s = tms.TorchMemorySaver()
s.hook_mode = "preload"  # before the first allocation, as SGLang does

def alloc(tag, backup, seed):
    if tag:
        assert me.vram_preload_region_enter(tag.encode(), backup) == 0
    p = ctypes.c_void_p()
    assert me.cudaMalloc(ctypes.byref(p), MiB) == 0
    if tag:
        assert me.vram_preload_region_exit() == 0
    data = bytes((seed * 7 + i) & 0xFF for i in range(251)) * (MiB // 251) 
    data += bytes(MiB - len(data))
    ctypes.memmove(p.value, data, MiB)
    return T(p.value, MiB), data

def held(tag):
    return sum(pi.backup_bytes for pi in c.list_pools(owner_pid=os.getpid())
               if pi.tag == tag)

c = vram.connect(name="checker")
a, da = alloc(None, 0, 1)          # whole-process: the default tag, host backup
w, dw = alloc("weights", 1, 2)     # a region with a backup
k, _ = alloc("kv_cache", 0, 3)     # a region without one
assert s.get_cpu_backup(a) is None  # active, never paused
s.pause()
got = s.get_cpu_backup(a)
assert got.copied and got.tobytes() == da
view = s.get_cpu_backup(w, zero_copy=True)
assert not view.copied and view.tobytes() == dw
assert s.get_cpu_backup(k) is None  # no backup
assert held("default") >= MiB
s.resume()
assert ctypes.string_at(a.ptr, MiB) == da
# Not retained: valid only while paused, and the pages went back.
assert s.get_cpu_backup(a) is None and s.get_cpu_backup(w) is None
assert held("default") == 0 and held("weights") == 0

# retain_cpu_backup set now, long after the library loaded, holds at the
# next resume of weights.
s.retain_cpu_backup = True
s.pause("weights")
s.resume("weights")
after = s.get_cpu_backup(w, zero_copy=True)
assert after is not None and after.tobytes() == dw and after.data_ptr() == view.data_ptr()
assert held("weights") >= MiB
assert s.get_cpu_backup(a) is None  # default was not resumed retaining
s.retain_cpu_backup = False
s.pause("weights")
assert s.get_cpu_backup(w).tobytes() == dw
s.resume("weights")
assert s.get_cpu_backup(w) is None and held("weights") == 0
c.close()
print("ok")
"""


def test_preload_mode_get_cpu_backup_and_retention(daemon, tmp_path):
    """hook_mode "preload": get_cpu_backup reads the backup of the
    library's pools (whole-process and regions) with torch mode's
    answers, and retain_cpu_backup set after load decides at each resume."""
    import subprocess

    build = os.environ.get("VRAM_BUILD", "build")
    lib = os.path.abspath(os.path.join(build, "libvram-preload.so"))
    fake = os.path.abspath(os.path.join(build, "tests", "libcudart_fake.so"))
    if not (os.path.exists(lib) and os.path.exists(fake)):
        pytest.skip("libvram-preload.so or the fake runtime is not built")
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=lib,
        CUDART_FAKE=fake,
        VRAM_SOCKET=daemon.socket,
        TMS_INIT_ENABLE="1",
        TMS_INIT_ENABLE_CPU_BACKUP="1",
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
    )
    env.pop("TMS_RETAIN_CPU_BACKUP", None)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    r = subprocess.run([sys.executable, "-c", _PRELOAD_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


_PRELOAD_DISK_SCRIPT = r"""
import ctypes, os, sys, types
fake = ctypes.CDLL(os.environ["CUDART_FAKE"], mode=ctypes.RTLD_GLOBAL)
me = ctypes.CDLL(None)
me.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
me.vram_preload_region_enter.argtypes = [ctypes.c_char_p, ctypes.c_int]
torch = types.ModuleType("torch")
torch.cuda = types.ModuleType("torch.cuda")
sys.modules["torch"] = torch
import vram
import vram.compat.torch_memory_saver as tms
MiB = 1 << 20
s = tms.TorchMemorySaver()
s.hook_mode = "preload"
assert me.vram_preload_region_enter(b"disk", 3) == 0  # VRAM_PRELOAD_BACKUP_DISK
p = ctypes.c_void_p()
assert me.cudaMalloc(ctypes.byref(p), MiB) == 0
assert me.vram_preload_region_exit() == 0
ctypes.memset(p.value, 0x42, MiB)
c = vram.connect(name="checker")
s.pause("disk")
assert c.stats().disk_backup_bytes >= MiB, c.stats()
s.resume("disk")
assert ctypes.string_at(p.value, 4) == b"\x42" * 4
# Not retained (upstream's default): the file's blocks went back.
assert c.stats().disk_backup_bytes == 0, c.stats()
print("ok")
"""


def test_preload_mode_disk_backup_released_by_a_resume(tmp_path):
    """hook_mode "preload" with a disk region: a resume that does not
    retain gives the file's blocks back, as in torch mode (upstream's
    example; it failed on the H200 once retention became a resume-time
    choice in preload mode)."""
    import subprocess

    build = os.environ.get("VRAM_BUILD", "build")
    lib = os.path.abspath(os.path.join(build, "libvram-preload.so"))
    fake = os.path.abspath(os.path.join(build, "tests", "libcudart_fake.so"))
    if not (os.path.exists(lib) and os.path.exists(fake)):
        pytest.skip("libvram-preload.so or the fake runtime is not built")
    bdir = tmp_path / "backups"
    bdir.mkdir()
    conf = tmp_path / "vramd.conf"
    conf.write_text(f"backup_dir = {bdir}\n")
    d = vramtest.Daemon(capacity="256M", devices=1, extra=["--config", str(conf)])
    try:
        env = dict(os.environ)
        env.update(LD_PRELOAD=lib, CUDART_FAKE=fake, VRAM_SOCKET=d.socket,
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        env.pop("TMS_RETAIN_CPU_BACKUP", None)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
        r = subprocess.run([sys.executable, "-c", _PRELOAD_DISK_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    finally:
        rc = d.stop()
        assert rc == 0, d.log()
