# SPDX-License-Identifier: Apache-2.0
"""libvram's PyTorch allocator entry points (vram_torch_malloc/free and the
per-thread pool stack), called through ctypes as PyTorch would call them,
against vramd on the host backend: no torch and no GPU needed."""

import ctypes
import errno
import threading

import pytest

import vram
from vram import _lib
from vramtest import MiB

lib = _lib.lib

pytestmark = pytest.mark.skipif(
    not _lib.has("vram_torch_malloc"), reason="this libvram has no torch entry points"
)


def malloc(size, device=0, stream=None):
    return lib.vram_torch_malloc(size, device, stream)


def free(ptr, size=0, device=0, stream=None):
    lib.vram_torch_free(ptr, size, device, stream)


def last():
    return _lib.text(lib.vram_torch_last_error())


def push(pool):
    return lib.vram_torch_push_pool(pool._handle())


@pytest.fixture(autouse=True)
def clean_stack():
    yield
    while lib.vram_torch_pop_pool() == 0:
        pass
    lib.vram_torch_set_default_pool(None)


def test_no_pool_fails_with_a_reason(client):
    assert malloc(MiB) is None
    assert "region" in last()


def test_pushed_pool_serves_and_frees(client):
    p = client.create_pool("t.kv", tag="kv_cache")
    assert push(p) == 0
    a = malloc(3 * MiB)
    assert a is not None and last() == ""
    assert p.base <= a < p.base + p.size
    ctypes.memset(a, 0x5A, 3 * MiB)
    b = malloc(MiB)
    assert b is not None and b != a
    free(a, 3 * MiB)
    free(b, MiB)
    # Freed memory is reused.
    assert malloc(3 * MiB) == a
    assert lib.vram_torch_pop_pool() == 0
    assert lib.vram_torch_pop_pool() == -errno.EINVAL


def test_nested_pools(client):
    w = client.create_pool("t.w", tag="weights", backup=True)
    kv = client.create_pool("t.kv", tag="kv_cache")
    assert push(w) == 0
    assert push(kv) == 0
    inner = malloc(MiB)
    assert kv.base <= inner < kv.base + kv.size
    lib.vram_torch_pop_pool()
    outer = malloc(MiB)
    assert w.base <= outer < w.base + w.size
    lib.vram_torch_pop_pool()
    assert malloc(MiB) is None
    # free finds each pointer's pool whatever is current.
    free(inner)
    free(outer)


def test_default_pool(client):
    p = client.create_pool("t.def")
    assert lib.vram_torch_set_default_pool(p._handle()) == 0
    a = malloc(MiB)
    assert p.base <= a < p.base + p.size
    assert lib.vram_torch_set_default_pool(None) == 0
    assert malloc(MiB) is None
    free(a)


def test_stack_is_per_thread(client):
    p = client.create_pool("t.thr")
    assert push(p) == 0
    got = {}

    def other():
        got["ptr"] = malloc(MiB)
        got["why"] = last()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got["ptr"] is None and "region" in got["why"]
    a = malloc(MiB)
    assert a is not None
    # Freed from another thread, which has no pool pushed.
    t = threading.Thread(target=free, args=(a,))
    t.start()
    t.join()
    assert malloc(MiB) == a


def test_wrong_device(client):
    p = client.create_pool("t.dev", device=1)
    assert push(p) == 0
    assert malloc(MiB, device=0) is None
    assert "device" in last()
    assert malloc(MiB, device=1) is not None
    assert malloc(MiB, device=-1) is not None


def test_paused_pool_fails_then_works(client):
    p = client.create_pool("t.pause", tag="kv_cache")
    assert push(p) == 0
    a = malloc(MiB)
    p.pause()
    assert malloc(MiB) is None
    assert "paused" in last()
    free(a)  # freeing while paused is fine
    p.resume()
    assert malloc(MiB) is not None


def test_pool_full_fails(client):
    p = client.create_pool("t.full", reserve_bytes=64 * MiB)
    assert push(p) == 0
    assert malloc(32 * MiB) is not None
    assert malloc(64 * MiB) is None
    assert "full" in last() or "memory" in last()


def test_push_refuses_what_it_cannot_use(daemon, client):
    p = client.create_pool("t.own")
    with vram.connect(daemon.socket) as other:
        q = other.open_pool("t.own")
        assert push(q) == -errno.EPERM
    p.close()
    assert lib.vram_torch_push_pool(p._h or 0) == -errno.EINVAL
    assert lib.vram_torch_pop_pool() == -errno.EINVAL


def test_push_depth_is_bounded(client):
    p = client.create_pool("t.deep")
    n = 0
    while push(p) == 0:
        n += 1
        assert n <= 64
    assert n == 64
    assert _lib.last_error()


def test_free_after_close_and_unknown_pointers(client):
    p = client.create_pool("t.closed", reserve_bytes=128 * MiB)
    assert push(p) == 0
    a = malloc(MiB)
    lib.vram_torch_pop_pool()
    p.close()
    free(a)  # the pool is gone: quietly nothing
    free(None)
    buf = ctypes.create_string_buffer(64)
    free(ctypes.addressof(buf))  # not a pool's: logged, ignored
    # A new pool may get the closed one's range: it replaces it.
    q = client.create_pool("t.new", reserve_bytes=128 * MiB)
    assert push(q) == 0
    b = malloc(MiB)
    free(b)
    assert malloc(MiB) == b


def test_failures_are_logged(client):
    got = []
    vram.set_log_handler(lambda level, msg: got.append((level, msg)), "warn")
    try:
        assert malloc(MiB) is None
        buf = ctypes.create_string_buffer(64)
        free(ctypes.addressof(buf))
    finally:
        vram.set_log_handler(None)
    assert any(lvl == "error" and "torch: no vramd pool" in m for lvl, m in got)
    assert any("torch: free of" in m for _, m in got)
