# SPDX-License-Identifier: Apache-2.0
"""etc/grafana/vramd-dashboard.json: valid JSON of a Grafana dashboard,
whose every query names only metrics docs/metrics.md defines (histogram
series only of histograms), and whose PromQL promtool parses."""

import json
import os
import re
import shutil
import subprocess

import pytest

import metricsdoc

DASHBOARD = os.path.join(metricsdoc.ROOT, "etc", "grafana", "vramd-dashboard.json")
_NAME = re.compile(r"\bvramd_[a-zA-Z0-9_]+")
# Grafana's variables, as a concrete query would have them.
_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$instance": ".*", "${datasource}": "x"}


def _load():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def _panels(panels):
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def _exprs(dash):
    """(where, expression, is_promql) of every query of the dashboard."""
    for p in _panels(dash["panels"]):
        for t in p.get("targets", []):
            yield f"panel {p['title']!r} target {t['refId']}", t["expr"], True
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query":
            # label_values(...) is Grafana's, not PromQL.
            yield f"variable {v['name']}", q, not q.startswith("label_values(")


def _referenced(expr, doc):
    """The documented metric each vramd_ name of expr stands for; raises on
    one that is not documented."""
    out = set()
    for name in _NAME.findall(expr):
        if name in doc:
            out.add(name)
            continue
        for suf in metricsdoc.HISTOGRAM_SUFFIXES:
            base = name[: -len(suf)]
            if name.endswith(suf) and doc.get(base) and doc[base].type == "histogram":
                out.add(base)
                break
        else:
            raise AssertionError(f"{name} is not defined in docs/metrics.md")
    return out


def test_dashboard_is_a_grafana_dashboard():
    dash = _load()
    for key in ("title", "uid", "panels", "schemaVersion", "templating"):
        assert key in dash, key
    ids = [p["id"] for p in _panels(dash["panels"])]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in _panels(dash["panels"]):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["targets"], p["title"]
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]
    names = [v["name"] for v in dash["templating"]["list"]]
    assert "datasource" in names and "instance" in names


def test_dashboard_names_only_documented_metrics():
    doc = metricsdoc.doc_metrics()
    used = set()
    n = 0
    for where, expr, _ in _exprs(_load()):
        n += 1
        try:
            used |= _referenced(expr, doc)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from None
    assert n > 20
    # What the dashboard is for (issue 14): each of these is shown.
    for want in (
        "vramd_device_used_bytes",
        "vramd_device_free_bytes",
        "vramd_pools",
        "vramd_pause_duration_seconds",
        "vramd_resume_duration_seconds",
        "vramd_last_pause_shortfall_bytes",
        "vramd_process_outside_bytes",
        "vramd_ack_timeouts_total",
        "vramd_sessions",
    ):
        assert want in used, f"the dashboard does not show {want}"


def test_a_wrong_name_is_caught():
    doc = metricsdoc.doc_metrics()
    with pytest.raises(AssertionError):
        _referenced("rate(vramd_pauses_count[5m])", doc)
    with pytest.raises(AssertionError):
        _referenced("vramd_device_used_bytes_bucket", doc)  # not a histogram
    assert _referenced("vramd_pause_duration_seconds_bucket", doc) == {"vramd_pause_duration_seconds"}


def test_promtool_parses_every_expression(tmp_path):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    rules = []
    for i, (where, expr, promql) in enumerate(_exprs(_load())):
        if not promql:
            continue
        for k, v in _VARS.items():
            expr = expr.replace(k, v)
        rules.append({"record": f"dashboard:expr{i}", "expr": expr})
    path = tmp_path / "rules.json"
    # JSON is YAML: promtool reads it as a rule file.
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
