# SPDX-License-Identifier: Apache-2.0
"""vramd's metrics (docs/metrics.md) on the host backend: the exposition
served on the loopback address after a pause and a resume, checked by
promtool and by its own families and values, the textfile, /healthz, and a
real Prometheus (Debian's prometheus package) scraping the daemon and
answering queries of the new counters and histogram buckets. The cases that
need promtool or prometheus skip without them."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

import vram
import vramtest
from vramtest import MiB

# Every family docs/metrics.md names, with its type (vramd_fdstore_max is
# absent without $FDSTORE, so the daemon is started with one).
FAMILIES = {
    "vramd_build_info": "gauge",
    "vramd_start_time_seconds": "gauge",
    "vramd_sessions": "gauge",
    "vramd_sessions_max": "gauge",
    "vramd_sessions_opened_total": "counter",
    "vramd_sessions_refused_total": "counter",
    "vramd_open_fds": "gauge",
    "vramd_fd_limit": "gauge",
    "vramd_fdstore_fds": "gauge",
    "vramd_fdstore_max": "gauge",
    "vramd_device_info": "gauge",
    "vramd_device_total_bytes": "gauge",
    "vramd_device_free_bytes": "gauge",
    "vramd_device_used_bytes": "gauge",
    "vramd_device_granularity_bytes": "gauge",
    "vramd_pools": "gauge",
    "vramd_pool_bytes": "gauge",
    "vramd_pool_reserved_bytes": "gauge",
    "vramd_pool_chunks": "gauge",
    "vramd_pools_orphaned": "gauge",
    "vramd_mappers": "gauge",
    "vramd_backup_bytes": "gauge",
    "vramd_pauses_total": "counter",
    "vramd_resumes_total": "counter",
    "vramd_pause_failures_total": "counter",
    "vramd_resume_failures_total": "counter",
    "vramd_pause_duration_seconds": "histogram",
    "vramd_resume_duration_seconds": "histogram",
    "vramd_ack_timeouts_total": "counter",
    "vramd_backup_copied_bytes_total": "counter",
    "vramd_pause_expected_bytes_total": "counter",
    "vramd_pause_freed_bytes_total": "counter",
    "vramd_pause_shortfalls_total": "counter",
    "vramd_last_pause_expected_bytes": "gauge",
    "vramd_last_pause_freed_bytes": "gauge",
    "vramd_last_pause_shortfall_bytes": "gauge",
    "vramd_last_pause_timestamp_seconds": "gauge",
    "vramd_audit_available": "gauge",
    "vramd_audit_timestamp_seconds": "gauge",
    "vramd_process_outside_bytes": "gauge",
    "vramd_process_vramd_bytes": "gauge",
}

SAMPLE = os.path.join(vramtest.ROOT, "tests", "data", "metrics-sample.prom")


def _port(d):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"serving metrics on \S+ \(port (\d+)\)", d.log())
        if m:
            return int(m.group(1))
        time.sleep(0.01)
    raise AssertionError("no metrics port in the log:\n" + d.log())


@pytest.fixture
def mdaemon(monkeypatch, tmp_path):
    """A vramd serving metrics on 127.0.0.1 (a port the kernel picks) and
    writing the textfile."""
    monkeypatch.setenv("FDSTORE", "4096")
    textfile = str(tmp_path / "vramd.prom")
    d = vramtest.Daemon(
        extra=["--metrics-listen", "127.0.0.1:0", "--metrics-textfile", textfile]
    )
    d.textfile = textfile
    d.port = _port(d)
    monkeypatch.setenv("VRAM_SOCKET", d.socket)
    try:
        yield d
    finally:
        killed = not d.alive
        rc = d.stop()
        if not killed and rc != 0:
            pytest.fail(f"vramd exited with {rc}:\n{d.log()}")


def _get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def _samples(text):
    """{(name, frozenset(labels)): value} of an exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        assert m, "bad sample line: " + line
        labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def _types(text):
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def _pause_resume(socket_path):
    c = vram.connect(socket_path, name="metrics-test")
    try:
        w = c.create_pool("m.w", tag="weights", backup=True)
        w.alloc(8 * MiB)
        kv = c.create_pool("m.kv", tag="kv_cache")
        kv.alloc(4 * MiB)
        assert c.pause(tag="weights").pools == 1
        assert c.pause(tag="kv_cache").pools == 1
        # A second pause of a paused pool is no failure.
        with pytest.raises(vram.VramError):
            c.pause(tag="kv_cache")
        assert c.resume(tag="weights").pools == 1
        assert c.resume(tag="kv_cache").pools == 1
        return c, w, kv
    except BaseException:
        c.close()
        raise


