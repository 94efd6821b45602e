#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch on vramd on a real GPU (make test-gpu): a small transformer-like
model's weights (tag weights, host backup), a KV cache (tag kv_cache,
discarded) and a captured CUDA graph (tag cuda_graph) live in vramd pools;
pausing every tag gives the device back at least 95% of the pooled bytes
(as torch.cuda.mem_get_info sees it); another process takes that memory and
lets it go; after resume the graph replays with the same output, bit for
bit; ten cycles leave GPU memory, host memory and open fds where they were;
staged wake (weights, then kv_cache) as RL frameworks do it; third-party
pauses; the torch_memory_saver and vLLM compatibility layers; and clean
interpreter exits.

Run through tests/runner (each case in its own process), which is what
make test-gpu does:

    build/tests/runner tests/gpu/torch_test.py

This file implements the runner's protocol itself (--list, --run ID) over
pytest, like tests/python/run_pytest. Every case skips without PyTorch or
without a CUDA device.
"""

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

if __name__ == "__main__":
    # Run by tests/runner: its protocol, through tests/python/run_pytest
    # (which may run this file again under an interpreter that has pytest).
    import importlib.machinery
    import importlib.util

    _path = os.path.join(ROOT, "tests", "python", "run_pytest")
    _loader = importlib.machinery.SourceFileLoader("run_pytest", _path)
    _spec = importlib.util.spec_from_loader("run_pytest", _loader)
    run_pytest = importlib.util.module_from_spec(_spec)
    _loader.exec_module(run_pytest)
    sys.exit(run_pytest.main(paths=[os.path.abspath(__file__)], script=__file__))

import pytest  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "python"))

import vramtest  # noqa: E402
from vramtest import GiB, MiB  # noqa: E402

# The model and its graph: small enough for any GPU, large enough that each
# tag spans several chunks' worth of growth.
D_MODEL = 1024
N_LAYERS = 4
N_HEADS = 8
BATCH = 8
SEQ = 64
KV_LEN = 4096


# ---- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


@pytest.fixture(scope="module")
def daemon(torch):
    """vramd on the cuda backend, for every case of this process (the
    runner gives each case its own process)."""
    d = vramtest.Daemon(backend="cuda", extra=["--ack-timeout-ms", "50000"])
    os.environ["VRAM_SOCKET"] = d.socket
    try:
        yield d
    finally:
        killed = not d.alive
        rc = d.stop()
        if not killed and rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


@pytest.fixture(scope="module")
def vt(torch, daemon):
    import vram.torch

    return vram.torch


def free_bytes(torch):
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


# ---- the model ------------------------------------------------------------------------


def make_model(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D_MODEL)
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.ln2 = nn.LayerNorm(D_MODEL)
            self.up = nn.Linear(D_MODEL, 4 * D_MODEL)
            self.down = nn.Linear(4 * D_MODEL, D_MODEL)

        def forward(self, x, kv):
            # kv: [2, BATCH, N_HEADS, KV_LEN, head]; this step's keys and
            # values go to its first SEQ slots, and attention reads them
            # back: the output depends on the weights and the input only.
            b, s, _ = x.shape
            h = self.ln1(x)
            q, k, v = self.qkv(h).view(b, s, 3, N_HEADS, -1).permute(2, 0, 3, 1, 4)
            kv[0, :, :, :s].copy_(k)
            kv[1, :, :, :s].copy_(v)
            a = F.scaled_dot_product_attention(q, kv[0, :, :, :s], kv[1, :, :, :s], is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(N_LAYERS))
            self.head = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, x, kv):
            for i, blk in enumerate(self.blocks):
                x = blk(x, kv[i])
            return self.head(x)

    return Model()


class Engine:
    """Weights, KV cache and a captured graph, each under its tag."""

    def __init__(self, torch, vt, tags=("weights", "kv_cache", "cuda_graph")):
        self.torch = torch
        self.tags = tags
        wt, kvt, gt = tags
        torch.manual_seed(0)
        with vt.region(wt, backup=True):
            self.model = make_model(torch).to(device="cuda", dtype=torch.bfloat16)
        with vt.region(kvt):
            self.kv = torch.zeros(
                N_LAYERS, 2, BATCH, N_HEADS, KV_LEN, D_MODEL // N_HEADS,
                device="cuda", dtype=torch.bfloat16,
            )
        self.input = torch.randn(BATCH, SEQ, D_MODEL, device="cuda", dtype=torch.bfloat16)
        self.weights_copy = [p.detach().cpu().clone() for p in self.model.parameters()]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(s):
            for _ in range(3):
                self.model(self.input, self.kv)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), vt.cuda_graph(self.graph, tag=gt):
            self.output = self.model(self.input, self.kv)
        self.ref = self.run()

    def run(self):
        self.graph.replay()
        self.torch.cuda.synchronize()
        return self.output.detach().cpu().clone()

    def weights_intact(self):
        return all(
            self.torch.equal(p.detach().cpu(), c)
            for p, c in zip(self.model.parameters(), self.weights_copy)
        )

    def pooled(self, vt):
        return sum(p.size for t, _b, _d, p in vt.pools() if t in self.tags)


HOG = r"""
import sys, torch
keep = int(sys.argv[1])
chunks = []
while True:
    free = torch.cuda.mem_get_info()[0]
    want = min(free - keep, 1 << 30) // (2 << 20) * (2 << 20)
    if want <= 0:
        break
    try:
        chunks.append(torch.empty(want, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        break
for c in chunks:
    c.fill_(0xAB)
torch.cuda.synchronize()
print(sum(c.numel() for c in chunks), flush=True)
del chunks
torch.cuda.synchronize()
"""


def hog_and_release(keep_bytes):
    """Another process takes all of the device's free memory but
    keep_bytes, writes it, and exits. Returns the bytes it held."""
    r = subprocess.run(
        [sys.executable, "-c", HOG, str(keep_bytes)],
        capture_output=True,
        text=True,
        timeout=300,
        env=vramtest.child_env(),
    )
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip().splitlines()[-1])


# ---- cases ------------------------------------------------------------------------------


def test_region_pause_releases_and_resume_restores(torch, vt):
    with vt.region("t1.weights", backup=True):
        w = torch.arange(64 << 20, device="cuda", dtype=torch.int32)
    with vt.region("t1.kv"):
        kv = torch.ones(256 << 20, device="cuda", dtype=torch.uint8)
    sizes = vt.usage()
    pooled = sizes["t1.weights"] + sizes["t1.kv"]
    f0 = free_bytes(torch)
    rep = vt.pause(["t1.weights", "t1.kv"])
    f1 = free_bytes(torch)
    assert rep.pools == 2 and rep.bytes == pooled
    assert f1 - f0 >= 0.95 * pooled, (f0, f1, pooled)
    assert vt.is_paused("t1.weights") and vt.is_paused("t1.kv")
    vt.resume(["t1.weights", "t1.kv"])
    assert free_bytes(torch) <= f0 + 64 * MiB
    assert torch.equal(w, torch.arange(64 << 20, device="cuda", dtype=torch.int32))
    kv.fill_(3)
    assert int(kv.sum()) == 3 * (256 << 20)


WORKER_OF_LAST_GPU = r"""
import torch
import vram.torch as vt
with vt.region("t.visible") as pool:
    x = torch.full((1 << 20,), 7, device="cuda", dtype=torch.int32)
assert pool.base <= x.data_ptr() < pool.base + pool.size
assert int(x.sum()) == 7 << 20
print(pool.device, vt._device_uuid(0), flush=True)
"""


def test_pools_are_made_on_the_devices_uuid(torch, vt, daemon):
    """vram.torch names PyTorch's device to vramd by UUID, in the form the
    daemon lists its devices in; a worker that sees only the node's last
    GPU (CUDA_VISIBLE_DEVICES, its cuda:0) gets pools on the daemon's index
    of that GPU. On a one-GPU machine that index is 0 on both sides, so
    only the UUID's form and the path are checked there."""
    uuids = [d.uuid for d in vt.client().stats().devices]
    here = vt._device_uuid(torch.cuda.current_device())
    assert here in uuids, (here, uuids)
    with vt.region("t.uuid") as pool:
        x = torch.ones(1 << 20, device="cuda")
    assert pool.device == uuids.index(here)
    assert pool.base <= x.data_ptr() < pool.base + pool.size
    last = len(uuids) - 1
    r = vramtest.run_python(WORKER_OF_LAST_GPU, daemon, timeout=180, CUDA_VISIBLE_DEVICES=last)
    assert r.returncode == 0, r.stderr
    device, uuid = r.stdout.split()
    assert (int(device), uuid) == (last, uuids[last])


def test_model_graph_cycles(torch, vt):
    e = Engine(torch, vt)
    pooled = e.pooled(vt)
    assert pooled >= 512 * MiB
    total = torch.cuda.mem_get_info()[1]

    # First pause: the memory really goes back to the device; another
    # process takes it, writes it and lets it go.
    f0 = free_bytes(torch)
    rep = vt.pause()
    f1 = free_bytes(torch)
    assert rep.bytes >= pooled, (rep, pooled)
    assert f1 - f0 >= 0.95 * pooled, f"freed {f1 - f0} of {pooled} pooled bytes"
    held = hog_and_release(keep_bytes=512 * MiB)
    assert held >= f1 - 2 * GiB - 512 * MiB, (held, f1, total)
    vt.resume()
    assert e.weights_intact()
    out = e.run()
    assert torch.equal(out, e.ref)

    # Ten cycles: same output, nothing grows.
    fds, rss, free_active, free_paused = [], [], [], []
    for i in range(10):
        free_active.append(free_bytes(torch))
        rep = vt.pause()
        assert rep.bytes >= pooled and rep.failed == 0
        free_paused.append(free_bytes(torch))
        assert free_paused[-1] - free_active[-1] >= 0.95 * pooled
        vt.resume()
        assert torch.equal(e.run(), e.ref), f"cycle {i}: graph output changed"
        fds.append(vramtest.count_fds())
        rss.append(vramtest.rss_bytes())
    assert e.weights_intact()
    # The first cycle may set things up once (the backup's pages, copy
    # streams); from then on nothing may grow.
    assert max(fds[1:]) <= fds[1], fds
    assert max(rss[1:]) - rss[1] <= 64 * MiB, rss
    assert free_active[-1] >= free_active[1] - 64 * MiB, free_active
    assert free_paused[-1] >= free_paused[1] - 64 * MiB, free_paused
    assert vt.client().stats().backend == "cuda"


def test_staged_wake(torch, vt):
    e = Engine(torch, vt)
    sizes = vt.usage()
    vt.pause()
    f_paused = free_bytes(torch)
    vt.resume("weights")
    assert not vt.is_paused("weights")
    assert vt.is_paused("kv_cache") and vt.is_paused("cuda_graph")
    assert e.weights_intact()
    # Only the weights came back.
    f_weights = free_bytes(torch)
    assert f_paused - f_weights <= sizes["weights"] + 64 * MiB
    assert f_paused - f_weights >= 0.95 * sizes["weights"]
    vt.resume(["kv_cache", "cuda_graph"])
    assert torch.equal(e.run(), e.ref)


def test_third_party_pause(torch, vt, daemon):
    """A controller (another client, as vramctl would) pauses this
    process's tags; libvram's event thread saves and unmaps meanwhile."""
    import vram

    e = Engine(torch, vt)
    pooled = e.pooled(vt)
    torch.cuda.synchronize()
    with vram.connect(daemon.socket, name="controller") as c:
        f0 = free_bytes(torch)
        rep = c.pause(owner_pid=os.getpid(), all=True, timeout_ms=60000)
        assert rep.bytes >= pooled
        assert free_bytes(torch) - f0 >= 0.95 * pooled
        assert vt.is_paused("weights") and vt.is_paused("kv_cache")
        c.resume(owner_pid=os.getpid(), all=True, timeout_ms=60000)
    assert e.weights_intact()
    assert torch.equal(e.run(), e.ref)


def test_allocating_while_paused_is_an_oom_with_a_reason(torch, vt):
    with vt.region("t5.kv"):
        x = torch.ones(32 << 20, device="cuda")
    vt.pause("t5.kv")
    with pytest.raises(torch.OutOfMemoryError) as ei:
        with vt.region("t5.kv"):
            torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    notes = "".join(getattr(ei.value, "__notes__", []))
    assert "paused" in notes, notes
    vt.resume("t5.kv")
    x.fill_(2)
    assert int(x.sum()) == 2 * (32 << 20)


def test_torch_memory_saver_compat(torch, vt):
    import vram.compat.torch_memory_saver as torch_memory_saver

    saver = torch_memory_saver.torch_memory_saver
    saver.hook_mode = "preload"
    with saver.region(tag="tms.w", enable_cpu_backup=True):
        w = torch.full((64 << 20,), 7, device="cuda", dtype=torch.uint8)
    with saver.region(tag="tms.kv"):
        kv = torch.zeros(128 << 20, device="cuda", dtype=torch.uint8)
    with saver.disable():
        plain = torch.ones(1 << 20, device="cuda")
    static = torch.ones(1 << 20, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        (static * 2).sum()
    torch.cuda.current_stream().wait_stream(s)
    with saver.cuda_graph(cuda_graph=g, tag="tms.graph"):
        out = (static * 2).sum()
    g.replay()
    torch.cuda.synchronize()
    assert float(out) == 2 * (1 << 20)
    pooled = sum(vt.usage()[t] for t in ("tms.w", "tms.kv", "tms.graph"))
    f0 = free_bytes(torch)
    saver.pause("tms.kv")
    saver.pause("tms.graph")
    saver.pause("tms.w")
    assert free_bytes(torch) - f0 >= 0.95 * pooled
    saver.resume()
    g.replay()
    torch.cuda.synchronize()
    assert float(out) == 2 * (1 << 20)
    assert int(w.sum()) == 7 * (64 << 20)
    assert float(plain.sum()) == 1 << 20
    kv.zero_()


def test_vllm_compat(torch, vt):
    from vram.compat.vllm import CuMemAllocator

    a = CuMemAllocator.get_instance()
    with a.use_memory_pool(tag="weights"):
        w = torch.full((32 << 20,), 3, device="cuda", dtype=torch.int32)
    with a.use_memory_pool(tag="kv_cache"):
        kv = torch.zeros(256 << 20, device="cuda", dtype=torch.uint8)
    used = a.get_current_usage()
    assert used >= (128 << 20) + (256 << 20)
    f0 = free_bytes(torch)
    a.sleep(offload_tags=("weights",))
    assert free_bytes(torch) - f0 >= 0.95 * used
    a.wake_up(tags=["weights"])
    assert int((w == 3).sum()) == 32 << 20
    a.wake_up(tags=["kv_cache"])
    kv.fill_(1)
    assert int(kv.sum()) == 256 << 20
    assert a.get_current_usage() == used
    a.release_pools()


EXIT_PRELUDE = r"""
import os, sys, torch
import vram.torch as vt
with vt.region("weights", backup=True):
    w = torch.nn.Linear(2048, 2048, device="cuda")
with vt.region("kv_cache"):
    kv = torch.zeros(64 << 20, device="cuda")
x = torch.ones(16, 2048, device="cuda")
"""

EXIT_GRAPH = r"""
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    w(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.no_grad(), vt.cuda_graph(g):
    y = w(x)
g.replay()
torch.cuda.synchronize()
"""


def _exit_clean(daemon, code):
    r = vramtest.run_python(code, daemon, timeout=180)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr}"
    assert r.stderr == "", r.stderr


def test_exit_with_pools_alive(torch, daemon):
    _exit_clean(daemon, EXIT_PRELUDE)


def test_exit_with_pools_paused(torch, daemon):
    _exit_clean(daemon, EXIT_PRELUDE + "vt.pause()\n")


def test_exit_with_a_graph_holding_the_pool(torch, daemon):
    _exit_clean(daemon, EXIT_PRELUDE + EXIT_GRAPH)


def test_exit_with_a_graph_holding_a_paused_pool(torch, daemon):
    _exit_clean(daemon, EXIT_PRELUDE + EXIT_GRAPH + "vt.pause()\n")


def test_exit_with_tms_and_vllm_objects(torch, daemon):
    code = EXIT_PRELUDE + (
        "import vram.compat.torch_memory_saver as tms\n"
        "from vram.compat.vllm import CuMemAllocator\n"
        "with tms.torch_memory_saver.region('tms'):\n"
        "    a = torch.ones(1 << 20, device='cuda')\n"
        "with CuMemAllocator.get_instance().use_memory_pool('vllm'):\n"
        "    b = torch.ones(1 << 20, device='cuda')\n"
        "CuMemAllocator.get_instance().sleep()\n"
    )
    _exit_clean(daemon, code)


def test_exit_after_the_daemon_died(torch):
    """The daemon is killed while the process has pools (one paused) and
    a graph: the engine keeps running on its memory, calls that need the
    daemon fail with EPIPE, and the exit is clean."""
    d = vramtest.Daemon(backend="cuda", extra=["--ack-timeout-ms", "50000"])
    code = EXIT_PRELUDE + EXIT_GRAPH + (
        "vt.pause('kv_cache')\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "g.replay(); torch.cuda.synchronize()\n"
        "import vram\n"
        "try:\n"
        "    vt.resume('kv_cache')\n"
        "except vram.VramError as e:\n"
        "    print('errno', e.errno, flush=True)\n"
    )
    child = vramtest.spawn_python(code, d)
    try:
        line = child.stdout.readline().strip()
        assert line == "ready", child.stderr.read()
        d.kill(signal.SIGKILL)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        d.stop()
    assert child.returncode == 0, err
    assert err == ""
    assert "errno 32" in out
