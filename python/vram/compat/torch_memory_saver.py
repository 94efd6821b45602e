# SPDX-License-Identifier: Apache-2.0
"""torch_memory_saver 0.0.10's API, backed by vramd.

A module that stands in for the ``torch_memory_saver`` package, so that an
engine switches with one line:

    import vram.compat.torch_memory_saver as torch_memory_saver
    # was: import torch_memory_saver

    saver = torch_memory_saver.torch_memory_saver   # the singleton
    with saver.region(tag="weights", enable_cpu_backup=True):
        ...
    saver.pause("kv_cache"); saver.resume("kv_cache")

or, without editing the engine, ``install()`` before it imports
torch_memory_saver (in the same process). A trainer that runs whole-process
(``TMS_INIT_ENABLE=1``) starts its workers under ``configure_subprocess()``,
which puts libvram-preload.so in their ``LD_PRELOAD``.

Hook modes, as upstream's: ``"torch"`` routes a region's allocations
through PyTorch's pluggable allocator (vram.torch); ``"preload"`` through
libvram-preload.so's vram_preload_* scopes when the library is loaded in
the process (LD_PRELOAD), else through vram.torch as well (no LD_PRELOAD
is needed for regions, CUDA graphs included).

Backups, with upstream's semantics: ``enable_cpu_backup`` keeps a region's
content across pause/resume in host memory, ``cpu_backup_backend``
"pinned" (registered with the driver, the default, or
``TMS_INIT_CPU_BACKUP_BACKEND``) or "mmap" (pageable, never pinned);
``enable_disk_backup`` in a file vramd owns. After a resume the backup's
host memory goes back to the OS unless ``retain_cpu_backup`` (or
``TMS_RETAIN_CPU_BACKUP=1``) holds at that resume; ``get_cpu_backup`` reads
it while the tag is paused, and after a resume only while retained. The
differences are in docs/python.md.
"""

import contextlib
import ctypes
import errno as _errno
import logging
import os
import sys
from typing import Optional

__all__ = [
    "TorchMemorySaver",
    "torch_memory_saver",
    "memory_saver",
    "configure_subprocess",
    "change_env",
    "install",
    "preload_library_path",
]

logger = logging.getLogger(__name__)

_TAG_DEFAULT = "default"
HOOK_MODES = ("preload", "torch")
CPU_BACKUP_BACKENDS = ("pinned", "mmap")


def _env_on(name):
    return os.environ.get(name, "") not in ("", "0", "false", "False")


def _vt():
    import vram.torch

    return vram.torch


def _vt_if_used():
    """vram.torch if a region was ever entered (else no pool exists, and
    there is nothing to pause: torch need not even be imported)."""
    return sys.modules.get("vram.torch")


def preload_library_path():
    """Where libvram-preload.so is: $VRAM_PRELOAD_LIBRARY, else next to
    the libvram this package loaded (the build tree), else in its vram/
    directory (the installed layout). None when none of them exists."""
    env = os.environ.get("VRAM_PRELOAD_LIBRARY")
    if env:
        return env
    from vram import _lib

    here = os.path.dirname(os.path.realpath(_lib.path)) if os.sep in _lib.path else ""
    dirs = [here, os.path.join(here, "vram")] if here else []
    dirs += ["/usr/lib/x86_64-linux-gnu/vram", "/usr/lib/aarch64-linux-gnu/vram",
             "/usr/local/lib/vram", "/usr/lib/vram"]
    for d in dirs:
        p = os.path.join(d, "libvram-preload.so")
        if os.path.exists(p):
            return p
    return None


