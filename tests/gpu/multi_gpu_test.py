#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Several GPUs behind one vramd (make test-gpu): one PyTorch rank per GPU,
each a process with its own CUDA_VISIBLE_DEVICES, registered under one job
(VRAM_JOB), NCCL between them, as RL jobs run their engines. Each rank
keeps weights (tag weights, host backup), a KV cache (tag kv_cache) and a
captured CUDA graph (tag cuda_graph) in vramd pools. Checked: an all-reduce
before and after a gang pause and resume of the job gives the right sum;
every rank's pools pause and resume together and on that rank's own device
(by UUID); each device gets back what its rank pooled; graphs replay bit for
bit; a rank that never acks undoes the gang and is named.

Uses every GPU the machine has; every case skips with fewer than two, or
without PyTorch (VRAM_TEST_MIN_GPUS=1 runs them with one rank, a smoke run
of the script only). Run through tests/runner, as make test-gpu does:

    build/tests/runner tests/gpu/multi_gpu_test.py
"""

import os
import socket
import subprocess
import sys
import time

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
from vramtest import MiB  # noqa: E402

JOB = "gpu-gang"

# One rank: NCCL, a small model's weights, a KV cache and a graph in vramd
# pools; answers "check" (graph, weights, a second all-reduce) and "exit".
RANK = r"""
import os, sys, torch, torch.distributed as dist
import vram.torch as vt
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(0)  # its only visible device
dist.init_process_group("nccl", rank=rank, world_size=world)

def allreduce_ok():
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    return bool((x == world * (world + 1) / 2).all())

ok0 = allreduce_ok()
torch.manual_seed(rank)
with vt.region("weights", backup=True):
    w = [torch.randn(2048, 2048, device="cuda") for _ in range(16)]
with vt.region("kv_cache"):
    kv = torch.zeros(64 << 20, device="cuda")
x = torch.randn(64, 2048, device="cuda")
def step():
    y = x
    for m in w:
        y = torch.tanh(y @ m)
    kv[: y.numel()].copy_(y.flatten())
    return y
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with vt.cuda_graph(g, tag="cuda_graph"):
    out = step()
g.replay(); torch.cuda.synchronize()
ref = out.cpu().clone()
wcopy = [m.cpu().clone() for m in w]
uuid = str(torch.cuda.get_device_properties(0).uuid)
print("ready", 1 if ok0 else 0, uuid, flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "check":
        g.replay(); torch.cuda.synchronize()
        same = torch.equal(out.cpu(), ref)
        intact = all(torch.equal(m.cpu(), c) for m, c in zip(w, wcopy))
        print("ok" if same and intact and allreduce_ok() else "bad", flush=True)
    elif cmd == "exit":
        break
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ngpus():
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # VRAM_TEST_MIN_GPUS=1 runs the cases with one rank, to check the rank
    # script and the plumbing on a one-GPU machine (it proves nothing about
    # several GPUs).
    need = int(os.environ.get("VRAM_TEST_MIN_GPUS", "2"))
    if n < max(need, 1):
        pytest.skip(f"needs at least {max(need, 1)} GPUs, this machine has {n}")
    return n


@pytest.fixture(scope="module")
def daemon(ngpus):
    env_cvd = os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # it sees all
    d = vramtest.Daemon(backend="cuda", extra=["--ack-timeout-ms", "60000"])
    if env_cvd is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = env_cvd
    try:
        yield d
    finally:
        killed = not d.alive
        rc = d.stop()
        if not killed and rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(daemon, n):
    port = _free_port()
    ranks = []
    for r in range(n):
        p = subprocess.Popen(
            [sys.executable, "-u", "-c", RANK],
            env=vramtest.child_env(
                daemon,
                RANK=r,
                WORLD_SIZE=n,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                CUDA_VISIBLE_DEVICES=r,
                VRAM_JOB=JOB,
                VRAM_INSTANCE=f"rank-{r}",
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        ranks.append(p)
    uuids = []
    for p in ranks:
        w = p.stdout.readline().split()
        assert w[:2] == ["ready", "1"], w  # the first all-reduce was right
        uuids.append(w[2])
    return ranks, uuids


def _stop(ranks):
    for p in ranks:
        if p.poll() is None:
            p.stdin.write("exit\n")
            p.stdin.flush()
    for p in ranks:
        try:
            assert p.wait(120) == 0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_gang_cycle_every_gpu(daemon, ngpus):
    import vram

    ranks, uuids = _ranks(daemon, ngpus)
    try:
        with vram.connect(daemon.socket, name="controller") as c:
            pools = c.list_pools()
            mine = [p for p in pools if p.owner_job == JOB]
            assert {p.tag for p in mine} >= {"weights", "kv_cache", "cuda_graph"}
            for p in mine:
                r = int(p.owner_instance.split("-")[1])
                assert p.device == r, (p.name, p.device, r)
                # torch's uuid has no GPU- prefix
                assert p.device_uuid.endswith(uuids[r]), (p.device_uuid, uuids[r])
            pooled = [0] * ngpus
            for p in mine:
                pooled[p.device] += p.bytes
            for cycle in range(3):
                rep = c.gang_pause(job=JOB, timeout_ms=60000)
                assert rep.failure is None and rep.pools == len(mine)
                assert all(
                    p.state == vram.State.PAUSED
                    for p in c.list_pools()
                    if p.owner_job == JOB
                )
                for d in rep.devices[:ngpus]:
                    freed = d.free_after - d.free_before
                    assert freed >= 0.95 * pooled[d.index], (cycle, d, pooled)
                rep = c.gang_resume(job=JOB, timeout_ms=60000)
                assert rep.failure is None and rep.pools == len(mine)
                for p in ranks:
                    p.stdin.write("check\n")
                for p in ranks:
                    assert p.stdout.readline().strip() == "ok", cycle
    finally:
        _stop(ranks)


def test_gang_late_rank_undoes_it(daemon, ngpus):
    import signal

    import vram

    ranks, _ = _ranks(daemon, ngpus)
    late = ranks[-1]
    try:
        late.send_signal(signal.SIGSTOP)  # it cannot ack
        with vram.connect(daemon.socket, name="controller") as c:
            with pytest.raises(vram.VramError) as ei:
                c.gang_pause(job=JOB, tag="weights", timeout_ms=5000)
            f = ei.value.report.failure
            assert f is not None and f.pid == late.pid and f.device == ngpus - 1
            assert ei.value.report.rolled_back == ngpus - 1
            late.send_signal(signal.SIGCONT)
            # Its own pool completes the pause with the late ack (it was
            # left as the deadline found it); then it is resumed alone.
            for _ in range(600):
                st = c.list_pools(name=f.pool)[0].state
                if st != vram.State.PAUSING:
                    break
                time.sleep(0.1)
            if st == vram.State.PAUSED:
                c.resume(name=f.pool, timeout_ms=60000)
        for p in ranks:
            p.stdin.write("check\n")
        for p in ranks:
            assert p.stdout.readline().strip() == "ok"
    finally:
        try:
            late.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
        _stop(ranks)
