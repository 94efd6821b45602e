# SPDX-License-Identifier: Apache-2.0
"""tools/fleet-pause against several vramds on this machine standing in for
the nodes of a job (host backend, a socket each): a tag paused and resumed
on every node, and all or nothing when a node fails (it is named with its
reason, and the others are resumed again)."""

import ctypes
import json
import os
import re
import subprocess
import sys

import pytest

import vramtest
from vramtest import MiB

vram = pytest.importorskip("vram")

TOOL = os.path.join(vramtest.ROOT, "tools", "fleet-pause")
NODES = 3


def _vramctl():
    return os.environ.get("VRAMCTL_BIN") or os.path.join(vramtest.build_dir(), "vramctl")


class Node:
    """A vramd and an engine-like client on it: a KV cache (discard) and
    weights (host policy) whose content is checked after a cycle."""

    def __init__(self, i, answer=True):
        self.name = f"node{i}"
        self.daemon = vramtest.Daemon(capacity="128M", devices=1)
        self.client = vram.connect(self.daemon.socket, name=f"engine{i}")
        if answer:
            # libvram's event thread acknowledges pauses; without it this
            # client never does, as an engine stuck in a kernel.
            self.client.start_thread()
        self.kv = self.client.create_pool(f"{self.name}.kv", tag="kv_cache", reserve_bytes=16 * MiB)
        self.kv.alloc(4 * MiB)
        self.w = self.client.create_pool(f"{self.name}.w", tag="weights", backup=True, reserve_bytes=16 * MiB)
        self.ptr = self.w.alloc(2 * MiB)
        self.data = vramtest.pattern(2 * MiB, i + 1)
        ctypes.memmove(self.ptr, self.data, len(self.data))

    def states(self):
        with vram.connect(self.daemon.socket, name="check") as c:
            return {p.tag: p.state for p in c.list_pools()}

    def close(self):
        try:
            self.client.close()
        finally:
            rc = self.daemon.stop()
        return rc


@pytest.fixture
def nodes():
    made = []
    try:
        for i in range(NODES):
            made.append(Node(i))
        yield made
    finally:
        for n in made:
            n.close()