def _preload_lib():
    """libvram-preload.so's entry points when it is loaded in this
    process (LD_PRELOAD), else None. Only looked up, never loaded here: a
    library loaded after the runtime would capture nothing."""
    try:
        me = ctypes.CDLL(None)
        fn = me.vram_preload_region_enter
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
    fn.restype = ctypes.c_int
    for name in ("vram_preload_region_exit", "vram_preload_disable_enter",
                 "vram_preload_disable_exit", "vram_preload_whole_process"):
        f = getattr(me, name)
        f.argtypes = []
        f.restype = ctypes.c_int
    # The backup calls came later: a library without them still gives
    # regions, and get_cpu_backup then has nothing to read.
    try:
        me.vram_preload_set_retain.argtypes = [ctypes.c_int]
        me.vram_preload_set_retain.restype = ctypes.c_int
        me.vram_preload_backup.argtypes = [ctypes.c_void_p, ctypes.c_uint64,
                                           ctypes.POINTER(_PreloadBackup)]
        me.vram_preload_backup.restype = ctypes.c_int
        me.vram_preload_backup_release.argtypes = [ctypes.c_char_p]
        me.vram_preload_backup_release.restype = ctypes.c_int
        me.has_backup = True
    except AttributeError:
        me.has_backup = False
    return me


