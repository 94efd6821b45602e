# SPDX-License-Identifier: Apache-2.0
"""vramctl top, ls --watch and status --watch: under a pseudo-terminal
(python3's pty) of 20 rows by 60 columns they redraw in place, cut to the
window, show a pause as a recent transition and end on q; with stdout a
pipe they print plain frames with no escape sequence."""

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time

import vram
import vramtest
from vramtest import MiB

ROWS, COLS = 20, 60
ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG = "top." + "x" * 70  # wider than the window: its row must be cut


def _ctl():
    return os.environ.get("VRAMCTL_BIN") or os.path.join(vramtest.build_dir(), "vramctl")


class Pty:
    """vramctl on a pseudo-terminal of ROWS x COLS."""

    def __init__(self, daemon, *args):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.proc = subprocess.Popen(
            [_ctl(), "--socket", daemon.socket, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.out = b""

    def read_until(self, needle, timeout=30):
        """Reads until needle (bytes) has come, or the timeout, or EOF."""
        deadline = time.monotonic() + timeout
        while needle not in self.out and time.monotonic() < deadline:
            r, _, _ = select.select([self.master], [], [], 0.2)
            if not r:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break  # EIO: the other side closed
            if not chunk:
                break
            self.out += chunk
        return needle in self.out

    def finish(self, timeout=30):
        self.read_until(b"\x00never", timeout=0.5)
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.read_until(b"\x00never", timeout=0.2)
        os.close(self.master)
        return rc

    def frames(self):
        """The text of each redraw: escape sequences out, \\r\\n as \\n."""
        text = self.out.decode("utf-8", "replace")
        return [ESC.sub("", f).replace("\r", "") for f in text.split("\x1b[H")[1:]]


def _check_fits(frames):
    assert frames
    for f in frames:
        lines = f.rstrip("\n").split("\n")
        assert len(lines) <= ROWS, f
        for line in lines:
            assert len(line) <= COLS, repr(line)


def test_top_redraws_in_place_and_shows_a_pause(daemon):
    c = vram.connect(daemon.socket, name="topper")
    try:
        c.start_thread()
        p = c.create_pool(LONG, tag="kv_cache")
        p.alloc(2 * MiB)
        t = Pty(daemon, "top", "--interval", "100")
        try:
            assert t.read_until(LONG[:40].encode()), t.out
            assert t.read_until(b"(no change seen yet)"), t.out
            c.pause(name=LONG)
            assert t.read_until(b"active -> paused"), t.out
            os.write(t.master, b"q")
            rc = t.finish()
        finally:
            if t.proc.poll() is None:
                t.proc.kill()
                t.proc.wait()
        assert rc == 0
        out = t.out.decode("utf-8", "replace")
        assert out.startswith("\x1b[?25l")  # the cursor hidden while drawing
        assert "\x1b[?25h" in out  # and given back
        frames = t.frames()
        assert len(frames) >= 2
        _check_fits(frames)
        # The pool's row was cut at the window's edge, not wrapped.
        assert LONG not in out and LONG[: COLS - 5] in out
        last = frames[-1]
        assert "DEV" in last and "RECENT" in last and "paused" in last
        c.resume(name=LONG)
    finally:
        c.close()


def test_top_plain_lines_when_not_a_terminal(daemon):
    c = vram.connect(daemon.socket, name="topper")
    try:
        pool = c.create_pool("plain.p")
        pool.alloc(MiB)
        r = subprocess.run(
            [_ctl(), "--socket", daemon.socket, "top", "--count", "2", "--interval", "50"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        pool.close()
    finally:
        c.close()
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout
    assert r.stdout.count("RECENT") == 2
    assert r.stdout.count("plain.p") == 2


def test_ls_and_status_watch_under_a_pty(daemon):
    c = vram.connect(daemon.socket, name="watcher")
    try:
        pool = c.create_pool("watch.p", tag="weights")
        pool.alloc(MiB)
        for args, needle in (
            (("ls", "--watch", "--count", "2", "--interval", "50"), "watch.p"),
            (("status", "--watch", "--count", "2", "--interval", "50"), "sessions"),
        ):
            t = Pty(daemon, *args)
            rc = t.finish()
            assert rc == 0, t.out
            frames = t.frames()
            assert len(frames) == 2, t.out
            assert all(needle in f for f in frames)
            _check_fits(frames)
        pool.close()
    finally:
        c.close()


def test_watch_refuses_json(daemon):
    for args, word in ((("ls", "--watch"), "--watch"), (("status", "--watch"), "--watch"), (("top",), "top")):
        r = subprocess.run(
            [_ctl(), "--socket", daemon.socket, *args, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and word in r.stderr, r.stderr
