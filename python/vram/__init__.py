# SPDX-License-Identifier: Apache-2.0
"""vram: Python bindings of libvram, the client library of vramd.

vramd is a per-node GPU memory broker: it owns the physical memory of its
clients' pools and pauses and resumes them by tag (the memory really goes
back to the device; the virtual addresses stay). This package talks to it
through libvram with ctypes; no compiled extension.

    import vram

    with vram.connect(name="engine") as c:
        kv = c.create_pool("engine.kv", tag="kv_cache")
        ptr = kv.alloc(64 << 20)          # a device pointer (an int)
        c.pause(tag="kv_cache")           # memory back to the device
        c.resume(tag="kv_cache")          # same addresses again

PyTorch: ``vram.torch`` (regions, pause/resume by tag, CUDA graphs).
Drop-in replacements: ``vram.compat.torch_memory_saver``, ``vram.compat.vllm``.
See docs/python.md.

Errors are ``VramError`` (an OSError): ``errno`` is the errno libvram
returned and ``message`` libvram's own words (vram_last_error()).
"""

import ctypes
import enum
import errno as _errno
import os
import threading
import weakref
from ctypes import POINTER, byref, c_int, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass, field
from typing import List, Optional

from . import _lib
from ._lib import LibraryNotFound

__all__ = [
    "VramError",
    "LibraryNotFound",
    "State",
    "Policy",
    "Report",
    "DeviceFree",
    "GangFailure",
    "PoolInfo",
    "MapperInfo",
    "DeviceInfo",
    "Stats",
    "ProcessUsage",
    "Quota",
    "Client",
    "Pool",
    "connect",
    "default_client",
    "pause",
    "resume",
    "gang_pause",
    "gang_resume",
    "list_pools",
    "stats",
    "status",
    "audit",
    "quotas",
    "version",
    "library_path",
    "set_log_handler",
]

__version__ = "0.2.0"


class VramError(OSError):
    """A libvram call failed. ``errno`` is the errno (positive), ``message``
    libvram's message (vram_last_error()), ``what`` the call; ``report`` is
    set for a pause or resume that failed (what it did anyway)."""

    def __init__(self, err, what, message=""):
        err = abs(err) or _errno.EIO
        self.what = what
        self.message = message or os.strerror(err)
        self.report = None
        super().__init__(err, f"{what}: {self.message}")


def _check(r, what):
    """Raises VramError for a negative return; returns r otherwise."""
    if r < 0:
        raise VramError(-r, what, _lib.last_error())
    return r


class State(enum.IntEnum):
    ACTIVE = _lib.STATE_ACTIVE
    PAUSING = _lib.STATE_PAUSING
    PAUSED = _lib.STATE_PAUSED
    RESUMING = _lib.STATE_RESUMING

    def __str__(self):
        return self.name.lower()


class Policy(enum.IntEnum):
    DISCARD = _lib.POLICY_DISCARD  # content dropped on pause (KV cache)
    HOST = _lib.POLICY_HOST  # content kept in host memory (weights)
    DISK = _lib.POLICY_DISK  # content kept in a file vramd owns (backup_dir)

    def __str__(self):
        return self.name.lower()


@dataclass
class DeviceFree:
    """One device's free memory around a pause or resume."""

    index: int
    uuid: str
    free_before: int
    free_after: int


@dataclass
class GangFailure:
    """The rank whose failure undid a gang call: its pool, the owner's
    pid, instance and device, and the error (positive errno)."""

    err: int
    pid: int
    instance: str
    device: int
    pool: str


