# SPDX-License-Identifier: Apache-2.0
"""docs/metrics.md against its sample exposition (tests/data/metrics-sample.prom):
promtool accepts the sample, the sample defines exactly the documented
metrics with their types and labels, and the names keep Prometheus'
conventions."""

import shutil
import subprocess

import pytest

import metricsdoc


def _sample_text():
    with open(metricsdoc.SAMPLE, encoding="utf-8") as f:
        return f.read()


def test_promtool_accepts_the_sample():
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    with open(metricsdoc.SAMPLE, "rb") as f:
        r = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    # promtool prints lint findings and may still exit 0 for some of them.
    assert not r.stdout.strip() and not r.stderr.strip(), r.stdout.decode() + r.stderr.decode()


def test_the_doc_embeds_the_sample_file():
    assert metricsdoc.doc_sample() == _sample_text()


def test_the_sample_defines_the_documented_metrics_and_types():
    doc = metricsdoc.doc_metrics()
    types, samples = metricsdoc.parse_exposition(_sample_text())
    assert len(doc) > 40
    assert set(types) == set(doc), (
        f"documented only: {sorted(set(doc) - set(types))}; "
        f"in the sample only: {sorted(set(types) - set(doc))}"
    )
    for name, m in doc.items():
        assert types[name] == m.type, name
    seen = {metricsdoc.family_of(s, types) for s, _, _ in samples}
    assert None not in seen, "a sample of an undeclared metric"
    assert seen == set(doc), f"no sample for {sorted(set(doc) - seen)}"


def test_sample_labels_are_the_documented_ones():
    doc = metricsdoc.doc_metrics()
    types, samples = metricsdoc.parse_exposition(_sample_text())
    for series, labels, _ in samples:
        fam = metricsdoc.family_of(series, types)
        want = set(doc[fam].labels)
        if series.endswith("_bucket") and types[fam] == "histogram":
            want.add("le")
        assert set(labels) == want, f"{series}: {sorted(labels)} != {sorted(want)}"


def test_names_follow_prometheus_conventions():
    for name, m in metricsdoc.doc_metrics().items():
        assert m.type in ("counter", "gauge", "histogram"), name
        if m.type == "counter":
            assert name.endswith("_total"), f"counter {name} must end in _total"
        else:
            assert not name.endswith("_total"), f"{m.type} {name} ends in _total"
        if m.unit == "bytes":
            assert "_bytes" in name, f"{name} is in bytes"
        elif m.unit == "seconds":
            assert "_seconds" in name, f"{name} is in seconds"
        else:
            assert m.unit == "-", f"{name}: unit {m.unit!r}: bytes, seconds or -"
            assert "_bytes" not in name and "_seconds" not in name, name
        if name.endswith("_info"):
            assert m.type == "gauge", name
        # Labels that grow without bound have no place here; pid and
        # process are the documented exception of the audit's series.
        for label in m.labels:
            assert label in (
                "device", "tag", "state", "policy", "op", "errno", "medium",
                "reason", "uuid", "backend", "version", "protocol", "pid", "process",
            ), f"{name}: label {label} is not in the documented sets"
        if {"pid", "process"} & m.labels:
            assert name.startswith("vramd_process_"), name


def test_histogram_buckets_are_cumulative_and_end_in_count():
    types, samples = metricsdoc.parse_exposition(_sample_text())
    hists = [n for n, t in types.items() if t == "histogram"]
    assert hists
    for h in hists:
        by_key = {}
        counts = {}
        for series, labels, v in samples:
            key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            if series == h + "_bucket":
                by_key.setdefault(key, []).append((float(labels["le"]), v))
            elif series == h + "_count":
                counts[key] = v
        assert by_key, h
        for key, bs in by_key.items():
            vals = [v for _, v in sorted(bs)]
            assert vals == sorted(vals), f"{h}{key}: buckets not cumulative"
            assert sorted(bs)[-1][0] == float("inf"), f"{h}{key}: no +Inf bucket"
            assert vals[-1] == counts[key], f"{h}{key}: +Inf bucket != _count"
