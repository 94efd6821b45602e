# SPDX-License-Identifier: Apache-2.0
"""PyTorch on vramd: tensors in pausable pools, by tag.

    import torch, vram.torch

    with vram.torch.region("weights", backup=True):
        model = build_model().cuda()           # weights in a vramd pool
    with vram.torch.region("kv_cache"):
        kv = torch.empty(n, device="cuda")     # discarded on pause
    g = torch.cuda.CUDAGraph()
    with vram.torch.cuda_graph(g):             # graph memory, tag cuda_graph
        out = model(static_input)

    vram.torch.pause()                         # all tags: memory to the device
    vram.torch.resume("weights")               # staged wake
    vram.torch.resume("kv_cache")

How: each (tag, backup, device) has one vramd pool (policy host when
backup, else discard), made on the device's UUID (a worker started with its
own CUDA_VISIBLE_DEVICES numbers devices otherwise than vramd does), and
one torch.cuda.MemPool whose allocator is
libvram's pluggable allocator (vram_torch_malloc/vram_torch_free).
region() routes the thread's allocations to that MemPool
(torch.cuda.use_mem_pool) and makes the vramd pool current for libvram
(vram_torch_push_pool); torch's caching allocator then takes its segments
from the vramd pool. A pause unmaps the pool in this process and returns
its memory to the device; resume maps new memory at the same addresses,
so tensors, their storage pointers and captured graphs stay valid. Memory
allocated outside a region is not pausable (vramctl audit shows it).

Lifetime: the pluggable allocator and every MemPool made here are kept
for the life of the process (never destroyed, not even at exit), so no
MemPool or CUDA graph can outlive the allocator it calls back (the
"pure virtual method called" crash at exit). Interpreter exit with pools
alive, paused, held by a graph, or with the daemon gone, prints nothing:
libvram closes the pools after the interpreter has finished.
"""

import contextlib
import ctypes
import errno as _errno
import os
import sys
import threading

import torch

import vram as _vram
from vram import Report, State, VramError, _check, _lib

__all__ = [
    "region",
    "cuda_graph",
    "pause",
    "resume",
    "configure",
    "client",
    "pools",
    "usage",
    "pool_for",
    "allocator",
    "set_default",
    "is_paused",
]

_lock = threading.RLock()
_state = None
# Objects that must never be destroyed (see the module's docstring).
_immortal = []


def _keep_forever(obj):
    """A strong reference that is never dropped, not even when the
    interpreter clears modules at exit."""
    _immortal.append(obj)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    return obj


class _Config:
    socket = None  # None: $VRAM_SOCKET, else the default socket
    client_name = None  # None: "<program> (torch)"
    name_prefix = None  # None: "torch.<pid>"
    reserve_bytes = 0  # each pool's virtual range; 0: the device's size
    persist = False
    retain_backup = True  # backups keep their pages after a resume


_config = _Config()


def configure(
    socket=None,
    client_name=None,
    name_prefix=None,
    reserve_bytes=None,
    persist=None,
    retain_backup=None,
):
    """Settings for the pools made from now on; call before the first
    region(). name_prefix: pools are named PREFIX.TAG.POLICY.DEVICE
    (default torch.PID). persist: pools outlive this process (re-open them
    by name after a restart). retain_backup: backups keep their pages
    after a resume (the default); False: vramd gives them back once the
    pool is restored (Pool.backup_release() gives a retained one back)."""
    with _lock:
        if retain_backup is not None:
            _config.retain_backup = bool(retain_backup)
        if socket is not None:
            _config.socket = socket
        if client_name is not None:
            _config.client_name = client_name
        if name_prefix is not None:
            _config.name_prefix = name_prefix
        if reserve_bytes is not None:
            _config.reserve_bytes = int(reserve_bytes)
        if persist is not None:
            _config.persist = bool(persist)


# What region(backup=...) takes: False (discard), True or "host" (a host
# backup registered with the driver), "pageable" (a host backup copied from
# pageable memory, never pinned), "disk" (a file vramd owns in its
# backup_dir). Keys of _State.pools hold the normal form: False, True,
# "pageable" or "disk".
_BACKUP_NAMES = {False: "discard", True: "host", "pageable": "pageable", "disk": "disk"}


def backup_kind(backup):
    """The normal form of a region's backup argument (see _BACKUP_NAMES)."""
    if backup in (False, None, 0, "discard"):
        return False
    if backup in (True, 1, "host", "pinned"):
        return True
    if backup in ("pageable", "mmap"):
        return "pageable"
    if backup == "disk":
        return "disk"
    raise ValueError(f"unknown backup {backup!r}: False, True/'host', 'pageable' or 'disk'")


class _TagPool:
    """One tag's memory on one device: the vramd pool and its MemPool."""

    __slots__ = ("tag", "backup", "device", "pool", "mempool")

    def __init__(self, tag, backup, device, pool, mempool):
        self.tag = tag
        self.backup = backup
        self.device = device
        self.pool = pool
        self.mempool = mempool

    def __repr__(self):
        return f"<vram.torch pool tag={self.tag} backup={self.backup} device={self.device} {self.pool!r}>"


