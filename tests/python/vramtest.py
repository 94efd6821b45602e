# SPDX-License-Identifier: Apache-2.0
"""Helpers for the Python tests: a real vramd on a temporary socket (as
tests/harness/harness.c starts one), and child Python processes.

A daemon is started as

    $VRAMD_BIN --socket DIR/vramd.sock --backend BACKEND --log-level debug
               [--host-capacity SIZE --host-devices N]

and is ready once its socket accepts a connection. It dies with the test
process (PR_SET_PDEATHSIG), and the test runner kills the case's process
group anyway.
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "python")
MiB = 1 << 20
GiB = 1 << 30


def build_dir():
    return os.environ.get("VRAM_BUILD") or os.path.join(ROOT, "build")


def vramd_bin():
    return os.environ.get("VRAMD_BIN") or os.path.join(build_dir(), "vramd")


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: SIGKILL when the test process goes.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


class Daemon:
    """One vramd. stop() expects a clean exit; kill() simulates a crash."""

    def __init__(self, backend="host", capacity="256M", devices=2, extra=()):
        self.dir = tempfile.mkdtemp(prefix="vramd-py-")
        self.socket = os.path.join(self.dir, "vramd.sock")
        self.log_path = os.path.join(self.dir, "vramd.log")
        self.backend = backend
        args = [
            vramd_bin(),
            "--socket",
            self.socket,
            "--backend",
            backend,
            "--log-level",
            "debug",
        ]
        if backend == "host":
            args += ["--host-capacity", capacity, "--host-devices", str(devices)]
        args += list(extra)
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )
        self._wait_ready(10.0)

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._cleanup()
                raise RuntimeError(
                    f"vramd exited with {self.proc.returncode} before it was ready:\n{self.log()}"
                )
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                return
            except OSError:
                time.sleep(0.01)
            finally:
                s.close()
        self.kill()
        self._cleanup()
        raise RuntimeError(f"vramd was not ready within {timeout} s:\n{self.log()}")

    def log(self):
        # After stop() the folder is gone: the tail read then is kept.
        if getattr(self, "_final_log", None) is not None:
            return self._final_log
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-65536:].decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def alive(self):
        return self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def stop(self):
        """SIGTERM, wait; returns the exit status (-N: killed by N)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()
        return self.proc.returncode

    def _cleanup(self):
        try:
            self._log.close()
        except Exception:
            pass
        self._final_log = None
        self._final_log = self.log()
        shutil.rmtree(self.dir, ignore_errors=True)


def child_env(daemon=None, **extra):
    env = dict(os.environ)
    pp = env.get("PYTHONPATH", "")
    if PKG not in pp.split(os.pathsep):
        env["PYTHONPATH"] = PKG + (os.pathsep + pp if pp else "")
    env.setdefault("VRAM_BUILD", build_dir())
    if daemon is not None:
        env["VRAM_SOCKET"] = daemon.socket
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(code, daemon=None, timeout=60, **env):
    """Runs code in a fresh python3; returns the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(daemon, **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spawn_python(code, daemon=None, **env):
    """Starts code in a fresh python3 with pipes to its stdin and stdout
    (text, line-buffered); the caller talks to it line by line."""
    return subprocess.Popen(
        [sys.executable, "-u", "-c", code],
        env=child_env(daemon, **env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def pattern(n, seed):
    """n reproducible bytes."""
    import random

    return random.Random(seed).randbytes(n)


def count_fds():
    return len(os.listdir("/proc/self/fd")) - 1


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
