# SPDX-License-Identifier: Apache-2.0
"""Clients in other PID namespaces (containers, pods): a client started by
`unshare --pid --fork` (pid 1 in its namespace) names its instance with
VRAM_INSTANCE, creates, pauses and resumes a pool; vramctl selects that
pool by the instance name (ls, pause, resume) and by the cgroup the kernel
reports, and shows the owner as vramd's namespace sees it. Skips where
unshare cannot make a PID namespace (not root, no user namespaces)."""

import json
import os
import shutil
import subprocess

import pytest

import vramtest

CHILD = r"""
import ctypes, os, random, sys
import vram
c = vram.connect(name="engine")
c.start_thread()
w = c.create_pool("pod.w", tag="weights", backup=True)
ptr = w.alloc(4 << 20)
data = random.Random(3).randbytes(4 << 20)
ctypes.memmove(ptr, data, len(data))
# Its own pause and resume, from inside the namespace.
assert w.pause().pools == 1
assert w.resume().pools == 1
assert ctypes.string_at(ptr, len(data)) == data
print("ready", os.getpid(), flush=True)
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


def _ctl(daemon, *args):
    bin = os.environ.get("VRAMCTL_BIN") or os.path.join(vramtest.build_dir(), "vramctl")
    r = subprocess.run(
        [bin, "--socket", daemon.socket, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return r.returncode, r.stdout + r.stderr


def _unshare_works():
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(
        ["unshare", "--pid", "--fork", "sh", "-c", "echo $$"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return r.returncode == 0 and r.stdout.strip() == "1"


def _own_cgroup():
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def test_client_in_its_own_pid_namespace(daemon):
    if not _unshare_works():
        pytest.skip("unshare --pid --fork is not allowed here")
    env = vramtest.child_env(daemon, VRAM_INSTANCE="pod-a")
    import sys

    child = subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-u", "-c", CHILD],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    try:
        line = child.stdout.readline().split()
        assert line and line[0] == "ready", child.stderr.read()
        assert line[1] == "1"  # pid 1 in its own namespace

        rc, out = _ctl(daemon, "ls", "--owner", "pod-a", "--json")
        assert rc == 0, out
        pools = json.loads(out)
        assert [p["name"] for p in pools] == ["pod.w"]
        p = pools[0]
        assert p["owner_instance"] == "pod-a"
        # vramd sees the pid of its own namespace, not the client's 1.
        owner = p["owner_pid"]
        assert owner not in (0, 1)
        with open(f"/proc/{owner}/status") as f:
            nspid = [ln.split()[1:] for ln in f if ln.startswith("NSpid:")][0]
        assert nspid[0] == str(owner) and nspid[-1] == "1"
        # The table shows pid/name@instance.
        rc, out = _ctl(daemon, "ls")
        assert rc == 0 and f"{owner}/engine@pod-a" in out, out
        # Another instance name selects nothing.
        rc, out = _ctl(daemon, "ls", "--owner", "pod-b")
        assert rc == 4, out

        rc, out = _ctl(daemon, "pause", "--owner", "pod-a")
        assert rc == 0, out
        child.stdin.write("state\n")
        assert child.stdout.readline().strip() == "paused"
        rc, out = _ctl(daemon, "resume", "--owner", "pod-a")
        assert rc == 0, out
        child.stdin.write("check\n")
        assert child.stdout.readline().strip() == "ok"

        # The kernel's word: the owner's cgroup selects it too.
        cg = p["owner_cgroup"]
        with open(f"/proc/{owner}/cgroup") as f:
            v2 = [ln[3:].strip() for ln in f if ln.startswith("0::")]
        if v2:
            assert cg == v2[0]
            rc, out = _ctl(daemon, "ls", "--owner", cg, "--json")
            assert rc == 0 and [q["name"] for q in json.loads(out)] == ["pod.w"], out
            rc, out = _ctl(daemon, "ls", "--owner", cg.rstrip("/") + "/nope")
            assert rc == 4, out

        child.stdin.write("exit\n")
        child.stdin.flush()
        assert child.wait(20) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_instance_name_is_checked(daemon):
    r = vramtest.run_python(
        "import vram\n"
        "try:\n"
        "    vram.connect(name='x')\n"
        "except vram.VramError as e:\n"
        "    print(e.errno)\n",
        daemon,
        VRAM_INSTANCE="/not-a-name",
    )
    assert r.stdout.strip() == "22", r.stdout + r.stderr


def test_own_cgroup_shown(daemon, client):
    pool = client.create_pool("here.p")
    pool.alloc(1 << 20)
    info = [p for p in client.list_pools() if p.name == "here.p"][0]
    cg = _own_cgroup()
    if cg is not None:
        assert info.owner_cgroup == cg
    assert info.owner_instance == ""
    pool.close()