class _State:
    def __init__(self):
        if not torch.cuda.is_available():
            raise VramError(_errno.ENODEV, "vram.torch", "torch sees no CUDA device")
        for name in ("vram_torch_malloc", "vram_torch_push_pool"):
            if not _lib.has(name):
                raise VramError(
                    _errno.ENOSYS,
                    "vram.torch",
                    f"{_lib.path} has no {name}: libvram is too old",
                )
        name = _config.client_name
        if name is None:
            prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
            name = f"{prog} (torch)"
        self.client = _vram.Client(socket=_config.socket, name=name)
        if self.client.backend not in ("cuda", "hip"):
            backend = self.client.backend
            self.client.close()
            raise VramError(
                _errno.ENODEV,
                "vram.torch",
                f"vramd runs the {backend} backend: PyTorch needs device "
                "memory (run vramd --backend cuda)",
            )
        # Third-party pauses (vramctl, an RL controller) are answered on
        # libvram's thread, whatever this program is doing.
        self.client.start_thread()
        alloc = torch.cuda.memory.CUDAPluggableAllocator(
            _lib.path, "vram_torch_malloc", "vram_torch_free"
        )
        self.allocator = _keep_forever(alloc)
        self.pools = {}  # (tag, backup, device) -> _TagPool
        self.prefix = _config.name_prefix or f"torch.{os.getpid()}"

    def tag_pool(self, tag, backup, device):
        """device: this process's CUDA index (torch's)."""
        backup = backup_kind(backup)
        key = (tag, backup, device)
        tp = self.pools.get(key)
        if tp is not None:
            return tp
        policy = _BACKUP_NAMES[backup]
        pool = self.client.create_pool(
            f"{self.prefix}.{tag}.{policy}.{device}",
            tag=tag,
            device=_device_uuid(device),
            policy=_vram.Policy.DISK if backup == "disk" else None,
            backup=bool(backup),
            reserve_bytes=_config.reserve_bytes,
            persist=_config.persist,
            retain_backup=_config.retain_backup or not backup,
            pageable_backup=backup == "pageable",
        )
        mempool = _keep_forever(torch.cuda.MemPool(self.allocator.allocator()))
        tp = _TagPool(tag, backup, device, pool, mempool)
        self.pools[key] = tp
        return tp


def _get_state():
    global _state
    with _lock:
        if _state is None:
            _state = _State()
        return _state


def _uuid_text(raw, hip):
    """16 UUID bytes as vramd names the device (nvidia-smi's GPU-... form,
    common/cuda_driver.h and hip_api.h): ROCm's UUIDs are 16 printable
    characters, CUDA's 16 bytes in 8-4-4-4-12 hex."""
    if hip and all(0x21 <= b <= 0x7E for b in raw):
        return "GPU-" + raw.decode("ascii")
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _device_uuid(index):
    """The UUID of this process's CUDA device index, as vramd lists its
    devices: the one name of a GPU that does not depend on
    CUDA_VISIBLE_DEVICES (libvram then finds the device here by it too)."""
    u = torch.cuda.get_device_properties(index).uuid
    raw = getattr(u, "bytes", None)
    if isinstance(raw, str):
        raw = raw.encode("latin-1")
    if raw is not None and len(raw) == 16:
        return _uuid_text(bytes(raw), bool(getattr(torch.version, "hip", None)))
    text = str(u)
    return text if text.startswith("GPU-") else "GPU-" + text


def _device_index(device):
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"vram.torch: {device} is not a CUDA device")
    return d.index if d.index is not None else torch.cuda.current_device()


def client():
    """The vram.Client vram.torch uses (connected on first use)."""
    return _get_state().client


def allocator():
    """The torch.cuda.memory.CUDAPluggableAllocator over libvram (kept for
    the life of the process)."""
    return _get_state().allocator


def pool_for(tag="default", backup=False, device=None):
    """The vram.Pool behind a tag on a device (made if needed)."""
    with _lock:
        return _get_state().tag_pool(tag, backup, _device_index(device)).pool


def pools():
    """Every (tag, backup, device) this process has, with its vram.Pool."""
    with _lock:
        st = _state
        if st is None:
            return []
        return [(tp.tag, tp.backup, tp.device, tp.pool) for tp in st.pools.values()]


def usage():
    """Bytes mapped per tag (summed over devices and policies)."""
    out = {}
    for tag, _backup, _dev, pool in pools():
        if not pool.closed:
            out[tag] = out.get(tag, 0) + pool.size
    return out


def is_paused(tag):
    """Whether every pool of tag is paused here."""
    ps = [p for t, _b, _d, p in pools() if t == tag]
    return bool(ps) and all(p.state == State.PAUSED for p in ps)


def _push(pool):
    _check(_lib.lib.vram_torch_push_pool(pool._handle()), "vram_torch_push_pool")


