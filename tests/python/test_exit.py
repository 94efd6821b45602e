# SPDX-License-Identifier: Apache-2.0
"""Interpreter exit with libvram handles in every state: the process exits
0 and prints nothing. Each case runs a fresh python3 against vramd on the
host backend."""

import signal

import pytest

import vram
from vramtest import MiB, run_python, spawn_python

PRELUDE = r"""
import ctypes, os, sys, threading
import vram
from vram import _lib
c = vram.connect(name="exit-test")
kv = c.create_pool("exit.kv", tag="kv_cache")
w = c.create_pool("exit.w", tag="weights", backup=True)
a = kv.alloc(8 << 20)
b = w.alloc(8 << 20)
ctypes.memset(b, 7, 8 << 20)
"""


def _clean(r):
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.stderr == "", r.stderr


def test_exit_with_pools_alive(daemon):
    r = run_python(PRELUDE, daemon)
    _clean(r)
    with vram.connect(daemon.socket) as c:
        assert c.list_pools() == []  # the daemon saw the session end


def test_exit_with_pools_paused(daemon):
    r = run_python(PRELUDE + "c.pause(owner_pid=os.getpid(), all=True)\n", daemon)
    _clean(r)


def test_exit_with_event_thread_and_pools_in_globals_and_cycles(daemon):
    code = PRELUDE + (
        "c.start_thread()\n"
        "class Holder: pass\n"
        "h = Holder(); h.me = h; h.pools = [kv, w]; h.client = c\n"
        "vram.default_client().create_pool('exit.default')\n"
        "keep = vram.default_client().create_pool('exit.default2')\n"
        "keep.alloc(1 << 20)\n"
    )
    _clean(run_python(code, daemon))


def test_exit_after_explicit_closes_in_any_order(daemon):
    code = PRELUDE + "c.close()\nkv.close()\nw.close()\nc.close()\n"
    _clean(run_python(code, daemon))


def test_exit_after_the_daemon_died(daemon):
    """The daemon is SIGKILLed while the client has pools mapped, paused
    and an event thread: calls fail with EPIPE, memory stays valid, and the
    exit is clean."""
    code = PRELUDE + (
        "c.start_thread()\n"
        "w.pause()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "ctypes.memset(a, 1, 4096)  # still mapped\n"
        "try:\n"
        "    c.ping()\n"
        "except vram.VramError as e:\n"
        "    print('errno', e.errno, flush=True)\n"
        "try:\n"
        "    w.resume()\n"
        "except vram.VramError as e:\n"
        "    print('errno', e.errno, flush=True)\n"
    )
    child = spawn_python(code, daemon)
    try:
        assert child.stdout.readline().strip() == "ready"
        daemon.kill(signal.SIGKILL)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert err == ""
    assert out.split("\n")[:2] == ["errno 32", "errno 32"]


def test_exit_after_the_daemon_died_unnoticed(daemon):
    code = PRELUDE + (
        "c.start_thread()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    child = spawn_python(code, daemon)
    try:
        assert child.stdout.readline().strip() == "ready"
        daemon.kill(signal.SIGKILL)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0 and err == ""


def test_exit_with_a_log_handler_installed(daemon):
    """libvram logs while it closes at exit, after the interpreter: the
    Python handler must be gone by then."""
    code = PRELUDE + (
        "vram.set_log_handler(lambda lvl, m: sys.stderr.write(m + '\\n'), 'debug')\n"
        "p = c.create_pool('exit.logged')\n"
        "sys.stderr.write('END\\n')\n"
    )
    r = run_python(code, daemon)
    assert r.returncode == 0, r.stderr
    assert r.stderr.endswith("END\n"), r.stderr


@pytest.mark.skipif(not vram._lib.has("vram_torch_malloc"), reason="no torch entry points")
def test_exit_with_torch_pools_pushed_and_allocated(daemon):
    """What vram.torch leaves at exit: a pushed pool, allocations PyTorch
    never freed, a default pool; and frees that come after the pools were
    closed (as PyTorch's own teardown may do)."""
    code = PRELUDE + (
        "lib = _lib.lib\n"
        "assert lib.vram_torch_push_pool(kv._handle()) == 0\n"
        "assert lib.vram_torch_set_default_pool(w._handle()) == 0\n"
        "ptrs = [lib.vram_torch_malloc(1 << 20, 0, None) for _ in range(4)]\n"
        "assert all(ptrs)\n"
        "import atexit\n"
        "def late_free():\n"
        "    for p in ptrs: lib.vram_torch_free(p, 1 << 20, 0, None)\n"
        "atexit.register(late_free)\n"
        "c.close()  # pools closed before torch's frees\n"
    )
    _clean(run_python(code, daemon))


def test_exit_from_a_thread_blocked_in_a_call(daemon):
    """A daemon thread is inside a libvram call (a dispatch waiting for
    events) when the interpreter exits."""
    code = PRELUDE + (
        "t = threading.Thread(target=lambda: c.dispatch(-1), daemon=True)\n"
        "t.start()\n"
        "import time; time.sleep(0.2)\n"
    )
    _clean(run_python(code, daemon))


def test_child_after_fork_exits_cleanly(daemon):
    """A forked child cannot use the parent's session: calls fail with
    EPIPE; the default client reconnects; both exit cleanly."""
    code = PRELUDE + (
        "d = vram.default_client()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        c.ping()\n"
        "        os._exit(3)\n"
        "    except vram.VramError as e:\n"
        "        assert e.errno == 32, e\n"
        "    assert vram.default_client() is not d\n"
        "    vram.default_client().ping()\n"
        "    sys.exit(0)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "assert st == 0, st\n"
        "c.ping()\n"
    )
    _clean(run_python(code, daemon))
