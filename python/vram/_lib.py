# SPDX-License-Identifier: Apache-2.0
"""ctypes bindings of libvram, the vramd client library.

This module mirrors libvram/include/vram.h: the structures, the functions'
signatures, and how the library is found. tests/python/test_abi.py holds
the structures against the header (sizeof and offsetof, printed by a C
program built from vram.h). Nothing here raises on a failed
call; vram/__init__.py turns negative errno returns into exceptions.

The library is looked up, first found wins:

1. ``$VRAM_LIBRARY``: a path (or a name for the system loader);
2. ``$VRAM_BUILD/libvram.so.0`` (the Makefile sets VRAM_BUILD for tests);
3. ``build/libvram.so.0`` of the source tree this package sits in
   (python/vram -> the repository root), for a package imported from
   the source tree;
4. ``libvram.so.0`` through the system loader (``make install``).

Exit: libvram closes whatever is left at exit by itself, from an atexit
handler and a destructor that run after the interpreter has finished. The
Python side must therefore never call into libvram while the interpreter
tears itself down: ``exiting()`` turns true from an atexit handler registered
when this module is imported, and every finalizer checks it.
"""

import atexit
import ctypes
import os
import sys
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int32,
    c_size_t,
    c_ssize_t,
    c_uint,
    c_uint32,
    c_uint64,
    c_void_p,
)

# ---- constants (vram.h) ----------------------------------------------------

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
POLICY_DISCARD, POLICY_HOST, POLICY_DISK = 0, 1, 2
STATE_ACTIVE, STATE_PAUSING, STATE_PAUSED, STATE_RESUMING = 0, 1, 2, 3
STATE_INVALID = -1  # vram_pool_state() on a closed or unknown handle
POOL_PERSIST = 0x1
CONNECT_RECONNECT = 0x1  # vram.h's VRAM_CONNECT_RECONNECT
CONNECT_WAIT = 0x2  # VRAM_CONNECT_WAIT
CONNECT_ADMIN = 0x4  # VRAM_CONNECT_ADMIN
POOL_RETAIN_BACKUP = 0x2
POOL_RELEASE_BACKUP = 0x8
POOL_PAGEABLE_BACKUP = 0x4
OPEN_READONLY = 0x1
MAX_DEVICES = 16
# The first libvram whose structs start with their size (the layouts below).
MIN_VERSION_NUMBER = 200

# ---- structures ------------------------------------------------------------