@dataclass
class Report:
    """What a pause or resume did: pools that changed state, bytes released
    (pause) or brought back (resume), the device's free memory before and
    after (all devices, as measured by the daemon), pools that failed; and
    per device, and for a gang call what it brought back and which rank
    undid it (None if none)."""

    pools: int = 0
    bytes: int = 0
    free_before: int = 0
    free_after: int = 0
    failed: int = 0
    devices: List[DeviceFree] = field(default_factory=list)
    rolled_back: int = 0
    failure: Optional[GangFailure] = None

    @classmethod
    def _from_c(cls, r):
        devices = [
            DeviceFree(d.index, _lib.text(d.uuid), d.free_before, d.free_after)
            for d in (r.devices[i] for i in range(min(r.n_devices, _lib.MAX_DEVICES)))
        ]
        failure = None
        if r.failed_err:
            failure = GangFailure(
                r.failed_err,
                r.failed_pid,
                _lib.text(r.failed_instance),
                r.failed_device,
                _lib.text(r.failed_pool),
            )
        return cls(
            r.pools,
            r.bytes,
            r.free_before,
            r.free_after,
            r.failed,
            devices,
            r.rolled_back,
            failure,
        )

    def merge(self, other):
        """This report followed by other: counts add up, free memory spans
        from this one's before to other's after."""
        if other is None:
            return self
        if self.pools == 0 and self.bytes == 0 and self.free_before == 0:
            before = other.free_before
        else:
            before = self.free_before
        return Report(
            self.pools + other.pools,
            self.bytes + other.bytes,
            before,
            other.free_after or self.free_after,
            self.failed + other.failed,
        )


@dataclass
class MapperInfo:
    pid: int
    uid: int
    name: str
    readonly: bool


@dataclass
class PoolInfo:
    """One pool as vramctl ls shows it."""

    id: int
    name: str
    tag: str
    device: int
    state: State
    policy: Policy
    bytes: int
    reserve_bytes: int
    backup_bytes: int
    chunks: int
    owner_pid: int
    owner_uid: int
    owner_name: str
    flags: int
    mappers: List[MapperInfo] = field(default_factory=list)
    owner_instance: str = ""  # the owner's VRAM_INSTANCE, "" if none
    owner_cgroup: str = ""  # its cgroup as vramd reads it, "" if unknown
    owner_job: str = ""  # the owner's VRAM_JOB, "" if none
    device_uuid: str = ""  # the pool's device, as the daemon names it

    @property
    def persistent(self):
        return bool(self.flags & _lib.POOL_PERSIST)


@dataclass
class DeviceInfo:
    index: int
    uuid: str
    total_bytes: int
    free_bytes: int
    granularity: int


@dataclass
class Stats:
    backend: str
    daemon_version: str
    sessions: int
    pools: int
    used_bytes: int
    backup_bytes: int
    open_fds: int
    uptime_ms: int
    devices: List[DeviceInfo]
    disk_backup_bytes: int = 0


@dataclass
class Quota:
    """A uid's or group's quota and what its pools hold (vram_quotas,
    vramctl status). A limit of None is no limit."""

    kind: str  # "uid" or "group"
    id: int
    from_default: bool  # a uid without its own rule: the default's limits
    exempt: bool  # root: not held to quotas
    pools_limit: Optional[int]
    device_limit: Optional[int]  # bytes on each device
    host_limit: Optional[int]  # host backup bytes
    pools: int
    host_bytes: int
    device_bytes: List[int]  # by device index


@dataclass
class ProcessUsage:
    """A process using a device (vram_audit): device memory it uses as the
    driver reports it, next to what it holds through vramd."""

    pid: int
    device: int
    used_bytes: Optional[int]  # None: the driver did not report it
    vramd_bytes: int
    is_vramd: bool
    name: str

    @property
    def outside_bytes(self):
        """Device memory this process uses outside vramd (and its context),
        or None when unknown."""
        if self.used_bytes is None:
            return None
        return max(0, self.used_bytes - self.vramd_bytes)


