# SPDX-License-Identifier: Apache-2.0
"""Readers of the metric specification (docs/metrics.md) and of expositions
in the Prometheus text format, for the tests of the metrics, the dashboard
and the Kubernetes manifests."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "metrics.md")
SAMPLE = os.path.join(ROOT, "tests", "data", "metrics-sample.prom")

_ROW = re.compile(r"^\|\s*`(vramd_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|\s*([^|]*)\|\s*([^|]*)\|")
# Suffixes Prometheus adds to a histogram's (or summary's) name.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Metric:
    def __init__(self, name, type_, unit, labels):
        self.name = name
        self.type = type_
        self.unit = unit
        self.labels = labels


def doc_metrics(path=DOC):
    """{name: Metric} from the tables of docs/metrics.md: rows whose first
    cell is a metric name in backticks, then type, unit and labels."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = _ROW.match(line)
            if not m:
                continue
            name, type_, unit, labels = m.groups()
            if name in out:
                raise ValueError(f"{name} is defined twice in {path}")
            out[name] = Metric(
                name,
                type_,
                unit.strip(),
                set(re.findall(r"`([a-z_]+)`", labels)),
            )
    return out


def doc_sample(path=DOC):
    """The first fenced block after the heading 'Sample exposition'."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Sample exposition\n.*?^```\n(.*?)^```$", text, re.S | re.M)
    if not m:
        raise ValueError(f"no sample exposition in {path}")
    return m.group(1)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_exposition(text):
    """(types, samples): types maps a metric family to its # TYPE; samples
    is a list of (series name, {label: value}, float value)."""
    types = {}
    samples = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line!r}")
        name, _, body, value = m.group(1), m.group(2), m.group(3), m.group(4)
        labels = {}
        pos = 0
        body = body or ""
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            if not lm:
                raise ValueError(f"line {n}: bad labels: {body!r}")
            labels[lm.group(1)] = lm.group(2)
            pos = lm.end()
        samples.append((name, labels, float(value)))
    return types, samples


def family_of(series, types):
    """The metric family a series belongs to: itself, or the histogram or
    summary whose name it extends."""
    if series in types:
        return series
    for suf in HISTOGRAM_SUFFIXES:
        if series.endswith(suf) and series[: -len(suf)] in types:
            return series[: -len(suf)]
    return None
