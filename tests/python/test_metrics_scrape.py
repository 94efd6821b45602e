# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus (Debian's prometheus package) scrapes the sample
exposition of docs/metrics.md, served over HTTP on the loopback address as
vramd will serve it, and answers queries: the documented series with their
values, and every query of the Grafana dashboard without an error. Skips
without the prometheus binary."""

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

import metricsdoc
import test_dashboard

GiB = 1 << 30


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Exposition(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus(tmp_path):
    binary = shutil.which("prometheus")
    if not binary:
        pytest.skip("prometheus is not installed (Debian: prometheus)")
    with open(metricsdoc.SAMPLE, "rb") as f:
        _Exposition.body = f.read()
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Exposition)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{httpd.server_address[1]}"
    web = f"127.0.0.1:{_free_port()}"
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "vramd", "static_configs": [{"targets": [target]}]}],
    }))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address={web}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield web, target, proc, tmp_path / "prometheus.log"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        httpd.shutdown()


def _query(web, expr):
    url = f"http://{web}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def _wait_for_scrape(web, proc, log, expr="up", deadline_s=60):
    """Polls until Prometheus has a sample of expr (its start and its first
    scrape take a moment); the deadline only bounds a broken setup."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, log.read_text()
        try:
            res = _query(web, expr)
            if res.get("status") == "success" and res["data"]["result"]:
                return res
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no scrape within {deadline_s}s:\n{log.read_text()}")


def test_prometheus_scrapes_the_sample_and_answers(prometheus):
    web, target, proc, log = prometheus
    up = _wait_for_scrape(web, proc, log, 'up{job="vramd"} == 1')
    assert up["data"]["result"][0]["metric"]["instance"] == target
    _wait_for_scrape(web, proc, log, "vramd_build_info")

    def value(expr):
        res = _query(web, expr)
        assert res["status"] == "success", (expr, res)
        r = res["data"]["result"]
        assert len(r) == 1, (expr, r)
        return float(r[0]["value"][1])

    assert value('vramd_device_used_bytes{device="0"}') == 20 * GiB
    assert value('sum(vramd_pool_bytes{state="paused"})') == 56 * GiB
    assert value('vramd_last_pause_shortfall_bytes') == 2 * GiB
    assert value('vramd_pause_duration_seconds_count{policy="host"}') == 12
    assert value('vramd_pause_duration_seconds_bucket{policy="host",le="2.5"}') == 11
    # The outside memory per device is the sum of the processes' plus what
    # the short pause kept: the sample is consistent.
    outside = value("vramd_device_total_bytes - vramd_device_free_bytes - vramd_device_used_bytes")
    procs = value("sum(vramd_process_outside_bytes)")
    assert outside == procs + 2 * GiB
    # A quantile straight from the buckets (no rate: one scrape's worth).
    q = value('histogram_quantile(0.5, sum by (le) (vramd_pause_duration_seconds_bucket{policy="host"}))')
    assert 1 < q <= 2.5

    # Every documented metric came through the scrape.
    names = _query(web, "group by (__name__) ({__name__=~\"vramd_.*\"})")["data"]["result"]
    got = {r["metric"]["__name__"] for r in names}
    want = set()
    for name, m in metricsdoc.doc_metrics().items():
        want |= {name + s for s in metricsdoc.HISTOGRAM_SUFFIXES} if m.type == "histogram" else {name}
    assert got == want, (sorted(want - got), sorted(got - want))


def test_prometheus_runs_every_dashboard_query(prometheus):
    web, _, proc, log = prometheus
    _wait_for_scrape(web, proc, log, "vramd_build_info")
    n = 0
    for where, expr, promql in test_dashboard._exprs(test_dashboard._load()):
        if not promql:
            continue
        for k, v in test_dashboard._VARS.items():
            expr = expr.replace(k, v)
        res = _query(web, expr)
        assert res["status"] == "success", (where, expr, res)
        n += 1
    assert n > 20