def _selector(name=None, tag=None, owner_pid=0, all=False, job=None, owner_pids=None):
    sel = _lib.Selector()
    sel.name = _lib.encode(name)
    sel.tag = _lib.encode(tag)
    sel.owner_pid = owner_pid or 0
    sel.all = 1 if all else 0
    sel.job = _lib.encode(job)
    if owner_pids:
        pids = (ctypes.c_uint32 * len(owner_pids))(*owner_pids)
        sel._pids = pids  # kept alive with the selector
        sel.owner_pids = ctypes.cast(pids, ctypes.POINTER(ctypes.c_uint32))
        sel.n_owner_pids = len(owner_pids)
    return sel


def _pool_info(pi):
    mappers = [
        MapperInfo(m.pid, m.uid, _lib.text(m.name), bool(m.readonly))
        for m in (pi.mappers[i] for i in range(pi.n_mappers))
    ]
    return PoolInfo(
        id=pi.id,
        name=_lib.text(pi.name),
        tag=_lib.text(pi.tag),
        device=pi.device,
        state=State(pi.state),
        policy=Policy(pi.policy),
        bytes=pi.bytes,
        reserve_bytes=pi.reserve_bytes,
        backup_bytes=pi.backup_bytes,
        chunks=pi.chunks,
        owner_pid=pi.owner_pid,
        owner_uid=pi.owner_uid,
        owner_name=_lib.text(pi.owner_name),
        flags=pi.flags,
        mappers=mappers,
        owner_instance=_lib.text(pi.owner_instance),
        owner_cgroup=_lib.text(pi.owner_cgroup),
        owner_job=_lib.text(pi.owner_job),
        device_uuid=_lib.text(pi.device_uuid),
    )


class _Handle:
    """What a Client and a Pool share: a libvram handle in self._h, closed
    by close(), by a with block, or when the object is collected (never
    while the interpreter exits: libvram's exit handler closes then)."""

    _h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h is not None and not _lib.exiting():
                self.close()
        except Exception:
            pass


