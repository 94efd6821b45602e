# SPDX-License-Identifier: Apache-2.0
"""The vram package against a real vramd on the host backend: clients,
pools, sub-allocation, pause and resume (with the data checked through
ctypes), third-party pauses, inspection, errors."""

import ctypes
import errno
import gc
import os
import threading

import pytest

import vram
from vramtest import MiB, pattern, spawn_python


def _write(ptr, data):
    ctypes.memmove(ptr, data, len(data))


def _read(ptr, n):
    return ctypes.string_at(ptr, n)


def _free_bytes(client, dev=0):
    return client.stats().devices[dev].free_bytes


def test_version_and_library():
    assert vram.version() == "0.2.0"
    assert os.path.basename(vram.library_path()).startswith("libvram.so")


def test_library_lookup_order(monkeypatch):
    from vram import _lib

    monkeypatch.setenv("VRAM_LIBRARY", "/x/libvram.so.0")
    assert _lib.candidates() == ["/x/libvram.so.0"]
    monkeypatch.delenv("VRAM_LIBRARY")
    monkeypatch.setenv("VRAM_BUILD", "/b")
    c = _lib.candidates()
    assert c[0] == "/b/libvram.so.0"
    assert c[-1] == "libvram.so.0"
    # From the source tree, build/ of this checkout comes before the loader.
    tree = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "build", "libvram.so.0")
    assert tree in c and c.index(tree) < c.index("libvram.so.0")


def test_connect_without_daemon(tmp_path):
    with pytest.raises(vram.VramError) as ei:
        vram.connect(str(tmp_path / "none.sock"))
    assert ei.value.errno in (errno.ENOENT, errno.ECONNREFUSED)
    assert ei.value.message
    assert isinstance(ei.value, OSError)


def test_connect_ping_close(daemon):
    c = vram.connect(daemon.socket, name="py")
    assert c.backend == "host"
    c.ping()
    assert c.fileno() >= 0
    assert c.dispatch(0) == 0
    assert c.start_thread() is True
    assert c.start_thread() is False
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(vram.VramError) as ei:
        c.ping()
    assert ei.value.errno == errno.EBADF


def test_connect_through_the_admin_lane(daemon, tmp_path):
    # The daemon makes its admin socket next to its socket; root may use it.
    assert os.path.exists(daemon.socket + ".admin")
    c = vram.connect(daemon.socket, name="py admin", admin=True)
    c.ping()
    assert c.stats().pools == 0
    c.close()
    # Where the admin socket is missing, the ordinary socket serves.
    os.environ["VRAM_ADMIN_SOCKET"] = str(tmp_path / "no-such.admin")
    try:
        c = vram.connect(daemon.socket, name="py admin", admin=True)
        c.ping()
        c.close()
    finally:
        del os.environ["VRAM_ADMIN_SOCKET"]


def test_default_socket_from_environment(daemon):
    # $VRAM_SOCKET is the daemon's (conftest): no path needed.
    with vram.connect() as c:
        c.ping()


def test_pool_alloc_write_read(client):
    p = client.create_pool("py.kv", tag="kv_cache")
    assert p.name == "py.kv" and p.tag == "kv_cache" and p.owner
    assert p.state == vram.State.ACTIVE
    assert p.size == 0
    ptr = p.alloc(1 * MiB)
    assert ptr % 256 == 0
    assert p.base <= ptr < p.base + p.size
    data = pattern(MiB, 1)
    _write(ptr, data)
    assert _read(ptr, MiB) == data
    v = p.view(ptr, 16)
    v[:4] = b"abcd"
    assert _read(ptr, 4) == b"abcd"
    p.free(ptr)
    with pytest.raises(vram.VramError) as ei:
        p.free(ptr)
    assert ei.value.errno == errno.EINVAL


def test_pool_on_a_device_by_uuid(client):
    # The fixture's daemon has two devices; the second, named by UUID.
    uuid = client.stats().devices[1].uuid
    p = client.create_pool("py.on1", device=uuid)
    assert [i.device for i in client.list_pools(name="py.on1")] == [1]
    assert p.device == 1
    p.close()
    with pytest.raises(vram.VramError) as ei:
        client.create_pool("py.nowhere", device="GPU-nope")
    assert ei.value.errno == errno.ENODEV


