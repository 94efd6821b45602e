# SPDX-License-Identifier: Apache-2.0
"""Gang pause and resume from Python: one process per rank, each with its
pool on its own device of the host backend, registered under one job
(VRAM_JOB); a rank that never acks undoes the gang and is named."""

import vram
from vramtest import spawn_python

RANK_SCRIPT = r"""
import ctypes, os, sys, random
import vram
rank = int(os.environ["RANK"])
c = vram.connect(name=f"rank{rank}")
if os.environ.get("ACK", "1") == "1":
    c.start_thread()
w = c.create_pool(f"py.rank{rank}.w", tag="weights", device=rank, backup=True,
                  reserve_bytes=4 << 20)
ptr = w.alloc(1 << 20)
data = random.Random(rank).randbytes(1 << 20)
ctypes.memmove(ptr, data, len(data))
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "check":
        print("ok" if ctypes.string_at(ptr, len(data)) == data else "bad", flush=True)
    elif cmd == "exit":
        break
c.close()
"""


def _ranks(daemon, acks):
    ranks = []
    for i, ack in enumerate(acks):
        p = spawn_python(
            RANK_SCRIPT, daemon, RANK=i, ACK=int(ack), VRAM_JOB="pyjob",
            VRAM_INSTANCE=f"rank-{i}"
        )
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        ranks.append(p)
    return ranks


def _end(ranks, check):
    for i, p in enumerate(ranks):
        if check[i]:
            p.stdin.write("check\n")
            assert p.stdout.readline().strip() == "ok"
        p.stdin.write("exit\n")
        p.stdin.flush()
        assert p.wait(20) == 0


def test_gang_cycle_by_job(daemon, client):
    ranks = _ranks(daemon, [True, True])
    try:
        rep = client.gang_pause(tag="weights", job="pyjob", timeout_ms=10000)
        assert rep.pools == 2 and rep.failure is None and rep.rolled_back == 0
        assert [d.index for d in rep.devices] == [0, 1]
        for d in rep.devices:
            assert d.uuid and d.free_after > d.free_before
        infos = client.list_pools(tag="weights")
        assert {i.owner_job for i in infos} == {"pyjob"}
        assert all(i.state == vram.State.PAUSED and i.device_uuid for i in infos)
        rep = client.gang_resume(
            tag="weights", owner_pids=[p.pid for p in ranks], timeout_ms=10000
        )
        assert rep.pools == 2
        _end(ranks, [True, True])
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_gang_late_rank_is_named(daemon, client):
    ranks = _ranks(daemon, [True, False])
    try:
        try:
            client.gang_pause(tag="weights", job="pyjob", timeout_ms=3000)
            raise AssertionError("the gang pause should have failed")
        except vram.VramError as e:
            f = e.report.failure
            assert f is not None
            assert (f.pid, f.instance, f.device) == (ranks[1].pid, "rank-1", 1)
            assert e.report.rolled_back == 1
        info = client.list_pools(name="py.rank0.w")[0]
        assert info.state == vram.State.ACTIVE
        _end(ranks, [True, False])
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
