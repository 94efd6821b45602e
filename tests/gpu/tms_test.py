#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_memory_saver's examples (fzyzcjy/torch_memory_saver test/examples)
and vLLM's allocator-level sleep-mode behaviours, on a real GPU through
vram.compat (make test-gpu). Each scenario runs in a fresh interpreter, as
upstream's test_examples.py runs each example, in both hook modes where
upstream has both ("preload" with libvram-preload.so in LD_PRELOAD), and
asserts upstream's figures: memory freed by a pause, content kept or
dropped, the same addresses after a resume, RSS given back after a resume
that does not retain the backup.

Run through tests/runner (this file speaks its protocol, as
tests/gpu/torch_test.py does). Every case skips without PyTorch or a CUDA
device; each keeps its tensors small (at most 1 GiB) so that the file runs
in a few minutes on an H200.
"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

if __name__ == "__main__":
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

MODES = ["torch", "preload"]


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
def backup_dir():
    d = tempfile.mkdtemp(prefix="vramd-disk-", dir=os.environ.get("VRAM_TEST_DISK_DIR", "/var/tmp"))
    yield d
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


@pytest.fixture(scope="module")
def daemon(torch, backup_dir):
    conf = os.path.join(backup_dir + ".conf")
    with open(conf, "w") as f:
        f.write(f"backup_dir = {backup_dir}\n")
    d = vramtest.Daemon(backend="cuda", extra=["--ack-timeout-ms", "50000", "--config", conf])
    try:
        yield d
    finally:
        rc = d.stop()
        os.unlink(conf)
        if rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


# What every scenario starts with: the one-line switch, and upstream's
# helpers (device memory in use, this process's RSS).
PRELUDE = """
import os, sys, gc, torch
import vram.compat.torch_memory_saver as tms_mod
from vram.compat.torch_memory_saver import torch_memory_saver as tms
MODE = sys.argv[1]
tms.hook_mode = MODE
GiB = 1 << 30
def used():
    torch.cuda.synchronize()
    f, t = torch.cuda.mem_get_info()
    return t - f
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
"""


def run(daemon, mode, body, timeout=240, **env):
    code = PRELUDE + body + "\nprint('ok')\n"
    extra = dict(env)
    if mode == "preload":
        extra["LD_PRELOAD"] = os.path.join(vramtest.build_dir(), "libvram-preload.so")
    r = vramtest.subprocess.run(
        [sys.executable, "-c", code, mode],
        env=vramtest.child_env(daemon, **extra),
        stdin=vramtest.subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), f"{r.stdout}\n{r.stderr}"
    return r.stdout


# ---- torch_memory_saver's examples ------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_simple(torch, daemon, mode):
    run(daemon, mode, """
n = 1 * GiB
with tms.region():
    x = torch.full((n,), 100, dtype=torch.uint8, device="cuda")
ptr = x.data_ptr()
before = used()
tms.pause()
freed = before - used()
assert freed >= n * 0.95, freed
tms.resume()
assert x.data_ptr() == ptr
assert used() - (before - freed) >= n * 0.95
x.fill_(3); assert int(x[0]) == 3
""")


@pytest.mark.parametrize("mode", MODES)
def test_multiple_tags(torch, daemon, mode):
    run(daemon, mode, """
n = 512 << 20
with tms.region(tag="type1"):
    a = torch.full((n,), 1, dtype=torch.uint8, device="cuda")
with tms.region(tag="type2"):
    b = torch.full((n,), 2, dtype=torch.uint8, device="cuda")
u0 = used()
tms.pause("type1")
u1 = used(); assert u0 - u1 >= n * 0.95
tms.pause("type2")
u2 = used(); assert u1 - u2 >= n * 0.95
tms.resume("type2")
assert used() - u2 >= n * 0.95
tms.resume("type1")
assert used() >= u0 - n * 0.05
""")


@pytest.mark.parametrize("mode", MODES)
def test_cuda_graph(torch, daemon, mode):
    run(daemon, mode, """
n = 256 << 20
static_in = torch.full((n,), 1, dtype=torch.uint8, device="cuda")
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(2):
        out = static_in * 2
torch.cuda.current_stream().wait_stream(s)
with tms.cuda_graph(cuda_graph=g, tag="cuda_graph"):
    out = static_in * 2 + 1
g.replay(); torch.cuda.synchronize()
ptr = out.data_ptr()
u0 = used()
tms.pause("cuda_graph")
assert u0 - used() >= n * 0.9
tms.resume("cuda_graph")
static_in.fill_(5)
g.replay(); torch.cuda.synchronize()
assert out.data_ptr() == ptr and int(out[0]) == 11 and int(out[-1]) == 11
""")