def test_pool_grows_geometrically(client):
    p = client.create_pool("py.grow", reserve_bytes=200 * MiB)
    a = p.alloc(10 * MiB)
    assert p.size == 64 * MiB
    b = p.alloc(100 * MiB)
    assert p.size >= 110 * MiB
    assert b > a
    with pytest.raises(vram.VramError) as ei:
        p.alloc(150 * MiB)
    assert ei.value.errno == errno.ENOMEM
    p.reserve(180 * MiB)
    assert p.size >= 180 * MiB


def test_pause_resume_keeps_backup(client):
    w = client.create_pool("py.w", tag="weights", backup=True)
    assert w.policy == vram.Policy.HOST
    ptr = w.alloc(8 * MiB)
    data = pattern(8 * MiB, 2)
    _write(ptr, data)
    base = w.base
    before = _free_bytes(client)
    rep = w.pause()
    assert rep.pools == 1 and rep.failed == 0
    assert rep.bytes == w.size
    assert w.state == vram.State.PAUSED
    assert _free_bytes(client) == before + w.size
    assert rep.free_after - rep.free_before == w.size
    rep = w.resume()
    assert rep.bytes == w.size
    assert w.state == vram.State.ACTIVE
    assert w.base == base
    assert _read(ptr, len(data)) == data


def test_pause_discard_releases_and_resumes(client):
    kv = client.create_pool("py.kv", tag="kv_cache")
    ptr = kv.alloc(4 * MiB)
    before = _free_bytes(client)
    rep = client.pause(tag="kv_cache")
    assert rep.pools == 1 and rep.bytes == kv.size
    assert _free_bytes(client) == before + kv.size
    with pytest.raises(vram.VramError) as ei:
        kv.alloc(MiB)
    assert ei.value.errno == errno.EBUSY
    assert "paused" in ei.value.message
    client.resume(tag="kv_cache")
    assert _free_bytes(client) == before
    # Same address, usable again.
    _write(ptr, b"x" * 4096)
    assert _read(ptr, 4096) == b"x" * 4096
    assert kv.alloc(MiB) != ptr


def test_pause_selectors(client):
    a = client.create_pool("py.a", tag="weights", backup=True)
    b = client.create_pool("py.b", tag="kv_cache")
    c = client.create_pool("py.c", tag="kv_cache")
    for p in (a, b, c):
        p.alloc(MiB)
    assert client.pause(tag="kv_cache").pools == 2
    assert [p.state for p in (a, b, c)] == [vram.State.ACTIVE, vram.State.PAUSED, vram.State.PAUSED]
    assert client.resume(name="py.b").pools == 1
    assert b.state == vram.State.ACTIVE and c.state == vram.State.PAUSED
    assert client.pause(owner_pid=os.getpid(), all=True).pools == 2
    assert client.resume(all=True).pools == 3
    assert all(p.state == vram.State.ACTIVE for p in (a, b, c))


def test_pause_errors(client):
    p = client.create_pool("py.e", tag="t")
    p.alloc(MiB)
    with pytest.raises(vram.VramError) as ei:
        client.pause(tag="nothing-has-this-tag")
    assert ei.value.errno == errno.ENOENT
    with pytest.raises(vram.VramError) as ei:
        client.pause()  # an empty selector matches nothing
    assert ei.value.errno in (errno.ENOENT, errno.EINVAL)
    p.pause()
    with pytest.raises(vram.VramError) as ei:
        client.pause(tag="t")
    assert ei.value.errno == errno.EALREADY
    assert ei.value.report is not None
    with pytest.raises(vram.VramError) as ei:
        client.create_pool("py.e")
    assert ei.value.errno == errno.EEXIST
    assert "py.e" in str(ei.value)
    with pytest.raises(vram.VramError) as ei:
        client.create_pool("py.f", device=7)
    assert ei.value.errno == errno.ENODEV