class Client(_Handle):
    """One connection to vramd (vram_connect).

    socket: the daemon's socket (None: $VRAM_SOCKET, else
    /run/vramd/vramd.sock). name: what vramctl shows (None: the program's
    name). Close it with close() or use it as a context manager; closing
    closes every pool opened through it, and the daemon drops the pools it
    owns (unless persistent). A Client that is garbage-collected is closed;
    one still open when the interpreter exits is closed by libvram after
    the interpreter has finished.

    Events: a third party (vramctl, an RL controller) may pause a pool this
    process maps; libvram must answer. Call start_thread() once, or poll
    fileno() and call dispatch().

    Restarts: with reconnect=True the client reconnects by itself when
    vramd comes back from a restart (its pools kept in systemd's fd
    store) and opens its pools again without remapping them; calls made
    meanwhile raise VramError with errno ENOTCONN, or with wait=True wait
    for the daemon (60 s at most). See docs/operations.md.

    Admins: with admin=True the client connects through the daemon's admin
    lane (its admin socket, served ahead of ordinary sessions: for
    monitoring under load), or the ordinary socket where the admin socket
    is missing or not this user's (docs/security.md).
    """

    def __init__(self, socket=None, name=None, reconnect=False, wait=False, admin=False):
        h = c_void_p()
        flags = ((_lib.CONNECT_RECONNECT if reconnect else 0)
                 | (_lib.CONNECT_WAIT if wait else 0)
                 | (_lib.CONNECT_ADMIN if admin else 0))
        r = _lib.lib.vram_connect(_lib.encode(socket), _lib.encode(name), flags, byref(h))
        _check(r, "vram_connect")
        self._h = h.value
        self._lock = threading.Lock()
        self._pools = weakref.WeakSet()
        self._close = _lib.lib.vram_client_close  # kept for __del__
        self.backend = _lib.text(_lib.lib.vram_client_backend(self._h))

    # -- lifetime --

    @property
    def closed(self):
        return self._h is None

    def _handle(self):
        h = self._h
        if h is None:
            raise VramError(_errno.EBADF, "vram client", "the client is closed")
        return h

    def close(self):
        """Closes every pool of this client, then the connection. A no-op
        the second time."""
        with self._lock:
            h, self._h = self._h, None
            pools = list(self._pools)
        if h is None:
            return
        for p in pools:
            p._forget()
        self._close(h)

    def __repr__(self):
        state = "closed" if self.closed else f"backend={self.backend}"
        return f"<vram.Client {state}>"

    # -- connection --

    def ping(self):
        """A round trip to the daemon."""
        _check(_lib.lib.vram_ping(self._handle()), "vram_ping")

    def fileno(self):
        """The connection's fd, to poll for POLLIN and then dispatch()."""
        return _check(_lib.lib.vram_client_fd(self._handle()), "vram_client_fd")

    def dispatch(self, timeout_ms=0):
        """Handles the daemon's events (pause/resume of pools this process
        maps), waiting up to timeout_ms for the first (-1: forever).
        Returns how many were handled."""
        return _check(
            _lib.lib.vram_client_dispatch(self._handle(), int(timeout_ms)),
            "vram_client_dispatch",
        )

    def start_thread(self):
        """Starts libvram's event thread (once; later calls do nothing).
        Returns True if this call started it."""
        r = _lib.lib.vram_client_start_thread(self._handle())
        if r == -_errno.EALREADY:
            return False
        _check(r, "vram_client_start_thread")
        return True

    # -- pools --

    def create_pool(
        self,
        name,
        tag=None,
        device=0,
        backup=False,
        reserve_bytes=0,
        persist=False,
        policy=None,
        retain_backup=True,
        pageable_backup=False,
    ):
        """Creates a pool this client owns. backup=True (or policy
        Policy.HOST) keeps its content in host memory across a pause,
        Policy.DISK in a file vramd owns; otherwise a pause discards it.
        retain_backup: the backup keeps its pages after a resume (the
        default: the next pause writes at the copy limit); False gives them
        back to the OS once the pool is restored. pageable_backup: a host backup is not
        pinned with the driver. reserve_bytes: the virtual range
        (0: the device's size). persist: the pool outlives this client.
        device: the daemon's index, or a UUID string ("GPU-...", as
        `vramctl status` and `nvidia-smi -L` print it)."""
        if policy is None:
            policy = Policy.HOST if backup else Policy.DISCARD
        o = _lib.PoolOptions()
        o.name = _lib.encode(name)
        o.tag = _lib.encode(tag)
        if isinstance(device, str):
            uuid = device
            match = [d.index for d in self.stats().devices if d.uuid == uuid]
            if not match:
                raise VramError(_errno.ENODEV, f"vram_pool_create {name}",
                                f"vramd has no device {uuid}")
            device = match[0]
            o.device_uuid = _lib.encode(uuid)
        o.device = int(device)
        o.policy = int(policy)
        o.reserve_bytes = int(reserve_bytes)
        o.flags = (
            (_lib.POOL_PERSIST if persist else 0)
            | (0 if retain_backup else _lib.POOL_RELEASE_BACKUP)
            | (_lib.POOL_PAGEABLE_BACKUP if pageable_backup else 0)
        )
        h = c_void_p()
        _check(
            _lib.lib.vram_pool_create(self._handle(), byref(o), byref(h)),
            f"vram_pool_create {name}",
        )
        return self._adopt(h.value, tag or "default", int(device), Policy(policy), True)

    def open_pool(self, name, readonly=False):
        """Maps an existing pool (another process's, or an orphaned
        persistent one, which this client then owns)."""
        # What the pool is, and whether opening makes us its owner: an
        # orphaned persistent pool, opened read-write (libvram's rule).
        try:
            found = self.list_pools(name=name)
        except VramError:
            found = []
        info = found[0] if found else None
        owner = bool(info and info.persistent and info.owner_pid == 0 and not readonly)
        h = c_void_p()
        flags = _lib.OPEN_READONLY if readonly else 0
        _check(
            _lib.lib.vram_pool_open(self._handle(), _lib.encode(name), flags, byref(h)),
            f"vram_pool_open {name}",
        )
        return self._adopt(
            h.value,
            info.tag if info else None,
            info.device if info else None,
            info.policy if info else None,
            owner,
        )

    def _adopt(self, h, tag, device, policy, owner):
        p = Pool(self, h, tag, device, policy, owner)
        with self._lock:
            self._pools.add(p)
        return p

    def drop_pool(self, name):
        """Drops a pool by name for every process that maps it."""
        _check(
            _lib.lib.vram_pool_drop(self._handle(), _lib.encode(name)),
            f"vram_pool_drop {name}",
        )

    # -- pause and resume --

    def _transition(
        self, fn, what, name, tag, owner_pid, all, timeout_ms, job=None, owner_pids=None
    ):
        sel = _selector(name, tag, owner_pid, all, job, owner_pids)
        rep = _lib.Report()
        r = fn(self._handle(), byref(sel), int(timeout_ms), byref(rep))
        report = Report._from_c(rep)
        if r < 0:
            e = VramError(-r, what, _lib.last_error())
            e.report = report
            raise e
        return report

    def pause(self, name=None, tag=None, owner_pid=0, all=False, timeout_ms=0):
        """Pauses every pool matching all the given fields (all=True: every
        pool, with the fields given). Returns a Report. Raises VramError:
        ENOENT no pool matched, EALREADY all were paused, ETIMEDOUT a
        mapper did not answer (pools stay pausing: call again to wait)."""
        return self._transition(
            _lib.lib.vram_pause, "vram_pause", name, tag, owner_pid, all, timeout_ms
        )

    def resume(self, name=None, tag=None, owner_pid=0, all=False, timeout_ms=0):
        """Resumes every matching pool at the same addresses, restoring
        backups. ENOMEM: the device lacks the memory; the pools stay paused
        with their backups and the call can be retried."""
        return self._transition(
            _lib.lib.vram_resume, "vram_resume", name, tag, owner_pid, all, timeout_ms
        )

    def gang_pause(self, tag=None, job=None, owner_pids=None, name=None, timeout_ms=0):
        """Pauses the selected pools (a tag across the ranks of a job, by
        job name (VRAM_JOB), a list of owner pids, or both) all or nothing:
        if one rank fails, misses the deadline or dies before the end, the
        pools paused are resumed and VramError is raised with e.report.failure
        naming the rank. Returns a Report."""
        return self._transition(
            _lib.lib.vram_gang_pause,
            "vram_gang_pause",
            name,
            tag,
            0,
            False,
            timeout_ms,
            job,
            owner_pids,
        )

    def gang_resume(self, tag=None, job=None, owner_pids=None, name=None, timeout_ms=0):
        """gang_pause's counterpart: on a failure, pauses again what it
        had resumed."""
        return self._transition(
            _lib.lib.vram_gang_resume,
            "vram_gang_resume",
            name,
            tag,
            0,
            False,
            timeout_ms,
            job,
            owner_pids,
        )

    # -- inspection --

    def list_pools(self, name=None, tag=None, owner_pid=0):
        """Pools on the node (those matching the given fields)."""
        out = POINTER(_lib.PoolInfo)()
        n = c_size_t()
        if name is None and tag is None and not owner_pid:
            sel = None
        else:
            sel = byref(_selector(name, tag, owner_pid, True))
        _check(
            _lib.lib.vram_list(
                self._handle(),
                sel,
                ctypes.sizeof(_lib.PoolInfo),
                byref(out),
                byref(n),
            ),
            "vram_list",
        )
        try:
            return [_pool_info(out[i]) for i in range(n.value)]
        finally:
            _lib.lib.vram_pool_info_free(out, n.value)

    def stats(self):
        """The daemon's figures and each device's memory."""
        st = _lib.Stats()
        _check(_lib.lib.vram_stats(self._handle(), byref(st)), "vram_stats")
        devs = [
            DeviceInfo(
                d.index,
                _lib.text(d.uuid),
                d.total_bytes,
                d.free_bytes,
                d.granularity,
            )
            for d in st.devices[: min(st.n_devices, _lib.MAX_DEVICES)]
        ]
        return Stats(
            _lib.text(st.backend),
            _lib.text(st.daemon_version),
            st.sessions,
            st.pools,
            st.used_bytes,
            st.backup_bytes,
            st.open_fds,
            st.uptime_ms,
            devs,
            st.disk_backup_bytes,
        )

    def quotas(self):
        """The quotas that apply to this client's uid (and its group when a
        rule names it), with what its pools hold; for root and the admin
        group, every uid and group with a rule or pools. A list of Quota,
        the caller's own uid first."""
        if not _lib.has("vram_quotas"):
            raise VramError(_errno.ENOSYS, "vram_quotas", "this libvram has no quotas")
        out = POINTER(_lib.Quota)()
        n = c_size_t()
        _check(
            _lib.lib.vram_quotas(
                self._handle(), ctypes.sizeof(_lib.Quota), byref(out), byref(n)
            ),
            "vram_quotas",
        )

        def limit(v):
            return None if v == _lib.QUOTA_NONE else v

        try:
            return [
                Quota(
                    "group" if q.group else "uid",
                    q.id,
                    bool(q.from_default),
                    bool(q.exempt),
                    limit(q.pools_limit),
                    limit(q.device_limit),
                    limit(q.host_limit),
                    q.pools,
                    q.host_bytes,
                    list(q.device_bytes[: min(q.n_devices, _lib.MAX_DEVICES)]),
                )
                for q in (out[i] for i in range(n.value))
            ]
        finally:
            _libc_free(out)

    def status(self):
        """stats() and list_pools() together, as plain dicts (for logs and
        JSON): "pools" is the list of pools, "n_pools" the daemon's count,
        "quotas" the quotas() that apply (where libvram has them)."""
        from dataclasses import asdict

        st = asdict(self.stats())
        st["library_version"] = version()
        st["n_pools"] = st["pools"]
        st["pools"] = [
            dict(asdict(p), state=str(p.state), policy=str(p.policy))
            for p in self.list_pools()
        ]
        if _lib.has("vram_quotas"):
            st["quotas"] = [asdict(q) for q in self.quotas()]
        return st

    def audit(self):
        """Every process using a device, with the memory it uses outside
        vramd (vramctl audit). Returns (list of ProcessUsage, whether the
        driver listed processes: False on the host backend)."""
        if not _lib.has("vram_audit"):
            raise VramError(_errno.ENOSYS, "vram_audit", "this libvram has no audit")
        out = POINTER(_lib.ProcessUsage)()
        n = c_size_t()
        info = c_int()
        _check(
            _lib.lib.vram_audit(
                self._handle(),
                ctypes.sizeof(_lib.ProcessUsage),
                byref(out),
                byref(n),
                byref(info),
            ),
            "vram_audit",
        )
        try:
            rows = [
                ProcessUsage(
                    u.pid,
                    u.device,
                    u.used_bytes if u.used_known else None,
                    u.vramd_bytes,
                    bool(u.is_vramd),
                    _lib.text(u.name),
                )
                for u in (out[i] for i in range(n.value))
            ]
        finally:
            _libc_free(out)
        return rows, bool(info.value)