@pytest.mark.parametrize("mode", ["torch"])
def test_cpu_backup_each_backend_and_retention(torch, daemon, mode):
    # get_cpu_backup and retain_cpu_backup are hook mode torch's here (the
    # preload library's backups are mapped in its own session).
    run(daemon, mode, """
assert tms.retain_cpu_backup is False
for backend in ("mmap", "pinned"):
    with tms.region(enable_cpu_backup=True, cpu_backup_backend=backend):
        t = torch.full((20_000_000,), 10, dtype=torch.uint8, device="cuda")
        typed = torch.randn((10, 20, 30), dtype=torch.float32, device="cuda")
        typed_cpu = typed.cpu()
    with tms.region(enable_cpu_backup=False):
        nob = torch.full((20_000_000,), 20, dtype=torch.uint8, device="cuda")
    tms.pause()
    got = tms.get_cpu_backup(typed)
    assert got is not None and torch.all(got == typed_cpu)
    unrelated = torch.full((20_000_000,), 30, dtype=torch.uint8, device="cuda")
    tms.resume()
    assert t[:3].tolist() == [10, 10, 10]
    assert nob[:3].tolist() != [20, 20, 20]
    assert tms.get_cpu_backup(typed) is None
    del t, typed, nob, unrelated
    torch.cuda.empty_cache()

expected = torch.arange(4096, dtype=torch.int64).remainder(251).to(torch.uint8)
with tms.region(tag="ret", enable_cpu_backup=True, cpu_backup_backend="mmap"):
    kept = expected.to("cuda")
tms.pause("ret")
first = tms.get_cpu_backup(kept, zero_copy=True)
p0 = first.data_ptr(); assert torch.equal(first, expected)
tms.retain_cpu_backup = True
del first
tms.resume("ret")
after = tms.get_cpu_backup(kept, zero_copy=True)
assert after.data_ptr() == p0 and torch.equal(after, expected)
assert torch.equal(kept.cpu(), expected)
del after
tms.retain_cpu_backup = False
tms.pause("ret"); tms.resume("ret")
assert tms.get_cpu_backup(kept) is None
assert torch.equal(kept.cpu(), expected)
""")


@pytest.mark.parametrize("mode", ["torch"])
def test_rss_released_after_a_non_retaining_resume(torch, daemon, mode):
    run(daemon, mode, """
n = 1 * GiB
tol = n // 4
with tms.region(enable_cpu_backup=True, cpu_backup_backend="mmap"):
    x = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
r0 = rss()
tms.pause(); torch.cuda.synchronize()
r1 = rss()
tms.resume(); torch.cuda.synchronize()
r2 = rss()
assert int(x[0]) == 7
assert r1 - r0 >= n - tol, (r0, r1)
assert r2 - r1 <= -(n - tol), (r1, r2)
""")


@pytest.mark.parametrize("mode", MODES)
def test_disk_backup(torch, daemon, mode, backup_dir):
    out = run(daemon, mode, """
import time, vram
n = 512 << 20
with tms.region(tag="disk", enable_disk_backup=True):
    x = torch.full((n,), 42, dtype=torch.uint8, device="cuda")
    x[-1] = 43
c = vram.connect(name="check")
u0 = used()
t0 = time.monotonic(); tms.pause("disk"); t1 = time.monotonic()
assert u0 - used() >= n * 0.95
st = c.stats(); assert st.disk_backup_bytes >= n, st
t2 = time.monotonic(); tms.resume("disk"); t3 = time.monotonic()
assert int(x[0]) == 42 and int(x[-1]) == 43
print(f"disk backup {n >> 20} MiB: pause {n / 1e6 / (t1 - t0):.0f} MB/s, resume {n / 1e6 / (t3 - t2):.0f} MB/s")
assert c.stats().disk_backup_bytes == 0
c.close()
""")
    print(out)