def test_third_party_pause_in_process(daemon):
    """Another client pauses this one's pool; this one's event thread
    saves the backup and acks."""
    owner = vram.connect(daemon.socket, name="owner")
    other = vram.connect(daemon.socket, name="controller")
    try:
        owner.start_thread()
        w = owner.create_pool("py.tp", tag="weights", backup=True)
        ptr = w.alloc(2 * MiB)
        data = pattern(2 * MiB, 3)
        _write(ptr, data)
        rep = other.pause(tag="weights", timeout_ms=10000)
        assert rep.pools == 1 and rep.bytes == w.size
        assert w.state == vram.State.PAUSED
        assert other.list_pools(name="py.tp")[0].state == vram.State.PAUSED
        other.resume(tag="weights", timeout_ms=10000)
        assert w.state == vram.State.ACTIVE
        assert _read(ptr, len(data)) == data
    finally:
        other.close()
        owner.close()


def test_third_party_pause_with_dispatch(daemon):
    """The owner answers events from its own loop (dispatch) instead of
    libvram's thread."""
    owner = vram.connect(daemon.socket, name="owner")
    other = vram.connect(daemon.socket, name="controller")
    stop = threading.Event()

    def loop():
        import select

        while not stop.is_set():
            r, _, _ = select.select([owner.fileno()], [], [], 0.05)
            if r:
                owner.dispatch(0)

    try:
        kv = owner.create_pool("py.dp", tag="kv_cache")
        kv.alloc(MiB)
        t = threading.Thread(target=loop)
        t.start()
        try:
            assert other.pause(name="py.dp", timeout_ms=10000).pools == 1
            assert kv.state == vram.State.PAUSED
            assert other.resume(name="py.dp", timeout_ms=10000).pools == 1
            assert kv.state == vram.State.ACTIVE
        finally:
            stop.set()
            t.join()
    finally:
        other.close()
        owner.close()


OWNER_SCRIPT = r"""
import ctypes, sys, random
import vram
c = vram.connect(name="owner-child")
c.start_thread()
w = c.create_pool("py.child.w", tag="weights", backup=True)
ptr = w.alloc(4 << 20)
data = random.Random(7).randbytes(4 << 20)
ctypes.memmove(ptr, data, len(data))
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "state":
        print(str(w.state), flush=True)
    elif cmd == "check":
        print("ok" if ctypes.string_at(ptr, len(data)) == data else "bad", flush=True)
    elif cmd == "exit":
        break
c.close()
"""


def test_third_party_pause_other_process(daemon):
    child = spawn_python(OWNER_SCRIPT, daemon)
    try:
        assert child.stdout.readline().strip() == "ready"
        with vram.connect(daemon.socket, name="controller") as c:
            rep = c.pause(tag="weights", timeout_ms=10000)
            assert rep.pools == 1 and rep.bytes >= 4 * MiB
            child.stdin.write("state\n")
            assert child.stdout.readline().strip() == "paused"
            info = c.list_pools(tag="weights")[0]
            assert info.state == vram.State.PAUSED and info.owner_pid == child.pid
            c.resume(tag="weights", timeout_ms=10000)
            child.stdin.write("check\n")
            assert child.stdout.readline().strip() == "ok"
        child.stdin.write("exit\n")
        child.stdin.flush()
        assert child.wait(20) == 0
        assert child.stderr.read() == ""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_open_pool_shares_memory(daemon):
    a = vram.connect(daemon.socket, name="a")
    b = vram.connect(daemon.socket, name="b")
    try:
        p = a.create_pool("py.share", tag="weights")
        ptr = p.alloc(MiB)
        _write(ptr, b"shared!")
        q = b.open_pool("py.share", readonly=True)
        assert not q.owner
        assert q.tag == "weights"
        off = ptr - p.base
        assert _read(q.base + off, 7) == b"shared!"
        with pytest.raises(vram.VramError) as ei:
            q.alloc(10)
        assert ei.value.errno == errno.EPERM
        info = a.list_pools(name="py.share")[0]
        assert sorted(m.name for m in info.mappers) == ["a", "b"]
        assert any(m.readonly for m in info.mappers)
    finally:
        b.close()
        a.close()


