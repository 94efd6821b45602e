#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads the CSV of bench/gpu_raw and bench/gpu_vramd (see bench/gpu_bench.h),
prints vramd against the raw floor with their ratios and the issue's targets,
writes summary.json, and draws latency.png (latency against pool size) when
matplotlib is available.

usage: bench/plot.py GPU.CSV [OUT_DIR]
"""
import csv
import json
import os
import statistics
import sys
from collections import defaultdict

GIB = 1 << 30
TMS_ALLOCS_MS = 61.0  # torch_memory_saver, 1024 x 16 MiB discard (FACTS.md)

# vramd layout -> the raw layout that makes the same VMM calls
RAW_OF = {
    "chunked": "chunked",
    "chunked-rt1": "chunked",
    "1024x16M": "geometric",
    "256x64M": "geometric",
}


def load(path):
    data = defaultdict(list)  # (bench, policy, layout, size, metric) -> values
    chunks = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["bench"], row["policy"], row["layout"],
                   int(row["size_bytes"]), row["metric"])
            data[key].append((int(row["cycle"]), float(row["value"])))
            chunks[key[:4]] = int(row["chunks"])
    return data, chunks


def med(data, key, cycles=None):
    vals = [v for c, v in data.get(key, []) if cycles is None or c in cycles]
    return statistics.median(vals) if vals else None


def first(data, key):
    vals = sorted(data.get(key, []))
    return vals[0][1] if vals else None


def later(data, key):
    vals = sorted(data.get(key, []))[1:]
    return statistics.median([v for _, v in vals]) if vals else None


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def size_str(n):
    return f"{n // (1 << 20)} MiB" if n < GIB else f"{n / GIB:g} GiB"


def summarize(data, chunks):
    rows = []
    pools = sorted({k[1:4] for k in data if k[0] == "vramd"},
                   key=lambda p: (p[0], p[1], p[2]))
    for policy, layout, size in pools:
        raw_layout = RAW_OF.get(layout, layout)
        v = lambda m: med(data, ("vramd", policy, layout, size, m))
        r = lambda m: med(data, ("raw", policy, raw_layout, size, m))
        raw_pause = [x for x in (r("pause_ms"), r("pause_mt_ms")) if x is not None]
        row = {
            "policy": policy, "layout": layout, "size_bytes": size,
            "chunks": chunks.get(("vramd", policy, layout, size)),
            "raw_layout": raw_layout,
            "raw_chunks": chunks.get(("raw", policy, raw_layout, size)),
            "pause_ms": v("pause_ms"),
            "raw_pause_ms": min(raw_pause) if raw_pause else None,
            "raw_pause_1thread_ms": r("pause_ms"),
            "resume_ms": v("resume_ms"),
            "raw_resume_ms": r("resume_ms"),
            "resume_gap_ms": v("resume_gap_ms"),
            "raw_resume_gap_ms": r("resume_gap_ms"),
            "released_gib": v("released_gib"),
            "free_delta_gib": v("free_delta_gib"),
        }
        row["pause_ratio"] = ratio(row["pause_ms"], row["raw_pause_ms"])
        row["resume_ratio"] = ratio(row["resume_ms"], row["raw_resume_ms"])
        row["resume_gap_ratio"] = ratio(row["resume_gap_ms"], row["raw_resume_gap_ms"])
        if policy == "host":
            key = ("vramd", policy, layout, size)
            row["backup_gbps_first"] = first(data, key + ("backup_gbps",))
            row["backup_gbps_later"] = later(data, key + ("backup_gbps",))
            row["restore_gbps_first"] = first(data, key + ("restore_gbps",))
            row["restore_gbps_later"] = later(data, key + ("restore_gbps",))
            row["pinned_d2h_gbps"] = v("pinned_d2h_gbps")
            row["pinned_h2d_gbps"] = v("pinned_h2d_gbps")
            for what, pinned in (("backup", "pinned_d2h_gbps"), ("restore", "pinned_h2d_gbps")):
                for when in ("first", "later"):
                    row[f"{what}_vs_pinned_{when}"] = ratio(
                        row[f"{what}_gbps_{when}"], row[pinned])
        row["content_errors"] = v("content_errors")
        rows.append(row)
    return rows


def targets(rows):
    out = []
    for r in rows:
        name = f'{r["policy"]} {r["layout"]} {size_str(r["size_bytes"])}'
        if r["layout"] in ("chunked", "1024x16M", "256x64M"):
            for m in ("pause_ratio", "resume_ratio"):
                if r[m] is not None:
                    out.append((f"{name}: {m.replace('_', ' ')} <= 1.2", r[m] <= 1.2,
                                f"{r[m]:.2f}x"))
        if r["layout"] == "1024x16M":
            for m in ("pause_ms", "resume_ms"):
                if r[m] is not None:
                    out.append((f"{name}: {m[:-3]} 5x faster than torch_memory_saver "
                                f"({TMS_ALLOCS_MS:.0f} ms)", r[m] * 5 <= TMS_ALLOCS_MS,
                                f"{r[m]:.1f} ms"))
        if r["policy"] == "host":
            for m in ("backup_vs_pinned_first", "backup_vs_pinned_later",
                      "restore_vs_pinned_first", "restore_vs_pinned_later"):
                if r.get(m) is not None:
                    out.append((f"{name}: {m.replace('_', ' ')} >= 90%", r[m] >= 0.9,
                                f"{100 * r[m]:.0f}%"))
        if r["content_errors"]:
            out.append((f"{name}: content intact after resume", False, "wrong"))
    return out


def print_tables(rows, data):
    print("pause and resume, ms (median over cycles); ratio = vramd / raw floor")
    hdr = (f'{"policy":7} {"layout":12} {"size":>8} {"chunks":>6} | {"pause":>8} {"raw":>8} '
           f'{"ratio":>5} | {"resume":>8} {"raw":>8} {"ratio":>5} | {"gap":>8} {"raw":>8} '
           f'{"ratio":>5} | {"freed GiB":>9}')
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f'{r["policy"]:7} {r["layout"]:12} {size_str(r["size_bytes"]):>8} '
              f'{r["chunks"] or 0:>6} | {fmt(r["pause_ms"]):>8} {fmt(r["raw_pause_ms"]):>8} '
              f'{fmt(r["pause_ratio"]):>5} | {fmt(r["resume_ms"]):>8} '
              f'{fmt(r["raw_resume_ms"]):>8} {fmt(r["resume_ratio"]):>5} | '
              f'{fmt(r["resume_gap_ms"]):>8} {fmt(r["raw_resume_gap_ms"]):>8} '
              f'{fmt(r["resume_gap_ratio"]):>5} | {fmt(r["free_delta_gib"], 3):>9}')
    host = [r for r in rows if r["policy"] == "host"]
    if host:
        print()
        print("host backups, GB/s (end to end: pause and resume include the release "
              "and the map); first cycle / later cycles")
        hdr = (f'{"layout":12} {"size":>8} | {"backup":>13} {"pinned d2h":>10} | '
               f'{"restore":>13} {"pinned h2d":>10}')
        print(hdr)
        print("-" * len(hdr))
        for r in host:
            print(f'{r["layout"]:12} {size_str(r["size_bytes"]):>8} | '
                  f'{fmt(r["backup_gbps_first"], 1):>6}/{fmt(r["backup_gbps_later"], 1):>6} '
                  f'{fmt(r["pinned_d2h_gbps"], 1):>10} | '
                  f'{fmt(r["restore_gbps_first"], 1):>6}/{fmt(r["restore_gbps_later"], 1):>6} '
                  f'{fmt(r["pinned_h2d_gbps"], 1):>10}')
    sweep = defaultdict(dict)  # (piece MiB, streams) -> direction -> GB/s
    for k, vals in data.items():
        if k[0] == "raw" and k[1] == "copy":
            piece, streams = (int(x.split("=")[1].rstrip("M")) for x in k[2].split(";"))
            sweep[(piece, streams)][k[4][5:8]] = statistics.median(v for _, v in vals)
    if sweep:
        print()
        print("raw copy sweep (registered memfd <-> device), GB/s:")
        print(f'  {"piece MiB":>9} {"streams":>7} {"d2h":>6} {"h2d":>6}')
        for (piece, streams), v in sorted(sweep.items()):
            print(f'  {piece:>9} {streams:>7} {fmt(v.get("d2h"), 1):>6} '
                  f'{fmt(v.get("h2d"), 1):>6}')
    chunk = sorted((k[3], k[2], k[4], med(data, k)) for k in data
                   if k[0] == "raw" and k[2].startswith("chunk=") and
                   k[4] in ("pause_ms", "pause_mt_ms", "resume_ms"))
    if chunk:
        print()
        print("raw chunk-size sweep (discard), ms:")
        for size, layout, metric, v in chunk:
            print(f"  {size_str(size):>8} {layout:16} {metric:12} {fmt(v):>8}")


def plot(rows, data, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no {os.path.basename(path)} "
              "(pip install matplotlib, then run bench/plot.py again)")
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, policy in zip(axes, ("discard", "host")):
        rs = sorted((r for r in rows if r["policy"] == policy and r["layout"] == "chunked"),
                    key=lambda r: r["size_bytes"])
        if not rs:
            ax.set_visible(False)
            continue
        x = [r["size_bytes"] / GIB for r in rs]
        # One colour per operation: dashed is the raw floor, solid vramd.
        for key, label, style, color in (
                ("raw_pause_ms", "pause, raw floor", "--", "tab:blue"),
                ("pause_ms", "pause, vramd", "-", "tab:blue"),
                ("raw_resume_ms", "resume, raw floor", "--", "tab:green"),
                ("resume_ms", "resume, vramd", "-", "tab:green"),
                ("raw_resume_gap_ms", "resume after a gap, raw floor", "--", "tab:red"),
                ("resume_gap_ms", "resume after a gap, vramd", "-", "tab:red")):
            pts = [(xi, r[key]) for xi, r in zip(x, rs) if r[key]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color,
                        marker="o" if style == "-" else "x", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("pool size (GiB)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{policy} pools")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("vramd pause/resume vs the in-process VMM floor")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")
    return True


# ---- bench/compare.py's sweeps -----------------------------------------------

COMPARE_SWEEPS = (
    # (sweep, file, x label, title)
    ("size", "compare_size.png", "pool size (GiB), one discard tensor",
     "pause/resume against pool size"),
    ("count", "compare_count.png", "allocations (sharing one total)",
     "pause/resume against allocation count"),
    ("mappers", "compare_mappers.png", "processes mapping the pool",
     "vramd pause/resume against mappers of one pool"),
)
COMPARE_STYLE = {
    "tms": ("torch_memory_saver", "tab:orange", "s"),
    "tms-retain": ("torch_memory_saver, retained", "tab:purple", "^"),
    "vramd": ("vramd", "tab:blue", "o"),
    "raw": ("in-process floor", "tab:gray", "x"),
}


def plot_compare(sweeps, out_dir):
    """Draws bench/compare.py's sweeps, one PNG per sweep (pause and
    resume side by side, medians with min-max bars). sweeps: {sweep:
    {backend: [{"x", "pause_ms": {min, median, max}, "resume_ms": ...}]}}.
    Returns the paths written; without matplotlib, says so and returns []
    (the figures are in compare.json and compare.csv either way)."""
    if not any(sweeps.get(s) for s, *_ in COMPARE_SWEEPS):
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (the figures are in compare.json; "
              "draw them elsewhere with bench/compare.py --render compare.json)")
        return []
    paths = []
    for sweep, name, xlabel, title in COMPARE_SWEEPS:
        pts = sweeps.get(sweep)
        if not pts:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, metric in zip(axes, ("pause_ms", "resume_ms")):
            for backend, (label, color, marker) in COMPARE_STYLE.items():
                ps = sorted((p for p in pts.get(backend, []) if p.get(metric)), key=lambda p: p["x"])
                if not ps:
                    continue
                x = [p["x"] for p in ps]
                y = [p[metric]["median"] for p in ps]
                lo = [p[metric]["median"] - p[metric]["min"] for p in ps]
                hi = [p[metric]["max"] - p[metric]["median"] for p in ps]
                ax.errorbar(x, y, yerr=[lo, hi], color=color, marker=marker, capsize=3, label=label)
            if sweep != "mappers":
                ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{metric[:-3]} (ms)")
            ax.set_title(metric[:-3])
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(title)
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(f"wrote {path}")
        paths.append(path)
    return paths


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(path))
    data, chunks = load(path)
    rows = summarize(data, chunks)
    print_tables(rows, data)
    checks = targets(rows)
    if checks:
        print()
        print("targets:")
        for what, ok, value in checks:
            print(f'  [{"ok" if ok else "MISS"}] {what}: {value}')
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"rows": rows,
                   "targets": [{"target": w, "met": ok, "value": v} for w, ok, v in checks]},
                  f, indent=1)
    plot(rows, data, os.path.join(out, "latency.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
