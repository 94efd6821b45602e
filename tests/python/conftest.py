# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python tests: a vramd on the host backend per test."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vramtest  # noqa: E402


@pytest.fixture
def daemon(monkeypatch):
    """A vramd (host backend, two devices of 256 MiB) for this test; its socket
    is $VRAM_SOCKET. It must exit cleanly at the end unless the test killed
    it."""
    d = vramtest.Daemon()
    monkeypatch.setenv("VRAM_SOCKET", d.socket)
    try:
        yield d
    finally:
        killed = not d.alive
        rc = d.stop()
        if not killed and rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


@pytest.fixture
def client(daemon):
    import vram

    c = vram.connect(daemon.socket, name="pytest")
    try:
        yield c
    finally:
        c.close()
