# SPDX-License-Identifier: Apache-2.0
"""vram.compat.vllm's wake_up when the device cannot take the memory back:
it raises RuntimeError, as vLLM's CuMemAllocator does when its allocator
cannot map memory, with vramd's message, and the pool stays asleep with its
backup until a later wake_up finds the room.

The host backend plays the device (one emulated device of 128 MiB), and
vram.torch runs its own pause and resume code over pools made here: the
test puts a stand-in ``torch`` module in sys.modules (vram.torch only
imports it; nothing of it is called on these paths) and gives vram.torch
the client and per-tag pools its region() would have made on a GPU."""

import errno
import sys
import types

import pytest

import vram
import vramtest
from vramtest import MiB


@pytest.fixture
def small_daemon(monkeypatch):
    d = vramtest.Daemon(capacity="128M", devices=1)
    monkeypatch.setenv("VRAM_SOCKET", d.socket)
    try:
        yield d
    finally:
        rc = d.stop()
        if rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


@pytest.fixture
def vram_torch(monkeypatch, small_daemon):
    """vram.torch with a client and pools of the host backend: a
    "weights" pool with a host backup and a "kv_cache" pool without, 64
    MiB each (the pools' first growth), so that together they fill the
    device."""
    fake_torch = types.ModuleType("torch")
    fake_torch.cuda = types.ModuleType("torch.cuda")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.delitem(sys.modules, "vram.torch", raising=False)
    import vram.torch as vt

    c = vram.connect(small_daemon.socket, name="vllm-worker")
    c.start_thread()
    pools = {}
    for tag, backup in (("weights", True), ("kv_cache", False)):
        p = c.create_pool(f"torch.test.{tag}", tag=tag, backup=backup, reserve_bytes=256 * MiB)
        pools[(tag, backup, 0)] = vt._TagPool(tag, backup, 0, p, None)
    monkeypatch.setattr(vt, "_state", types.SimpleNamespace(client=c, pools=pools))
    try:
        yield vt, {k[0]: tp.pool for k, tp in pools.items()}
    finally:
        c.close()


def _info(client, name):
    [pi] = client.list_pools(name=name)
    return pi


def test_wake_up_that_cannot_fit_raises_runtime_error(vram_torch, small_daemon):
    from vram.compat.vllm import CuMemAllocator

    vt, pools = vram_torch
    w, kv = pools["weights"], pools["kv_cache"]
    wp = w.alloc(MiB)
    kv.alloc(MiB)
    data = vramtest.pattern(MiB, 7)
    w.view(wp, MiB)[:] = data
    assert w.size + kv.size == 128 * MiB  # the device is full

    a = CuMemAllocator.get_instance()
    a._backup = {"weights": True, "kv_cache": False}
    a.sleep(offload_tags=("weights",))
    assert vt.is_paused("weights") and vt.is_paused("kv_cache")

    # Another process takes the device while the worker sleeps.
    other = vram.connect(small_daemon.socket, name="trainer")
    try:
        hog = other.create_pool("trainer.hog", reserve_bytes=256 * MiB)
        hog.reserve(128 * MiB)

        with pytest.raises(RuntimeError) as ei:
            a.wake_up(tags=["weights"])
        e = ei.value
        assert not isinstance(e, vram.VramError)
        cause = e.__cause__
        assert isinstance(cause, vram.VramError) and cause.errno == errno.ENOMEM
        assert str(e) == str(cause) and cause.message in str(e)

        # Still asleep, with its backup; nothing else woke either.
        pi = _info(other, w.name)
        assert pi.state == vram.State.PAUSED
        assert pi.backup_bytes > 0
        assert pi.bytes == 64 * MiB
        assert vt.is_paused("weights") and vt.is_paused("kv_cache")
        with pytest.raises(RuntimeError):
            a.wake_up()  # every tag: the same
        assert _info(other, w.name).state == vram.State.PAUSED
    finally:
        other.close()  # the trainer goes: its memory is free again

    # The retry finds the room, with the weights' content.
    a.wake_up(tags=["weights"])
    assert _info(vt.client(), w.name).state == vram.State.ACTIVE
    assert bytes(w.view(wp, MiB)) == data
    a.wake_up(tags=["kv_cache"])
    assert not vt.is_paused("kv_cache")