class Sized(Structure):
    """A struct of vram.h that starts with uint32_t size: a new one has its
    size set, as the header's VRAM_*_INIT macros do."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.size = ctypes.sizeof(self)


class PoolOptions(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("name", c_char_p),
        ("tag", c_char_p),
        ("device", c_uint),
        ("policy", c_int),
        ("reserve_bytes", c_uint64),
        ("flags", c_uint),
        ("device_uuid", c_char_p),
    ]


class Selector(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("name", c_char_p),
        ("tag", c_char_p),
        ("owner_pid", c_uint32),
        ("all", c_int),
        ("owner", c_char_p),
        ("job", c_char_p),
        ("owner_pids", POINTER(c_uint32)),
        ("n_owner_pids", c_uint32),
    ]


class DeviceFree(Structure):
    _fields_ = [
        ("index", c_uint),
        ("uuid", c_char * 64),
        ("free_before", c_uint64),
        ("free_after", c_uint64),
    ]


class Report(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("pools", c_uint32),
        ("bytes", c_uint64),
        ("free_before", c_uint64),
        ("free_after", c_uint64),
        ("failed", c_uint32),
        ("n_devices", c_uint32),
        ("devices", DeviceFree * MAX_DEVICES),
        ("rolled_back", c_uint32),
        ("failed_err", c_int32),
        ("failed_pid", c_uint32),
        ("failed_device", c_uint),
        ("failed_instance", c_char * 64),
        ("failed_pool", c_char * 128),
        ("outside_procs", c_uint32),
        ("outside_flags", c_uint),
        ("outside_bytes", c_uint64),
        ("outside_count", c_uint64),
    ]


class MapperInfo(Structure):
    _fields_ = [
        ("pid", c_uint32),
        ("uid", c_uint32),
        ("name", c_char * 64),
        ("readonly", c_int),
    ]


class PoolInfo(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("id", c_uint64),
        ("name", c_char * 128),
        ("tag", c_char * 64),
        ("device", c_uint),
        ("state", c_int),
        ("policy", c_int),
        ("bytes", c_uint64),
        ("reserve_bytes", c_uint64),
        ("backup_bytes", c_uint64),
        ("chunks", c_uint32),
        ("owner_pid", c_uint32),
        ("owner_uid", c_uint32),
        ("owner_name", c_char * 64),
        ("flags", c_uint),
        ("n_mappers", c_uint32),
        ("mappers", POINTER(MapperInfo)),
        ("owner_instance", c_char * 64),
        ("owner_cgroup", c_char * 256),
        ("owner_job", c_char * 64),
        ("device_uuid", c_char * 64),
    ]


class DeviceInfo(Structure):
    _fields_ = [
        ("index", c_uint),
        ("uuid", c_char * 64),
        ("total_bytes", c_uint64),
        ("free_bytes", c_uint64),
        ("granularity", c_uint64),
    ]


class Stats(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("backend", c_char * 16),
        ("daemon_version", c_char * 32),
        ("sessions", c_uint32),
        ("pools", c_uint32),
        ("used_bytes", c_uint64),
        ("backup_bytes", c_uint64),
        ("open_fds", c_uint32),
        ("uptime_ms", c_uint64),
        ("n_devices", c_uint),
        ("devices", DeviceInfo * MAX_DEVICES),
        ("disk_backup_bytes", c_uint64),
    ]


class ProcessUsage(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("pid", c_uint32),
        ("device", c_uint),
        ("used_known", c_int),
        ("used_bytes", c_uint64),
        ("vramd_bytes", c_uint64),
        ("is_vramd", c_int),
        ("name", c_char * 64),
        ("outside_reported", c_int),
        ("outside_flags", c_uint),
        ("outside_bytes", c_uint64),
        ("outside_count", c_uint64),
    ]


class Quota(Sized):
    _fields_ = [
        ("size", c_uint32),
        ("group", c_int),
        ("id", c_uint32),
        ("from_default", c_int),
        ("exempt", c_int),
        ("pools_limit", c_uint64),
        ("device_limit", c_uint64),
        ("host_limit", c_uint64),
        ("pools", c_uint64),
        ("host_bytes", c_uint64),
        ("n_devices", c_uint),
        ("device_bytes", c_uint64 * MAX_DEVICES),
    ]


# VRAM_QUOTA_NONE: a limit that is not set.
QUOTA_NONE = (1 << 64) - 1

LogFn = CFUNCTYPE(None, c_int, c_char_p, c_void_p)

# name: (restype, argtypes). Handles are c_void_p (Python ints or None).
_PROTOTYPES = {
    "vram_version": (c_char_p, []),
    "vram_version_number": (c_int, []),
    "vram_set_log_handler": (None, [LogFn, c_int, c_void_p]),
    "vram_last_error": (c_char_p, []),
    "vram_connect": (c_int, [c_char_p, c_char_p, c_uint, POINTER(c_void_p)]),
    "vram_client_close": (None, [c_void_p]),
    "vram_ping": (c_int, [c_void_p]),
    "vram_client_backend": (c_char_p, [c_void_p]),
    "vram_client_fd": (c_int, [c_void_p]),
    "vram_client_dispatch": (c_int, [c_void_p, c_int]),
    "vram_client_start_thread": (c_int, [c_void_p]),
    "vram_pool_create": (
        c_int,
        [c_void_p, POINTER(PoolOptions), POINTER(c_void_p)],
    ),
    "vram_pool_open": (c_int, [c_void_p, c_char_p, c_uint, POINTER(c_void_p)]),
    "vram_pool_close": (None, [c_void_p]),
    "vram_pool_drop": (c_int, [c_void_p, c_char_p]),
    "vram_pool_base": (c_size_t, [c_void_p]),
    "vram_pool_size": (c_uint64, [c_void_p]),
    "vram_pool_backup": (c_int, [c_void_p, POINTER(c_void_p), POINTER(c_uint64)]),
    "vram_pool_backup_release": (c_int, [c_void_p]),
    "vram_pool_state": (c_int, [c_void_p]),
    "vram_pool_name": (c_char_p, [c_void_p]),
    "vram_pool_reserve": (c_int, [c_void_p, c_uint64]),
    "vram_alloc": (c_int, [c_void_p, c_size_t, POINTER(c_void_p)]),
    "vram_free": (c_int, [c_void_p, c_void_p]),
    "vram_pause": (c_int, [c_void_p, POINTER(Selector), c_uint, POINTER(Report)]),
    "vram_gang_pause": (c_int, [c_void_p, POINTER(Selector), c_uint, POINTER(Report)]),
    "vram_gang_resume": (c_int, [c_void_p, POINTER(Selector), c_uint, POINTER(Report)]),
    "vram_resume": (c_int, [c_void_p, POINTER(Selector), c_uint, POINTER(Report)]),
    "vram_pool_pause": (c_int, [c_void_p, POINTER(Report)]),
    "vram_pool_resume": (c_int, [c_void_p, POINTER(Report)]),
    "vram_list": (
        c_int,
        [
            c_void_p,
            POINTER(Selector),
            c_size_t,
            POINTER(POINTER(PoolInfo)),
            POINTER(c_size_t),
        ],
    ),
    "vram_pool_info_free": (None, [POINTER(PoolInfo), c_size_t]),
    "vram_stats": (c_int, [c_void_p, POINTER(Stats)]),
    "vram_state_name": (c_char_p, [c_int]),
    "vram_policy_name": (c_char_p, [c_int]),
}

# Newer entry points: present or not, depending on the libvram found.
_OPTIONAL = {
    "vram_audit": (
        c_int,
        [
            c_void_p,
            c_size_t,
            POINTER(POINTER(ProcessUsage)),
            POINTER(c_size_t),
            POINTER(c_int),
        ],
    ),
    "vram_quotas": (
        c_int,
        [c_void_p, c_size_t, POINTER(POINTER(Quota)), POINTER(c_size_t)],
    ),
    "vram_torch_malloc": (c_void_p, [c_ssize_t, c_int, c_void_p]),
    "vram_torch_free": (None, [c_void_p, c_ssize_t, c_int, c_void_p]),
    "vram_torch_push_pool": (c_int, [c_void_p]),
    "vram_torch_pop_pool": (c_int, []),
    "vram_torch_set_default_pool": (c_int, [c_void_p]),
    "vram_torch_last_error": (c_char_p, []),
}


class LibraryNotFound(OSError):
    """libvram.so.0 could not be loaded from any of the places tried."""


def _source_tree_build():
    """build/libvram.so.0 when this package is imported from the source
    tree (python/vram inside a vramd checkout), else None."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    if not os.path.exists(os.path.join(root, "libvram", "include", "vram.h")):
        return None
    return os.path.join(root, "build", "libvram.so.0")