def test_list_stats_status(client):
    # Pools live as long as their Pool objects (or their client).
    keep = [client.create_pool("py.s1", tag="weights", backup=True)]
    keep.append(client.create_pool("py.s2", tag="kv_cache"))
    for p in keep:
        p.alloc(MiB)
    pools = client.list_pools()
    assert sorted(p.name for p in pools) == ["py.s1", "py.s2"]
    s1 = client.list_pools(name="py.s1")[0]
    assert s1.policy == vram.Policy.HOST and s1.owner_pid == os.getpid()
    assert s1.owner_name == "pytest" and s1.chunks >= 1 and not s1.persistent
    assert [p.name for p in client.list_pools(tag="kv_cache")] == ["py.s2"]
    st = client.stats()
    assert st.backend == "host" and st.pools == 2 and st.sessions >= 1
    assert st.used_bytes == 128 * MiB
    assert st.devices and st.devices[0].total_bytes == 256 * MiB
    doc = client.status()
    assert doc["n_pools"] == 2 and len(doc["pools"]) == 2
    assert {p["state"] for p in doc["pools"]} == {"active"}
    import json

    json.dumps(doc)
    # The caller's own uid comes first, with what its pools hold; no quota
    # lines are configured, so no limits.
    q = client.quotas()[0]
    assert q.kind == "uid" and q.id == os.geteuid()
    assert q.pools == 2 and q.device_bytes[0] == 128 * MiB
    assert q.pools_limit is None and q.host_bytes == 64 * MiB
    assert doc["quotas"][0]["id"] == os.geteuid()


def test_audit_lists_this_process(client):
    if not vram._lib.has("vram_audit"):
        pytest.skip("this libvram has no vram_audit")
    p = client.create_pool("py.au")
    p.alloc(MiB)
    rows, driver = client.audit()
    assert driver is False  # the host backend lists no device processes
    me = [r for r in rows if r.pid == os.getpid()]
    assert me and me[0].vramd_bytes == 64 * MiB and me[0].used_bytes is None


def test_drop_pool(daemon):
    a = vram.connect(daemon.socket, name="a")
    b = vram.connect(daemon.socket, name="b")
    try:
        p = a.create_pool("py.drop")
        p.alloc(MiB)
        b.drop_pool("py.drop")
        assert b.list_pools() == []
        a.ping()  # a call that waits on the daemon handles the drop event
        with pytest.raises(vram.VramError) as ei:
            p.alloc(MiB)
        assert ei.value.errno == errno.ENOENT
    finally:
        b.close()
        a.close()


def test_client_close_closes_pools(daemon):
    c = vram.connect(daemon.socket)
    p = c.create_pool("py.cc")
    p.alloc(MiB)
    c.close()
    assert p.closed
    with pytest.raises(vram.VramError) as ei:
        p.alloc(MiB)
    assert ei.value.errno == errno.EBADF
    p.close()  # a no-op
    with vram.connect(daemon.socket) as c2:
        assert c2.list_pools() == []


def test_garbage_collected_pool_is_closed(client):
    p = client.create_pool("py.gc")
    p.alloc(MiB)
    del p
    gc.collect()
    assert client.list_pools() == []


def test_persistent_pool_outlives_its_client(daemon):
    with vram.connect(daemon.socket) as c:
        p = c.create_pool("py.persist", tag="weights", backup=True, persist=True)
        ptr = p.alloc(MiB)
        _write(ptr, b"kept")
        off = ptr - p.base
    with vram.connect(daemon.socket) as c:
        info = c.list_pools(name="py.persist")[0]
        assert info.persistent and info.owner_pid == 0
        q = c.open_pool("py.persist")
        assert q.owner
        assert _read(q.base + off, 4) == b"kept"
        c.drop_pool("py.persist")


def test_default_client_and_module_calls(daemon):
    c = vram.default_client()
    assert c is vram.default_client()
    p = c.create_pool("py.mod", tag="kv_cache")
    p.alloc(MiB)
    assert vram.pause(tag="kv_cache").pools == 1
    assert vram.list_pools()[0].state == vram.State.PAUSED
    assert vram.resume(tag="kv_cache").pools == 1
    assert vram.stats().pools == 1
    assert vram.status()["n_pools"] == 1
    c.close()
    assert vram.default_client() is not c


def test_log_handler(client):
    got = []
    vram.set_log_handler(lambda level, msg: got.append((level, msg)), "debug")
    try:
        p = client.create_pool("py.log")
        p.alloc(MiB)
    finally:
        vram.set_log_handler(None)
    assert any("py.log" in m for _, m in got)
    n = len(got)
    q = client.create_pool("py.log2")
    assert q.size == 0 and len(got) == n
