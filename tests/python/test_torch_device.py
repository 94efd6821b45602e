# SPDX-License-Identifier: Apache-2.0
"""vram.torch in a worker that sees one GPU of two, without PyTorch or a GPU.

vramd and this process run the cuda backend against the fake driver
(tests/unit/cuda_fake/libcuda_fake.c, built here with cc). The node has two
devices; this process sees only the second (CUDA_VISIBLE_DEVICES=1), so
PyTorch's device 0 is vramd's device 1. A stand-in `torch` module gives
vram.torch what it asks of PyTorch (device properties with the UUID, a
pluggable allocator, MemPools), and the test calls vram_torch_malloc as
PyTorch's caching allocator would. Checked: region() makes its pool on the
daemon's device 1, found by UUID, and an allocation on local device 0
comes from it."""

import contextlib
import os
import shutil
import subprocess
import sys
import types

import pytest

import vramtest
from vramtest import MiB

FAKE_SRC = os.path.join(vramtest.ROOT, "tests", "unit", "cuda_fake", "libcuda_fake.c")
# The fake's physical device N has UUID bytes 16N..16N+15.
UUID_BYTES = {n: bytes(range(16 * n, 16 * n + 16)) for n in range(2)}


def _fake_torch():
    """The few parts of torch that vram.torch touches."""
    visible = [int(x) for x in os.environ["CUDA_VISIBLE_DEVICES"].split(",")]

    class Allocator:
        def __init__(self, path, malloc, free):
            self.path = path

        def allocator(self):
            return self

    class MemPool:
        def __init__(self, allocator):
            self.id = (0, id(self))

    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        yield

    def properties(i):
        return types.SimpleNamespace(uuid=types.SimpleNamespace(bytes=list(UUID_BYTES[visible[i]])))

    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(cuda="13.0", hip=None)
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True,
        current_device=lambda: 0,
        device_count=lambda: len(visible),
        get_device_properties=properties,
        memory=types.SimpleNamespace(CUDAPluggableAllocator=Allocator),
        MemPool=MemPool,
        use_mem_pool=use_mem_pool,
        OutOfMemoryError=MemoryError,
    )
    torch.device = lambda d: types.SimpleNamespace(type="cuda", index=None)
    return torch


@pytest.fixture
def worker_of_device_1(tmp_path, monkeypatch):
    """vramd on the fake cuda backend with two devices; this process then
    sees the second only. Yields vram.torch, imported over the stand-in."""
    cc = os.environ.get("CC") or "cc"
    if not shutil.which(cc) or not os.path.exists(FAKE_SRC):
        pytest.skip("no C compiler or no fake driver source")
    so = str(tmp_path / "libcuda.so.1")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", so, FAKE_SRC, "-lpthread"], check=True)
    monkeypatch.setenv("VRAM_LIBCUDA", so)
    monkeypatch.setenv("VRAM_LIBNVML", "/nonexistent/libnvidia-ml.so.1")
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FAKE_CUDA_CAPACITY_MB", raising=False)
    d = vramtest.Daemon(backend="cuda", extra=["--ack-timeout-ms", "20000"])
    monkeypatch.setenv("VRAM_SOCKET", d.socket)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    sys.modules.pop("vram.torch", None)
    import vram.torch as vt

    try:
        yield vt
    finally:
        vt.client().close()
        sys.modules.pop("vram.torch", None)
        rc = d.stop()
        if rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


def test_region_pool_is_on_the_daemons_device_by_uuid(worker_of_device_1):
    vt = worker_of_device_1
    from vram import _lib

    with vt.region("kv_cache") as pool:
        assert pool.device == 1  # the daemon's index
        ptr = _lib.lib.vram_torch_malloc(4 * MiB, 0, None)  # torch's device 0
        assert ptr is not None, _lib.text(_lib.lib.vram_torch_last_error())
        assert pool.base <= ptr < pool.base + (pool.size or 1 << 40)
        # This process has no device 1.
        assert _lib.lib.vram_torch_malloc(MiB, 1, None) is None
        assert "device 0 here" in _lib.text(_lib.lib.vram_torch_last_error())
        _lib.lib.vram_torch_free(ptr, 4 * MiB, 0, None)
    assert [t for t, _b, d, _p in vt.pools() if d == 0] == ["kv_cache"]
    uuid = vt._device_uuid(0)
    assert uuid == "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"
    assert uuid == vt.client().stats().devices[1].uuid


def test_uuid_text_cuda_and_rocm(worker_of_device_1):
    vt = worker_of_device_1
    assert vt._uuid_text(bytes(range(16)), False) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    # ROCm's UUIDs are printable: vramd names them as they are.
    assert vt._uuid_text(b"4a2c6f3d8e1b7a90", True) == "GPU-4a2c6f3d8e1b7a90"
    assert vt._uuid_text(bytes(range(16)), True) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