def candidates():
    """Where libvram is looked for, in order (see the module's docstring)."""
    env = os.environ.get("VRAM_LIBRARY")
    if env:
        # Asked for explicitly: nothing else is tried.
        return [env]
    out = []
    build = os.environ.get("VRAM_BUILD")
    if build:
        out.append(os.path.join(build, "libvram.so.0"))
    tree = _source_tree_build()
    if tree:
        out.append(tree)
    out.append("libvram.so.0")
    return out


def _load():
    errors = []
    for path in candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise LibraryNotFound(
        "cannot load libvram (set VRAM_LIBRARY to its path): " + "; ".join(errors)
    )


def _bind(lib, where):
    # The structures above are 0.2's: an older libvram would read them
    # wrongly, so it is refused here rather than trusted.
    lib.vram_version_number.restype = c_int
    lib.vram_version_number.argtypes = []
    have = lib.vram_version_number()
    if have < MIN_VERSION_NUMBER:
        raise LibraryNotFound(
            f"{where} is libvram {have // 10000}.{have // 100 % 100}, "
            f"older than the {MIN_VERSION_NUMBER // 10000}."
            f"{MIN_VERSION_NUMBER // 100 % 100} this package needs"
        )
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for name, (res, args) in _OPTIONAL.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args


lib, path = _load()
_bind(lib, path)


def has(name):
    """Whether the loaded libvram has the entry point name."""
    return hasattr(lib, name)


def last_error():
    """vram_last_error() of this thread, as text."""
    msg = lib.vram_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def text(b):
    """A char array or char * from libvram as str ("" for NULL)."""
    if b is None:
        return ""
    return b.decode("utf-8", "replace")


def encode(s):
    """str -> bytes for a const char * argument (None stays NULL)."""
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    return os.fsencode(s) if isinstance(s, os.PathLike) else s.encode("utf-8")


# ---- exit --------------------------------------------------------------------

_exiting = False
_log_callback = None  # the installed LogFn, kept alive while installed


def exiting():
    """True once the interpreter has begun to exit: from then on nothing
    calls into libvram from a finalizer (libvram closes what is left
    itself, after the interpreter)."""
    if _exiting:
        return True
    try:
        return sys.is_finalizing()
    except Exception:  # sys half torn down
        return True


def set_log_handler(fn, level):
    """Installs fn(level, message) as libvram's log handler (None removes
    it). The handler must not call libvram (vram.h names the few calls it
    may make). It is removed at exit, before
    the interpreter goes, since libvram may log while it closes."""
    global _log_callback
    if fn is None:
        lib.vram_set_log_handler(LogFn(), LOG_ERROR, None)
        _log_callback = None
        return

    def trampoline(lvl, msg, _userdata):
        try:
            fn(lvl, text(msg))
        except Exception:
            pass  # nowhere to report it; never unwind into C

    cb = LogFn(trampoline)
    lib.vram_set_log_handler(cb, level, None)
    _log_callback = cb


def _at_exit():
    global _exiting
    _exiting = True
    if _log_callback is not None:
        # A NULL function pointer: libvram prints nothing from now on. The
        # callback object itself is kept (never freed) in case a libvram
        # thread copied it out just before.
        lib.vram_set_log_handler(LogFn(), LOG_ERROR, None)


atexit.register(_at_exit)