def _libc_free(ptr):
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [c_void_p]
    libc.free.restype = None
    libc.free(ctypes.cast(ptr, c_void_p))


class Pool(_Handle):
    """A pool mapped in this process (from Client.create_pool or
    open_pool). Its base address stays the same across pauses and resumes.
    Pointers from alloc() are ints: device pointers on a GPU backend, host
    addresses on the host backend. Keep the Pool (or its Client) alive as
    long as they are used: a Pool that is garbage-collected is closed, and
    its memory unmapped."""

    def __init__(self, client, h, tag, device, policy, owner):
        self.client = client
        self._h = h
        self._close = _lib.lib.vram_pool_close  # kept for __del__
        self.name = _lib.text(_lib.lib.vram_pool_name(h))
        self.tag = tag
        self.device = device
        self.policy = policy
        self.owner = owner

    # -- lifetime --

    @property
    def closed(self):
        return self._h is None

    def _handle(self):
        h = self._h
        if h is None:
            raise VramError(_errno.EBADF, f"pool {self.name}", "the pool is closed")
        return h

    def _forget(self):
        """The client closed it (with every pool of the client)."""
        self._h = None

    def close(self):
        """Unmaps the pool; the daemon drops it if this client owns it
        (unless persistent). A no-op the second time."""
        h, self._h = self._h, None
        if h is not None:
            self._close(h)

    def __repr__(self):
        if self.closed:
            return f"<vram.Pool {self.name} closed>"
        return (
            f"<vram.Pool {self.name} tag={self.tag} {self.state} "
            f"size={self.size} base=0x{self.base:x}>"
        )

    # -- accessors --

    @property
    def base(self):
        """The start of the pool's virtual range."""
        return _lib.lib.vram_pool_base(self._handle())

    @property
    def size(self):
        """Bytes in the pool's layout (kept while paused)."""
        return _lib.lib.vram_pool_size(self._handle())

    def backup(self):
        """(address, length) of the pool's backup as this process maps it
        (host and disk policies): the same address for the life of the
        handle. Its bytes are the pool's as the last pause saved them while
        the pool is paused, and after a resume only for a pool made with
        retain_backup until backup_release(). VramError ENODEV: no backup
        here."""
        host, n = c_void_p(), c_uint64()
        _check(
            _lib.lib.vram_pool_backup(self._handle(), byref(host), byref(n)),
            f"vram_pool_backup {self.name}",
        )
        return host.value or 0, n.value

    def backup_release(self):
        """Gives the backup's pages back (keeping its address): this
        process lets go of them at once (its RSS falls), and a libvram
        thread unpins and frees them, which the next use of the backup
        (backup(), a pause, a resume) waits for. On a paused pool this
        drops the saved content."""
        _check(_lib.lib.vram_pool_backup_release(self._handle()), f"vram_pool_backup_release {self.name}")

    @property
    def state(self):
        """The state as this process last saw it. Raises VramError (EINVAL)
        when libvram no longer knows the handle (its client was closed)."""
        s = _lib.lib.vram_pool_state(self._handle())
        if s == _lib.STATE_INVALID:
            raise VramError(
                _errno.EINVAL, f"vram_pool_state {self.name}", _lib.last_error()
            )
        return State(s)

    def info(self):
        """The daemon's view of this pool (PoolInfo)."""
        found = self.client.list_pools(name=self.name)
        if not found:
            raise VramError(_errno.ENOENT, f"pool {self.name}", "no such pool")
        return found[0]

    # -- memory --

    def reserve(self, nbytes):
        """Grows the pool so that at least nbytes are mapped."""
        _check(
            _lib.lib.vram_pool_reserve(self._handle(), int(nbytes)),
            f"vram_pool_reserve {self.name}",
        )

    def alloc(self, size):
        """Sub-allocates size bytes (256-byte aligned); returns the address.
        EBUSY while paused, ENOMEM when the device or range is full."""
        ptr = c_void_p()
        _check(
            _lib.lib.vram_alloc(self._handle(), int(size), byref(ptr)),
            f"vram_alloc {self.name}",
        )
        return ptr.value

    def free(self, ptr):
        """Frees an address from alloc()."""
        _check(
            _lib.lib.vram_free(self._handle(), ptr),
            f"vram_free {self.name}",
        )

    def view(self, ptr, size):
        """A writable memoryview of size bytes at ptr. Host backend only
        (tests, demos): on a GPU the pool's memory is device memory."""
        if self.client.backend != "host":
            raise VramError(
                _errno.ENOTSUP,
                f"pool {self.name}",
                f"views need the host backend, not {self.client.backend}",
            )
        return memoryview((ctypes.c_char * int(size)).from_address(ptr)).cast("B")

    # -- pause and resume --

    def pause(self):
        """Pauses this pool (vram_pool_pause): returns a Report."""
        rep = _lib.Report()
        r = _lib.lib.vram_pool_pause(self._handle(), byref(rep))
        if r < 0:
            e = VramError(-r, f"vram_pool_pause {self.name}", _lib.last_error())
            e.report = Report._from_c(rep)
            raise e
        return Report._from_c(rep)

    def resume(self):
        """Resumes this pool (vram_pool_resume): returns a Report."""
        rep = _lib.Report()
        r = _lib.lib.vram_pool_resume(self._handle(), byref(rep))
        if r < 0:
            e = VramError(-r, f"vram_pool_resume {self.name}", _lib.last_error())
            e.report = Report._from_c(rep)
            raise e
        return Report._from_c(rep)