class _PreloadBackup(ctypes.Structure):
    """struct vram_preload_backup (vram_preload.h)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("kind", ctypes.c_int),
        ("paused", ctypes.c_int),
        ("retains", ctypes.c_int),
        ("host", ctypes.c_void_p),
        ("tag", ctypes.c_char * 64),
    ]


def _keep_forever(obj):
    """A MemPool the process keeps to its end: none is destroyed at exit
    after the allocator it calls back (vram.torch does the same)."""
    import ctypes as _c

    _c.pythonapi.Py_IncRef(_c.py_object(obj))
    return obj


# What vram_preload_region_enter's backup argument means (vram_preload.h).
_PRELOAD_BACKUP = {False: 0, True: 1, "pageable": 2, "disk": 3}


class TorchMemorySaver:
    """torch_memory_saver.TorchMemorySaver over vramd. Every instance
    shares the process's vramd pools (one per tag, backup kind and
    device), as every torch_memory_saver instance shares its one native
    library."""

    def __init__(self):
        self._hook_mode = None
        self._memory_margin_bytes = 0
        self._disabled_depth = 0
        self._retain = _env_on("TMS_RETAIN_CPU_BACKUP")
        self._disk_dir = os.environ.get("TMS_DISK_BACKUP_DIR")
        # Pools whose backup still holds the content after a resume (it
        # was retained then): get_cpu_backup reads them while active.
        self._retained = set()
        self._preload = None
        self._preload_checked = False
        # Preload mode: whether a tag's pools were last resumed while
        # retain_cpu_backup held (tags not in it: _pl_retained_rest).
        self._pl_retained = {}
        self._pl_retained_rest = False
        self._mempools = {}  # preload mode: (tag, kind, device) -> MemPool

    # -- configuration ---------------------------------------------------------

    def _default_backend(self):
        b = os.environ.get("TMS_INIT_CPU_BACKUP_BACKEND") or "pinned"
        if b not in CPU_BACKUP_BACKENDS:
            raise ValueError(f"TMS_INIT_CPU_BACKUP_BACKEND={b!r}: expected one of {CPU_BACKUP_BACKENDS}")
        return b

    def _kind(self, enable_cpu_backup, enable_disk_backup, cpu_backup_backend):
        """vram.torch's backup argument for a region's options, checked as
        upstream checks them."""
        if cpu_backup_backend is not None:
            if not enable_cpu_backup:
                raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
            if cpu_backup_backend not in CPU_BACKUP_BACKENDS:
                raise ValueError(
                    f"unknown cpu_backup_backend {cpu_backup_backend!r}; expected one of {CPU_BACKUP_BACKENDS}"
                )
        assert not (enable_cpu_backup and enable_disk_backup), \
            "enable_cpu_backup and enable_disk_backup are mutually exclusive"
        if enable_disk_backup:
            return "disk"
        if not enable_cpu_backup:
            return False
        backend = cpu_backup_backend or self._default_backend()
        return "pageable" if backend == "mmap" else True

    def _preload_scopes(self):
        """libvram-preload.so's scopes when hook_mode is "preload" and the
        library is loaded, else None."""
        if self._hook_mode == "torch":
            return None
        if not self._preload_checked:
            self._preload = _preload_lib()
            self._preload_checked = True
            # retain_cpu_backup is decided at each resume, as upstream's:
            # pools made from now on keep their backup, and a resume that
            # does not retain gives it back (_preload_transition).
            if self._preload is not None and self._preload.has_backup:
                self._preload.vram_preload_set_retain(1)
        return self._preload

    def _torch_state(self):
        vt = _vt()
        # Backups are kept after a resume and given back here when the
        # resume does not retain them (retain_cpu_backup is decided at
        # resume time, as upstream's).
        vt.configure(retain_backup=True)
        return vt

    # -- regions ---------------------------------------------------------------

    @contextlib.contextmanager
    def region(
        self,
        tag: str = _TAG_DEFAULT,
        enable_cpu_backup: bool = False,
        enable_disk_backup: bool = False,
        cpu_backup_backend: Optional[str] = None,
    ):
        """Tensors allocated inside are pausable under tag; with
        enable_cpu_backup (or enable_disk_backup) their content survives
        pause/resume."""
        kind = self._kind(enable_cpu_backup, enable_disk_backup, cpu_backup_backend)
        pl = self._preload_scopes()
        if pl is not None:
            import torch

            # One MemPool per (tag, kind, device), as upstream: torch's
            # cache must not hand a region's blocks to code outside it.
            key = (tag, kind, torch.cuda.current_device())
            pool = self._mempools.get(key)
            if pool is None:
                pool = self._mempools[key] = _keep_forever(torch.cuda.MemPool())
            r = pl.vram_preload_region_enter(tag.encode(), _PRELOAD_BACKUP[kind])
            if r < 0:
                raise OSError(-r, f"vram_preload_region_enter({tag!r}): {os.strerror(-r)}")
            try:
                with torch.cuda.use_mem_pool(pool):
                    yield
            finally:
                pl.vram_preload_region_exit()
            return
        with self._torch_state().region(tag, backup=kind):
            yield

    @contextlib.contextmanager
    def cuda_graph(
        self,
        cuda_graph,
        pool=None,
        stream=None,
        capture_error_mode="global",
        tag: str = _TAG_DEFAULT,
        enable_cpu_backup: bool = False,
        cpu_backup_backend: Optional[str] = None,
    ):
        """Like torch.cuda.graph(...), with the graph's memory pausable
        under tag."""
        kind = self._kind(enable_cpu_backup, False, cpu_backup_backend)
        pl = self._preload_scopes()
        if pl is not None:
            import torch

            # The graph's private pool holds its memory; the scope routes
            # the cudaMalloc calls that fill it to tag's vramd pool.
            with torch.cuda.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
                r = pl.vram_preload_region_enter(tag.encode(), _PRELOAD_BACKUP[kind])
                if r < 0:
                    raise OSError(-r, f"vram_preload_region_enter({tag!r}): {os.strerror(-r)}")
                try:
                    yield
                finally:
                    pl.vram_preload_region_exit()
            return
        with self._torch_state().cuda_graph(
            cuda_graph,
            pool=pool,
            stream=stream,
            capture_error_mode=capture_error_mode,
            tag=tag,
            backup=kind,
        ):
            yield

    @contextlib.contextmanager
    def disable(self):
        """Allocations inside go to torch's own allocator (not pausable),
        in a fresh pool dropped afterwards, as torch_memory_saver does;
        under libvram-preload.so also past its whole-process capture."""
        import torch

        pl = self._preload_scopes()
        if pl is not None:
            pl.vram_preload_disable_enter()
        self._disabled_depth += 1
        try:
            pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(pool):
                yield
            del pool
        finally:
            self._disabled_depth -= 1
            if pl is not None:
                pl.vram_preload_disable_exit()

    # -- pause and resume ------------------------------------------------------

    def _client(self):
        """The vramd client that pauses this process's pools: vram.torch's
        when it runs, else one of our own (the preload library's pools
        belong to its own session, and any client may pause them)."""
        vt = _vt_if_used()
        if vt is not None and getattr(vt, "_state", None) is not None:
            return vt.client()
        if self._preload is None:
            return None
        c = getattr(self, "_own_client", None)
        if c is None:
            import vram

            c = vram.connect(name=f"torch_memory_saver {os.getpid()}")
            self._own_client = c
        return c

    def _tag_pools(self, tag):
        vt = _vt_if_used()
        if vt is None:
            return []
        return [(b, p) for t, b, _d, p in vt.pools() if tag is None or t == tag]

    def pause(self, tag: Optional[str] = None):
        """Releases the memory of tag (None: every tag)."""
        vt = _vt_if_used()
        if vt is not None:
            vt.pause(tag)
            for b, p in self._tag_pools(tag):
                self._retained.discard(p.name)
        if self._preload_scopes() is not None:
            self._preload_transition(True, tag)

    def resume(self, tag: Optional[str] = None):
        """Brings back the memory of tag (None: every tag), restoring
        backups; a backup not retained gives its host memory back."""
        vt = _vt_if_used()
        if vt is not None:
            self._check_margin(tag)
            paused = [(b, p) for b, p in self._tag_pools(tag) if b and p.state.name == "PAUSED"]
            vt.resume(tag)
            for _b, p in paused:
                if self._retain:
                    self._retained.add(p.name)
                else:
                    p.backup_release()
                    self._retained.discard(p.name)
        if self._preload_scopes() is not None:
            self._preload_transition(False, tag)

    def _preload_transition(self, pause_, tag):
        c = self._client()
        if c is None:
            return
        fn = c.pause if pause_ else c.resume
        from vram import VramError

        try:
            fn(tag=tag, owner_pid=os.getpid())
        except VramError as e:
            if e.errno not in (_errno.EALREADY, _errno.ENOENT):
                raise
        pl = self._preload
        if not pl.has_backup:
            return
        keep = (not pause_) and self._retain
        if tag is None:
            self._pl_retained.clear()
            self._pl_retained_rest = keep
        else:
            self._pl_retained[tag] = keep
        if not pause_ and not self._retain:
            r = pl.vram_preload_backup_release(tag.encode() if tag else None)
            if r < 0:
                raise OSError(-r, f"vram_preload_backup_release({tag!r}): {os.strerror(-r)}")

    def _preload_cpu_backup(self, ptr, nbytes):
        """(host address, None) of the backup of [ptr, ptr + nbytes) in
        libvram-preload.so's pools, None when it holds no content now,
        or False when no pool of the library holds the range."""
        pl = self._preload_scopes()
        if pl is None or not pl.has_backup:
            return False
        b = _PreloadBackup(size=ctypes.sizeof(_PreloadBackup))
        r = pl.vram_preload_backup(ptr, nbytes, ctypes.byref(b))
        if r == -_errno.ENOENT:
            return False
        if r < 0 or b.kind == _PRELOAD_BACKUP["disk"]:
            return None  # no backup, or on disk only (as upstream)
        if b.paused:
            return b.host
        tag = b.tag.decode()
        if b.retains and self._pl_retained.get(tag, self._pl_retained_rest):
            return b.host
        return None

    def _check_margin(self, tag):
        """upstream's memory_margin_bytes: a resume that would leave less
        than the margin free on the device fails before it maps."""
        if self._memory_margin_bytes <= 0:
            return
        need = sum(p.size for _b, p in self._tag_pools(tag) if p.state.name == "PAUSED")
        if need == 0:
            return
        import torch

        free, _total = torch.cuda.mem_get_info()
        if free < need + self._memory_margin_bytes:
            raise RuntimeError(
                f"torch_memory_saver: resume of {tag or 'every tag'} needs {need} bytes and a margin "
                f"of {self._memory_margin_bytes}, the device has {free} free"
            )

    # -- backups ---------------------------------------------------------------

    @property
    def retain_cpu_backup(self) -> bool:
        return self._retain

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value: bool):
        self._retain = bool(value)

    def set_disk_backup_dir(self, path: str):
        """Upstream's directory for disk backups, created if needed. vramd
        writes disk backups into its own backup_dir (vramd.conf), which it
        owns; the path is kept for code that reads it back."""
        os.makedirs(path, exist_ok=True)
        self._disk_dir = path

    def get_cpu_backup(self, x, zero_copy: bool = False):
        """The host copy of tensor x (a CPU tensor of its dtype and shape):
        while its tag is paused, or after a resume that retained the
        backup; else None (also for a tensor with no backup). zero_copy:
        a view of the backup itself (valid until the backup is released),
        else a copy. In hook_mode "preload" the backup is that of
        libvram-preload.so's pool holding x (whole-process or a region);
        a disk backup gives None, as upstream's."""
        import torch

        assert x.is_cuda, f"{x.device=}"
        assert x.is_contiguous(), f"{x.shape=} {x.stride()=} {x.dtype=}"
        ptr, nbytes = x.data_ptr(), x.nbytes
        host = self._preload_cpu_backup(ptr, nbytes)
        if host is None:
            return None
        if host is not False:
            buf = (ctypes.c_uint8 * nbytes).from_address(host)
            t = torch.frombuffer(buf, dtype=torch.uint8).view(x.dtype).view(x.shape)
            return t if zero_copy else t.clone()
        for b, p in self._tag_pools(None):
            if not b or p.closed:
                continue
            base = p.base
            if not (base <= ptr and ptr + nbytes <= base + p.size):
                continue
            if p.state.name != "PAUSED" and p.name not in self._retained:
                return None
            host, length = p.backup()
            off = ptr - base
            if off + nbytes > length:
                return None
            buf = (ctypes.c_uint8 * nbytes).from_address(host + off)
            t = torch.frombuffer(buf, dtype=torch.uint8).view(x.dtype).view(x.shape)
            return t if zero_copy else t.clone()
        return None

    # -- attributes engines touch ----------------------------------------------

    @property
    def enabled(self):
        return True

    @property
    def hook_mode(self):
        # torch_memory_saver has no getter either.
        raise AttributeError("hook_mode can only be set")

    @hook_mode.setter
    def hook_mode(self, mode):
        if mode not in HOOK_MODES:
            raise ValueError(f"unknown hook mode {mode!r}; expected one of {HOOK_MODES}")
        if mode == "torch" and self._preload is not None and self._preload.has_backup:
            # Nothing here resumes the library's pools now: they retain
            # as the environment said at load.
            self._preload.vram_preload_set_retain(
                int(_env_on("TMS_RETAIN_CPU_BACKUP") or _env_on("VRAM_CAPTURE_RETAIN")))
        self._hook_mode = mode
        self._preload_checked = False
        # Found now, before the first allocation makes a pool, so that
        # the pools retain and each resume decides (see _preload_scopes).
        self._preload_scopes()

    @property
    def memory_margin_bytes(self):
        raise NotImplementedError("Only setter is supported")

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value: int):
        self._memory_margin_bytes = int(value)


torch_memory_saver = TorchMemorySaver()
# torch_memory_saver's older name for the singleton.
memory_saver = torch_memory_saver


@contextlib.contextmanager
def configure_subprocess():
    """The environment a child started inside the block needs to run
    whole-process (TMS_INIT_ENABLE=1) or in hook_mode "preload":
    libvram-preload.so first in LD_PRELOAD, and this process's vramd
    socket (VRAM_SOCKET) when it has one. The TMS_* settings pass down as
    they are."""
    lib = preload_library_path()
    if lib is None:
        raise RuntimeError(
            "configure_subprocess: libvram-preload.so not found (install libvram0, "
            "or set VRAM_PRELOAD_LIBRARY to its path)"
        )
    current = os.environ.get("LD_PRELOAD", "")
    parts = [p for p in current.split(":") if p and p != lib]
    with change_env("LD_PRELOAD", ":".join([lib] + parts)):
        yield


@contextlib.contextmanager
def change_env(key: str, value: str):
    """torch_memory_saver's helper: sets an environment variable inside the
    block."""
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def install():
    """Makes ``import torch_memory_saver`` give this module, in this
    process, from now on. Returns the module."""
    mod = sys.modules[__name__]
    sys.modules["torch_memory_saver"] = mod
    return mod