@pytest.mark.parametrize("mode", MODES)
def test_rl_example(torch, daemon, mode):
    run(daemon, mode, """
import subprocess
with tms.region(tag="weights", enable_cpu_backup=True):
    w = torch.full((256 << 20,), 9, dtype=torch.uint8, device="cuda")
with tms.region(tag="kv_cache"):
    kv = torch.full((512 << 20,), 1, dtype=torch.uint8, device="cuda")
wp, kp = w.data_ptr(), kv.data_ptr()
u0 = used()
tms.pause()
freed = u0 - used()
assert freed >= (768 << 20) * 0.95, freed
# The trainer uses the memory meanwhile.
hog = torch.empty((700 << 20,), dtype=torch.uint8, device="cuda"); del hog
torch.cuda.empty_cache()
tms.resume("weights")
assert w.data_ptr() == wp and int(w[0]) == 9 and int(w[-1]) == 9
w.fill_(10)  # weights updated in place
tms.resume("kv_cache")
assert kv.data_ptr() == kp
kv.zero_()
tms.pause(); tms.resume()
assert int(w[123]) == 10
""")


@pytest.mark.parametrize("mode", MODES)
def test_nested_region(torch, daemon, mode):
    run(daemon, mode, """
with tms.region(tag="outer"):
    a = torch.full((256 << 20,), 1, dtype=torch.uint8, device="cuda")
    with tms.region(tag="inner"):
        b = torch.full((256 << 20,), 2, dtype=torch.uint8, device="cuda")
    c = torch.full((256 << 20,), 3, dtype=torch.uint8, device="cuda")
u0 = used()
tms.pause("inner")
assert u0 - used() >= (256 << 20) * 0.95
assert int(a[0]) == 1 and int(c[0]) == 3  # outer stays
tms.resume("inner")
tms.pause("outer")
assert u0 - used() >= (512 << 20) * 0.95
tms.resume("outer")
""")


def test_training_engine_whole_process_with_disable(torch, daemon):
    # A trainer started with LD_PRELOAD and TMS_INIT_ENABLE=1: everything
    # it allocates is pausable, but what disable() allocates.
    run(daemon, "preload", """
assert tms_mod._preload_lib() is not None
model = torch.full((512 << 20,), 5, dtype=torch.uint8, device="cuda")
with tms.disable():
    outside = torch.full((128 << 20,), 6, dtype=torch.uint8, device="cuda")
optim = torch.full((256 << 20,), 7, dtype=torch.uint8, device="cuda")
u0 = used()
tms.pause()
freed = u0 - used()
assert freed >= (768 << 20) * 0.95, freed
assert int(outside[0]) == 6  # disable(): not paused
tms.resume()
assert int(model[0]) == 5 and int(optim[-1]) == 7  # TMS_INIT_ENABLE_CPU_BACKUP=1
""", TMS_INIT_ENABLE="1", TMS_INIT_ENABLE_CPU_BACKUP="1")


def test_whole_process_pauses_to_its_context(torch, daemon):
    # The measure: a trainer under whole-process capture pauses to
    # within its CUDA context of zero device memory, as NVML sees the
    # device (the daemon's chunks included). A small model trains a step
    # first, so that cuBLAS's workspace and the optimizer's state exist.
    out = run(daemon, "preload", """
import ctypes
nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
h = ctypes.c_void_p()
idx = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
assert nv.nvmlDeviceGetHandleByIndex_v2(int(idx) if idx.isdigit() else 0, ctypes.byref(h)) == 0
def nvml_used():
    torch.cuda.synchronize() if torch.cuda.is_initialized() else None
    m = Mem(); assert nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) == 0
    return m.used
MiB = 1 << 20
start = nvml_used()
torch.cuda.init(); torch.cuda.synchronize()
ctx = nvml_used()
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.Adam(model.parameters())
x = torch.randn(4096, 4096, device="cuda")
loss = model(x).square().mean(); loss.backward(); opt.step()
weights = torch.full((1 << 30,), 5, dtype=torch.uint8, device="cuda")
full = nvml_used()
reserved = torch.cuda.memory_reserved()
tms.pause()
paused = nvml_used()
print(f"nvml MiB: before context {start // MiB}, context {ctx // MiB}, trained {full // MiB}, paused {paused // MiB}; torch reserved {reserved // MiB}")
tms.resume()
assert int(weights[0]) == 5 and int(weights[-1]) == 5
assert full - ctx >= reserved * 0.95, (full, ctx, reserved)
# Everything torch reserved went back; what remains above the context is
# what the context grew by (cuBLAS's and the kernels' modules), not memory
# the process allocated.
assert paused - ctx <= 256 * MiB, (paused - ctx) // MiB
""", TMS_INIT_ENABLE="1", TMS_INIT_ENABLE_CPU_BACKUP="1")
    figures = out.splitlines()[-2]
    print(figures)
    # pytest keeps a passing case's output to itself: the figures go to
    # VRAM_TEST_REPORT too, for the run's record.
    if os.environ.get("VRAM_TEST_REPORT"):
        with open(os.environ["VRAM_TEST_REPORT"], "a") as f:
            f.write("whole-process pause, " + figures + "\n")