def fleet(nodes_, verb, *extra, sockets=None):
    args = [sys.executable, TOOL, verb, "--json"] + list(extra)
    for n in nodes_:
        args += ["--node", f"{n.name}={n.daemon.socket}"]
    for name, sock in sockets or ():
        args += ["--node", f"{name}={sock}"]
    r = subprocess.run(
        args,
        env=vramtest.child_env(VRAMCTL=_vramctl()),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stderr == "", r.stderr
    return r.returncode, json.loads(r.stdout)


def test_pause_and_resume_a_tag_on_every_node(nodes):
    rc, rep = fleet(nodes, "pause", "--tag", "kv_cache")
    assert rc == 0 and rep["ok"], rep
    assert [r["node"] for r in rep["nodes"]] == [n.name for n in nodes]
    for r in rep["nodes"]:
        assert r["pools"] == 1 and r["bytes"] >= 4 * MiB, r
    for n in nodes:
        assert n.states() == {"kv_cache": vram.State.PAUSED, "weights": vram.State.ACTIVE}

    # Again: every node is already there, which is success.
    rc, rep = fleet(nodes, "pause", "--tag", "kv_cache")
    assert rc == 0 and all(r["already"] for r in rep["nodes"]), rep

    rc, rep = fleet(nodes, "pause", "--tag", "weights")
    assert rc == 0, rep
    rc, rep = fleet(nodes, "resume", "--tag", "weights")
    assert rc == 0, rep
    rc, rep = fleet(nodes, "resume", "--tag", "kv_cache")
    assert rc == 0, rep
    for n in nodes:
        assert n.states() == {"kv_cache": vram.State.ACTIVE, "weights": vram.State.ACTIVE}
        assert ctypes.string_at(n.ptr, len(n.data)) == n.data


def test_a_node_that_is_down_undoes_the_pause(nodes, tmp_path):
    dead = str(tmp_path / "vramd.sock")  # no vramd there
    rc, rep = fleet(nodes, "pause", "--tag", "kv_cache", sockets=[("node-down", dead)])
    assert rc == 1 and not rep["ok"], rep
    assert rep["failed"] == ["node-down"]
    bad = [r for r in rep["nodes"] if r["node"] == "node-down"][0]
    assert bad["exit_code"] == 3 and "cannot connect" in bad["reason"], bad
    assert sorted(rep["rolled_back"]) == sorted(n.name for n in nodes)
    assert rep["rollback_failed"] == []
    for n in nodes:
        assert n.states()["kv_cache"] == vram.State.ACTIVE


def test_a_node_without_the_tag_undoes_the_pause(nodes):
    # weights exist everywhere; "kv_cache" is dropped on one node.
    nodes[1].kv.close()
    rc, rep = fleet(nodes, "pause", "--tag", "kv_cache")
    assert rc == 1 and rep["failed"] == ["node1"], rep
    assert "vramctl exit 4" in rep["nodes"][1]["reason"]
    assert sorted(rep["rolled_back"]) == ["node0", "node2"]
    assert nodes[0].states()["kv_cache"] == vram.State.ACTIVE
    assert nodes[2].states()["kv_cache"] == vram.State.ACTIVE


def test_a_node_that_does_not_acknowledge_is_named():
    made = []
    try:
        made = [Node(0), Node(1, answer=False), Node(2)]
        rc, rep = fleet(made, "pause", "--tag", "kv_cache", "--timeout", "300")
        assert rc == 1 and rep["failed"] == ["node1"], rep
        bad = rep["nodes"][1]
        assert bad["exit_code"] == 5 and "ETIMEDOUT" in bad["reason"], bad
        assert str(os.getpid()) in bad["reason"], bad  # the pid that did not answer
        assert sorted(rep["rolled_back"]) == ["node0", "node2"]
        assert made[0].states()["kv_cache"] == vram.State.ACTIVE
        assert made[2].states()["kv_cache"] == vram.State.ACTIVE
        # Nothing is released behind the silent engine's back.
        assert made[1].states()["kv_cache"] == vram.State.PAUSING
    finally:
        for n in made:
            n.close()


def test_text_report_and_usage(nodes, tmp_path):
    args = [sys.executable, TOOL, "pause", "--tag", "kv_cache"]
    for n in nodes:
        args += ["--node", f"{n.name}={n.daemon.socket}"]
    args += ["--node", f"gone={tmp_path / 'x.sock'}"]
    env = vramtest.child_env(VRAMCTL=_vramctl())
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "gone: FAILED: ENOENT" in r.stdout, r.stdout
    assert re.search(r"^node0: ok: 1 pool paused, [0-9.]+[KMG]; resumed again$", r.stdout, re.M), r.stdout
    assert "pause: failed on gone; resumed again: node0, node1, node2" in r.stdout, r.stdout
    for bad in ([], ["--tag", "x"], ["--tag", "x", "--pool", "y", "--node", "a=b"],
                ["--tag", "x", "--node", "a=b", "--node", "a=c"], ["--tag", "x", "--node", "nosep"]):
        r = subprocess.run([sys.executable, TOOL, "pause"] + bad, env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (bad, r.stdout, r.stderr)


def test_nodes_from_a_file_and_from_kubectl(nodes, tmp_path):
    """--nodes FILE, and --k8s-*: the pods kubectl lists, reached through
    kubectl exec. There is no cluster here: kubectl is a stand-in script
    that lists one Running pod per node (and a Pending one, skipped) and
    runs `exec POD -c vramd -- vramctl ARGS` as vramctl on that node's
    socket, which checks the commands the tool builds."""
    spec = tmp_path / "nodes.json"
    spec.write_text(json.dumps([{"name": n.name, "command": [_vramctl(), "--socket", n.daemon.socket]} for n in nodes]))
    args = [sys.executable, TOOL, "pause", "--tag", "kv_cache", "--json", "--nodes", str(spec)]
    env = vramtest.child_env(VRAMCTL=_vramctl())
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [x["node"] for x in json.loads(r.stdout)["nodes"]] == [n.name for n in nodes]

    pods = {f"vramd-{i}": n for i, n in enumerate(nodes)}
    listing = {"items": [
        {"metadata": {"name": p}, "spec": {"nodeName": f"gpu-{n.name}"}, "status": {"phase": "Running"}}
        for p, n in pods.items()
    ] + [{"metadata": {"name": "vramd-new"}, "spec": {"nodeName": "gpu-new"}, "status": {"phase": "Pending"}}]}
    (tmp_path / "pods.json").write_text(json.dumps(listing))
    (tmp_path / "sockets.json").write_text(json.dumps({p: n.daemon.socket for p, n in pods.items()}))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    kubectl = bindir / "kubectl"
    kubectl.write_text(f"""#!{sys.executable}
import json, os, sys
a = sys.argv[1:]
here = {str(tmp_path)!r}
if a == ["get", "pods", "-n", "vramd", "-l", "app.kubernetes.io/name=vramd", "-o", "json"]:
    sys.stdout.write(open(os.path.join(here, "pods.json")).read())
    sys.exit(0)
if a[:3] == ["exec", "-n", "vramd"] and a[4:8] == ["-c", "vramd", "--", "vramctl"]:
    sock = json.load(open(os.path.join(here, "sockets.json")))[a[3]]
    os.execv(os.environ["VRAMCTL"], ["vramctl", "--socket", sock] + a[8:])
sys.stderr.write("unexpected kubectl call: %r\\n" % a)
sys.exit(1)
""")
    kubectl.chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    args = [sys.executable, TOOL, "resume", "--tag", "kv_cache", "--json",
            "--k8s-namespace", "vramd", "--k8s-selector", "app.kubernetes.io/name=vramd"]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert [x["node"] for x in rep["nodes"]] == [f"gpu-{n.name}" for n in nodes]
    assert all(x["pools"] == 1 for x in rep["nodes"]), rep
    for n in nodes:
        assert n.states()["kv_cache"] == vram.State.ACTIVE


def test_a_node_that_fails_part_way_is_put_back_as_far_as_it_goes():
    """On node1 the tag selects two pools: one answered, one whose owner
    never acknowledges. The pause fails there part way (one pool paused);
    the rollback resumes that pool and the other nodes, cannot resume the
    one still PAUSING (EBUSY), and says the job is half paused (exit 3)."""
    made = []
    silent = None
    try:
        made = [Node(0), Node(1), Node(2)]
        silent = vram.connect(made[1].daemon.socket, name="silent")
        stuck = silent.create_pool("node1.kv.silent", tag="kv_cache", reserve_bytes=16 * MiB)
        stuck.alloc(MiB)
        rc, rep = fleet(made, "pause", "--tag", "kv_cache", "--timeout", "300")
        assert rc == 3, rep
        assert rep["failed"] == ["node1"], rep
        assert rep["nodes"][1]["pools"] == 1 and "ETIMEDOUT" in rep["nodes"][1]["reason"]
        assert sorted(rep["rolled_back"]) == ["node0", "node2"]
        assert rep["rollback_failed"] == ["node1"]
        assert "EBUSY" in rep["nodes"][1]["rollback"]["reason"], rep["nodes"][1]
        with vram.connect(made[1].daemon.socket, name="check") as c:
            states = {p.name: p.state for p in c.list_pools()}
        assert states["node1.kv"] == vram.State.ACTIVE
        assert states["node1.kv.silent"] == vram.State.PAUSING
        for n in (made[0], made[2]):
            assert n.states()["kv_cache"] == vram.State.ACTIVE
    finally:
        if silent is not None:
            silent.close()
        for n in made:
            n.close()