def test_exposition_after_pause_and_resume(mdaemon):
    status, ctype, text = _get(mdaemon.port, "/metrics")
    assert status == 200
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    before = _samples(text)
    assert before[("vramd_pauses_total", frozenset({("device", "0"), ("policy", "host")}))] == 0

    c, w, kv = _pause_resume(mdaemon.socket)
    try:
        # Published before the answers went out: no wait needed.
        _, _, text = _get(mdaemon.port, "/metrics")
        assert _types(text) == FAMILIES
        s = _samples(text)
        dev0 = ("device", "0")

        def v(name, **labels):
            return s[(name, frozenset(labels.items()))]

        assert v("vramd_pauses_total", device="0", policy="host") == 1
        assert v("vramd_pauses_total", device="0", policy="discard") == 1
        assert v("vramd_resumes_total", device="0", policy="host") == 1
        assert v("vramd_resumes_total", device="0", policy="discard") == 1
        for policy in ("host", "discard"):
            for op in ("pause", "resume"):
                name = f"vramd_{op}_duration_seconds"
                assert v(name + "_count", policy=policy) == 1
                assert v(name + "_bucket", policy=policy, le="+Inf") == 1
                assert v(name + "_bucket", policy=policy, le="60") == 1
        # The already-paused pause counted no failure.
        assert not [k for k in s if k[0] == "vramd_pause_failures_total"]
        assert v("vramd_sessions") == 1
        assert v("vramd_sessions_opened_total") >= 1
        assert v("vramd_fdstore_fds") == 0
        assert v("vramd_fdstore_max") == 4096
        assert v("vramd_pool_chunks", device="0") >= 2
        assert v("vramd_mappers", device="0") == 2
        size = w.size + kv.size
        assert v("vramd_pool_bytes", device="0", tag="weights", state="active", policy="host") == w.size
        assert v("vramd_pools", device="0", tag="kv_cache", state="active", policy="discard") == 1
        assert v("vramd_pools", device="0", tag="kv_cache", state="paused", policy="discard") == 0
        assert v("vramd_device_used_bytes", device="0") == size
        # Two pauses each released what they expected: no shortfall.
        assert v("vramd_pause_expected_bytes_total", device="0") == size
        assert v("vramd_pause_freed_bytes_total", device="0") == size
        assert v("vramd_pause_shortfalls_total", device="0") == 0
        assert v("vramd_last_pause_expected_bytes", device="0") == kv.size
        assert v("vramd_last_pause_shortfall_bytes", device="0") == 0
        assert v("vramd_last_pause_timestamp_seconds", device="0") > 0
        assert v("vramd_backup_copied_bytes_total", op="pause", medium="host") == w.size
        assert v("vramd_backup_copied_bytes_total", op="resume", medium="host") == w.size
        # The host backend lists no processes.
        assert v("vramd_audit_available", device="0") == 0
        info = [k for k in s if k[0] == "vramd_device_info"]
        assert len(info) == 2 and all(dev0 in k[1] or ("device", "1") in k[1] for k in info)
    finally:
        c.close()

    if shutil.which("promtool"):
        r = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stdout + r.stderr
    # After the merge with the specification's sample, the same families.
    if os.path.exists(SAMPLE):
        with open(SAMPLE) as f:
            assert _types(text) == _types(f.read())


def test_promtool_accepts_the_exposition(mdaemon):
    if not shutil.which("promtool"):
        pytest.skip("promtool (Debian's prometheus package) is not installed")
    c, _, _ = _pause_resume(mdaemon.socket)
    c.close()
    _, _, text = _get(mdaemon.port, "/metrics")
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_healthz_404_and_textfile(mdaemon):
    assert _get(mdaemon.port, "/healthz")[0] == 200
    with pytest.raises(urllib.error.HTTPError) as ei:
        _get(mdaemon.port, "/nothing")
    assert ei.value.code == 404
    # The writer's first file follows the first render; wait for it.
    deadline = time.monotonic() + 10
    while not os.path.exists(mdaemon.textfile) and time.monotonic() < deadline:
        time.sleep(0.02)
    with open(mdaemon.textfile) as f:
        assert _types(f.read()) == FAMILIES
    # Written by rename: no temporary file is left beside it.
    assert os.listdir(os.path.dirname(mdaemon.textfile)) == ["vramd.prom"]


def test_metrics_off_by_default(daemon):
    assert "serving metrics" not in daemon.log()


def test_bad_metrics_address_fails_the_start():
    # Not numeric: vramd refuses to start (exit 1) rather than run without.
    with pytest.raises(RuntimeError) as ei:
        vramtest.Daemon(extra=["--metrics-listen", "localhost"])
    assert "exited with 1" in str(ei.value)


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _query(port, q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_pause_and_resume(mdaemon):
    prom = shutil.which("prometheus")
    if not prom:
        pytest.skip("prometheus (Debian's prometheus package) is not installed")
    c, _, _ = _pause_resume(mdaemon.socket)
    c.close()
    work = tempfile.mkdtemp(prefix="vramd-prom-")
    cfg = os.path.join(work, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: vramd\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{mdaemon.port}']\n"
        )
    port = _free_port()
    log = open(os.path.join(work, "prometheus.log"), "wb")
    p = subprocess.Popen(
        [
            prom,
            "--config.file=" + cfg,
            "--storage.tsdb.path=" + os.path.join(work, "data"),
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=vramtest._die_with_parent,
    )
    try:
        # Bounded: Prometheus starts, scrapes each second; 60 s at most.
        deadline = time.monotonic() + 60
        queries = {
            'sum(vramd_pauses_total)': 2.0,
            'sum(vramd_resumes_total)': 2.0,
            'vramd_pause_duration_seconds_bucket{policy="host",le="+Inf"}': 1.0,
            'vramd_resume_duration_seconds_bucket{policy="discard",le="60"}': 1.0,
            'vramd_pause_shortfalls_total{device="0"}': 0.0,
        }
        got = {}
        while time.monotonic() < deadline and len(got) < len(queries):
            for q in queries:
                if q in got:
                    continue
                try:
                    res = _query(port, q)
                except (OSError, ValueError):
                    break  # not up yet
                if res:
                    got[q] = float(res[0]["value"][1])
            time.sleep(0.2)
        with open(os.path.join(work, "prometheus.log"), "rb") as f:
            plog = f.read()[-4000:].decode("utf-8", "replace")
        assert len(got) == len(queries), f"answered {got}; prometheus said:\n{plog}"
        assert got == queries
        up = _query(port, 'up{job="vramd"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