# ---- the process's default client ---------------------------------------------

_default = None
_default_lock = threading.Lock()


def connect(socket=None, name=None, admin=False):
    """A new Client (see Client)."""
    return Client(socket=socket, name=name, admin=admin)


def default_client():
    """The process's shared client, connected on first use (to
    $VRAM_SOCKET or the default socket) with its event thread started.
    vram.torch and the module-level calls below use it."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            c = Client()
            c.start_thread()
            _default = c
        return _default


def _forget_default_in_child():
    # A forked child cannot use its parent's session (libvram refuses it);
    # it connects again on first use.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_default_in_child)


def pause(name=None, tag=None, owner_pid=0, all=False, timeout_ms=0):
    """Client.pause() on the default client."""
    return default_client().pause(name, tag, owner_pid, all, timeout_ms)


def resume(name=None, tag=None, owner_pid=0, all=False, timeout_ms=0):
    """Client.resume() on the default client."""
    return default_client().resume(name, tag, owner_pid, all, timeout_ms)


def gang_pause(tag=None, job=None, owner_pids=None, name=None, timeout_ms=0):
    """Client.gang_pause() on the default client."""
    return default_client().gang_pause(tag, job, owner_pids, name, timeout_ms)


def gang_resume(tag=None, job=None, owner_pids=None, name=None, timeout_ms=0):
    """Client.gang_resume() on the default client."""
    return default_client().gang_resume(tag, job, owner_pids, name, timeout_ms)


def list_pools(name=None, tag=None, owner_pid=0):
    return default_client().list_pools(name, tag, owner_pid)


def stats():
    return default_client().stats()


def status():
    return default_client().status()


def audit():
    return default_client().audit()


def quotas():
    return default_client().quotas()


def version():
    """libvram's version (the library's, which may differ from this
    package's)."""
    return _lib.text(_lib.lib.vram_version())


def library_path():
    """The libvram that was loaded (a path, or a name for the loader)."""
    return _lib.path


def set_log_handler(fn, level="info"):
    """Routes libvram's log to fn(level_name, message); None stops it.
    level: "error", "warn", "info" or "debug". fn runs on whatever thread
    logs (libvram's event thread too) and must not call vram. For
    debugging; it is removed when the interpreter exits.

    Not with vram.torch in production: libvram's event thread then needs
    the GIL to log, and a PyTorch allocation that holds the GIL while it
    waits for that thread (a pool growing) would wait forever."""
    names = {"error": 0, "warn": 1, "info": 2, "debug": 3}
    lvl = names[level] if isinstance(level, str) else int(level)
    if fn is None:
        _lib.set_log_handler(None, lvl)
        return
    inv = {v: k for k, v in names.items()}
    _lib.set_log_handler(lambda lv, msg: fn(inv.get(lv, str(lv)), msg), lvl)