def _pop():
    _lib.lib.vram_torch_pop_pool()


def set_default(tag="default", backup=False, device=None):
    """Makes tag's pool the one libvram's allocator uses on threads outside
    any region (None: no default, the initial state). Needed only when the
    pluggable allocator is made torch's process-wide allocator:
    torch.cuda.memory.change_current_allocator(vram.torch.allocator()),
    before any CUDA allocation."""
    if tag is None:
        _check(_lib.lib.vram_torch_set_default_pool(None), "vram_torch_set_default_pool")
        return
    p = pool_for(tag, backup, device)
    _check(
        _lib.lib.vram_torch_set_default_pool(p._handle()),
        "vram_torch_set_default_pool",
    )


def _expandable_segments_on():
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if "expandable_segments:True" in os.environ.get(var, ""):
            return True
    return False


@contextlib.contextmanager
def _no_expandable_segments():
    # Expandable segments do not work with a pluggable allocator's pool
    # (pytorch/pytorch#147851): off inside the region, as vLLM does.
    if not _expandable_segments_on():
        yield
        return
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    try:
        yield
    finally:
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")


def _explain_oom(e):
    why = _lib.text(_lib.lib.vram_torch_last_error()) if _lib.has("vram_torch_last_error") else ""
    if why and hasattr(e, "add_note"):
        e.add_note(f"vramd: {why}")


_OOM = getattr(torch, "OutOfMemoryError", getattr(torch.cuda, "OutOfMemoryError", RuntimeError))


@contextlib.contextmanager
def region(tag="default", backup=False, device=None):
    """Allocations of this thread inside the block come from tag's vramd
    pool on device (default: the current CUDA device). backup=True keeps
    the content across pause/resume in host memory (weights; "pageable":
    without pinning it, "disk": in a file vramd owns); otherwise pause
    discards it (KV cache). Regions nest. Yields the vram.Pool.

    Tensors may be freed and allocated outside the region as usual; the
    memory they hold stays in the pool (torch caches it) and is paused and
    resumed with it. Allocating while the tag is paused fails with torch's
    OutOfMemoryError, with vramd's reason in a note."""
    with _lock:
        tp = _get_state().tag_pool(tag, backup, _device_index(device))
    with _no_expandable_segments():
        with torch.cuda.use_mem_pool(tp.mempool, device=tp.device):
            _push(tp.pool)
            try:
                yield tp.pool
            except _OOM as e:
                _explain_oom(e)
                raise
            finally:
                _pop()


@contextlib.contextmanager
def cuda_graph(
    cuda_graph,
    pool=None,
    stream=None,
    capture_error_mode="global",
    tag="cuda_graph",
    backup=False,
):
    """torch.cuda.graph(cuda_graph, ...) with the graph's memory in tag's
    vramd pool, so that pausing tag releases it too and resume brings it
    back at the same addresses (the graph replays as before).

    The graph's private pool is the tag's MemPool: graphs captured with the
    same tag share memory, as graphs given one pool do. A pool argument
    (torch's graph_pool_handle(), or another graph's pool()) is accepted for
    torch's signature and replaced by the tag's, since the memory must come
    from vramd."""
    with _lock:
        tp = _get_state().tag_pool(tag, backup, torch.cuda.current_device())
    with torch.cuda.graph(
        cuda_graph,
        pool=tp.mempool.id,
        stream=stream,
        capture_error_mode=capture_error_mode,
    ):
        _push(tp.pool)
        try:
            yield
        finally:
            _pop()


def _tags(tags):
    with _lock:
        known = [] if _state is None else list(dict.fromkeys(k[0] for k in _state.pools))
    if tags is None:
        return known
    if isinstance(tags, str):
        tags = [tags]
    return [t for t in dict.fromkeys(tags) if t in known]


def _transition(pause_, tags, timeout_ms):
    c = client() if _state is not None else None
    total = Report()
    if c is None:
        return total
    for tag in _tags(tags):
        fn = c.pause if pause_ else c.resume
        try:
            rep = fn(tag=tag, owner_pid=os.getpid(), timeout_ms=timeout_ms)
        except VramError as e:
            if e.errno == _errno.EALREADY:
                continue  # already in that state: nothing to do
            raise
        total = total.merge(rep)
    return total


def pause(tags=None, timeout_ms=0):
    """Pauses this process's pools of tags (a tag, a list, or None: every
    tag): their device memory goes back to the device; backup tags keep
    their content in host memory. Tags already paused are left alone.
    Returns a Report (bytes released, device free memory before/after).
    Work queued on the device is waited for first."""
    return _transition(True, tags, timeout_ms)


def resume(tags=None, timeout_ms=0):
    """Resumes tags (None: every tag) at the same addresses, restoring
    backups. Raises VramError (ENOMEM) when the device lacks the memory:
    the pools stay paused, with their backups; call again later."""
    return _transition(False, tags, timeout_ms)