def test_configure_subprocess_child_is_captured(torch, daemon):
    run(daemon, "torch", """
import subprocess
child = "import ctypes; ctypes.CDLL(None).vram_preload_whole_process; print('captured')"
with tms_mod.configure_subprocess():
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         env=dict(os.environ, TMS_INIT_ENABLE="1"))
assert out.stdout == "captured\\n", out.stderr
assert "LD_PRELOAD" not in os.environ or "libvram-preload" not in os.environ["LD_PRELOAD"]
""")


# ---- vLLM's allocator-level behaviours (tests/basic_correctness/test_cumem.py) --

VLLM = """
from vram.compat.vllm import CuMemAllocator
import vram
a = CuMemAllocator.get_instance()
"""


def test_vllm_basic_sleep_wake(torch, daemon):
    run(daemon, "torch", VLLM + """
with a.use_memory_pool(tag="weights"):
    w = torch.full((512 << 20,), 3, dtype=torch.uint8, device="cuda")
with a.use_memory_pool(tag="kv_cache"):
    kv = torch.full((512 << 20,), 4, dtype=torch.uint8, device="cuda")
wp = w.data_ptr()
u0 = used()
a.sleep(offload_tags=("weights",))
assert u0 - used() >= (1 << 30) * 0.95
a.wake_up()
assert w.data_ptr() == wp and int(w[0]) == 3 and int(w[-1]) == 3
kv.fill_(5); assert int(kv[-1]) == 5  # the KV cache is usable again
""")


def test_vllm_graph_replay_after_wake(torch, daemon):
    run(daemon, "torch", VLLM + """
import vram.torch as vt
with a.use_memory_pool(tag="weights"):
    x = torch.full((1 << 20,), 2.0, device="cuda")
g = torch.cuda.CUDAGraph()
with vt.cuda_graph(g, tag="cuda_graph"):
    y = x * 3
g.replay(); torch.cuda.synchronize(); ref = y.clone()
a.sleep(offload_tags=("weights",))
a.wake_up()
g.replay(); torch.cuda.synchronize()
assert torch.equal(y, ref)
""")


def test_vllm_wake_up_that_cannot_fit(torch, daemon):
    run(daemon, "torch", VLLM + """
with a.use_memory_pool(tag="weights"):
    w = torch.full((1 << 30,), 8, dtype=torch.uint8, device="cuda")
a.sleep(offload_tags=("weights",))
free, total = torch.cuda.mem_get_info()
other = vram.connect(name="trainer")
hog = other.create_pool("tms-test.hog")
hog.reserve(free - (256 << 20))
try:
    a.wake_up(["weights"])
    raise SystemExit("wake_up fitted")
except RuntimeError as e:
    assert isinstance(e.__cause__, vram.VramError)
finally:
    other.close()
a.wake_up(["weights"])
assert int(w[0]) == 8 and int(w[-1]) == 8
""")


def test_vllm_staged_wake_by_tag(torch, daemon):
    run(daemon, "torch", VLLM + """
import vram.torch as vt
with a.use_memory_pool(tag="weights"):
    w = torch.full((256 << 20,), 1, dtype=torch.uint8, device="cuda")
with a.use_memory_pool(tag="kv_cache"):
    kv = torch.empty((512 << 20,), dtype=torch.uint8, device="cuda")
a.sleep(offload_tags=("weights",))
u0 = used()
a.wake_up(tags=["weights"])
assert used() - u0 >= (256 << 20) * 0.95 and vt.is_paused("kv_cache")
assert int(w[7]) == 1
a.wake_up(tags=["kv_cache"])
assert not vt.is_paused("kv_cache")
""")


def test_vllm_level_2_keeps_no_host_copy(torch, daemon):
    run(daemon, "torch", VLLM + """
import vram.torch as vt
with a.use_memory_pool(tag="weights"):
    w = torch.full((512 << 20,), 6, dtype=torch.uint8, device="cuda")
c = vram.connect(name="check")
a.sleep(offload_tags=())
[pi] = [p for p in c.list_pools() if p.tag == "weights" and p.owner_pid == os.getpid()]
assert pi.backup_bytes == 0, pi
a.wake_up()
assert int(w[0]) == 0  # vLLM reloads the weights after a level 2 sleep
c.close()
""")
