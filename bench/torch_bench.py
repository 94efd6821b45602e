#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch pause/resume through vramd against the raw in-process VMM floor
(make bench-torch; needs a GPU and PyTorch).

A model of several GiB in many tensors (a Llama-like stack of layers:
attention and MLP matrices, norms) is allocated in a vram.torch region with
a host backup ("weights"), and a KV cache of the same order in a discarded
region ("kv_cache"). Each is paused and resumed for a few cycles; every
pause and resume is timed from the call to its return, the device's work
waited for, as an engine would see it. The floor is bench/gpu_raw (the same
VMM calls in one process, no daemon) run on a pool of the same size and
layout (libvram's geometric growth), with and without a backup.

    python3 bench/torch_bench.py [--gib 8] [--kv-gib 8] [--cycles 3]

Prints a table; writes every figure as JSON to $OUT/torch_bench.json (else
$VRAM_BUILD or build/). Exits 77 without PyTorch or a GPU.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

MiB = 1 << 20
GiB = 1 << 30


def build_dir():
    return os.environ.get("VRAM_BUILD") or os.path.join(ROOT, "build")


def model_shapes(target_bytes, d=4096, ffn=14336, elem=2):
    """Shapes of a Llama-like stack whose weights come to about
    target_bytes: per layer q, k, v, o, gate, up, down and two norms."""
    layer = [
        (d, d), (d // 4, d), (d // 4, d), (d, d),
        (ffn, d), (ffn, d), (d, ffn), (d,), (d,),
    ]
    per_layer = sum(elem * (s[0] * (s[1] if len(s) > 1 else 1)) for s in layer)
    n = max(1, round(target_bytes / per_layer))
    shapes = [(32000, d)]  # embeddings
    for _ in range(n):
        shapes += layer
    shapes.append((d,))
    return shapes


def timed(torch, fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    rep = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000.0, rep


def raw_floor(size, cycles, policy):
    """bench/gpu_raw on a pool of size bytes (geometric layout, as libvram
    grows) with policy: {"pause_ms": [...], "resume_ms": [...], ...}, where
    pause_ms is the better of its one-thread and multi-thread closes (vramd
    closes from several threads)."""
    exe = os.path.join(build_dir(), "bench", "gpu_raw")
    if not os.path.exists(exe):
        print(f"(no {exe}: run make bench-torch; floor not measured)")
        return {}
    path = os.path.join(build_dir(), f"torch_bench_raw_{os.getpid()}.csv")
    args = [
        exe, "--sizes", f"{size // MiB}M", "--policies", policy,
        "--host-max", f"{size // MiB + 1}M", "--cycles", str(cycles),
        "--layout", "geometric", "--no-gap", "--csv", path,
    ]
    r = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        print(f"gpu_raw failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return {}
    d = {}
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["bench"] == "raw" and row["policy"] == policy:
                    d.setdefault(row["metric"], []).append(float(row["value"]))
                    d["chunks"] = int(row["chunks"])
    finally:
        os.unlink(path)
    # resume_ms holds the resumes right after each pause (cycles 1..N)
    # then, numbered N+1.., those after the multi-threaded pauses.
    if "resume_ms" in d:
        d["resume_ms"] = d["resume_ms"][:cycles]
    one, many = d.get("pause_ms", []), d.get("pause_mt_ms", [])
    if one and many and statistics.median(many) < statistics.median(one):
        d["pause_1thread_ms"], d["pause_ms"] = one, many
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=8, help="weights (host backup), GiB")
    ap.add_argument("--kv-gib", type=float, default=8, help="KV cache (discard), GiB")
    ap.add_argument("--kv-tensors", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--no-raw", action="store_true", help="skip the raw floor")
    a = ap.parse_args()

    try:
        import torch
    except ImportError:
        print("torch_bench: no PyTorch here")
        return 77
    if not torch.cuda.is_available():
        print("torch_bench: PyTorch sees no GPU")
        return 77
    import vramtest

    daemon = vramtest.Daemon(backend="cuda", extra=["--ack-timeout-ms", "120000", "--log-level", "info"])
    os.environ["VRAM_SOCKET"] = daemon.socket
    import vram.torch as vt

    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    try:
        torch.manual_seed(0)
        shapes = model_shapes(int(a.gib * GiB))
        t0 = time.perf_counter()
        with vt.region("weights", backup=True):
            weights = [torch.empty(s, device="cuda", dtype=torch.bfloat16).normal_() for s in shapes]
        kv_each = int(a.kv_gib * GiB) // a.kv_tensors // 2 * 2
        with vt.region("kv_cache"):
            kv = [torch.zeros(kv_each // 2, device="cuda", dtype=torch.bfloat16) for _ in range(a.kv_tensors)]
        torch.cuda.synchronize()
        load_s = time.perf_counter() - t0
        checksum = [float(w.float().sum()) for w in weights[:8]]
        sizes = {t: vt.pool_for(t, b).size for t, b in (("weights", True), ("kv_cache", False))}
        print(
            f"vramd on {results['device']}: weights {len(weights)} tensors, "
            f"{sizes['weights'] / GiB:.2f} GiB pool (host backup); KV cache "
            f"{len(kv)} tensors, {sizes['kv_cache'] / GiB:.2f} GiB pool (discard); "
            f"allocated in {load_s:.1f} s"
        )

        for tag, backup in (("kv_cache", False), ("weights", True)):
            size = sizes[tag]
            case = {"tag": tag, "policy": "host" if backup else "discard", "bytes": size,
                    "tensors": len(weights) if backup else len(kv),
                    "pause_ms": [], "resume_ms": [], "released": [], "free_delta": []}
            for _ in range(a.cycles):
                f0 = torch.cuda.mem_get_info()[0]
                ms, rep = timed(torch, lambda: vt.pause(tag))
                f1 = torch.cuda.mem_get_info()[0]
                case["pause_ms"].append(ms)
                case["released"].append(rep.bytes)
                case["free_delta"].append(f1 - f0)
                ms, _ = timed(torch, lambda: vt.resume(tag))
                case["resume_ms"].append(ms)
            if backup:
                now = [float(w.float().sum()) for w in weights[:8]]
                case["content_kept"] = now == checksum
            results["cases"].append(case)

        raw = {}
        if not a.no_raw:
            raw["discard"] = raw_floor(sizes["kv_cache"], a.cycles, "discard")
            raw["host"] = raw_floor(sizes["weights"], a.cycles, "host")
        results["raw"] = raw
    finally:
        rc = daemon.stop()
        if rc != 0:
            print(f"vramd exited with {rc}:\n{daemon.log()}")

    # ---- table ----
    def med(x):
        return statistics.median(x) if x else float("nan")

    print()
    hdr = f"{'case':<22}{'GiB':>7}{'tensors':>9}{'pause ms':>10}{'resume ms':>11}" \
          f"{'raw pause':>11}{'raw resume':>12}{'x pause':>9}{'x resume':>10}{'GB/s out':>10}{'GB/s in':>9}"
    print(hdr)
    print("-" * len(hdr))
    summary = []
    for c in results["cases"]:
        r = raw.get(c["policy"], {})
        p, q = med(c["pause_ms"]), med(c["resume_ms"])
        rp, rq = med(r.get("pause_ms", [])), med(r.get("resume_ms", []))
        gb = c["bytes"] / 1e9
        out_gbps = gb / (p / 1000) if c["policy"] == "host" else float("nan")
        in_gbps = gb / (q / 1000) if c["policy"] == "host" else float("nan")
        row = {
            "case": f"{c['tag']} ({c['policy']})", "gib": c["bytes"] / GiB, "tensors": c["tensors"],
            "pause_ms": p, "resume_ms": q, "raw_pause_ms": rp, "raw_resume_ms": rq,
            "pause_ratio": p / rp if rp == rp and rp > 0 else None,
            "resume_ratio": q / rq if rq == rq and rq > 0 else None,
            "backup_gbps": out_gbps if out_gbps == out_gbps else None,
            "restore_gbps": in_gbps if in_gbps == in_gbps else None,
            "released_all": all(x >= c["bytes"] for x in c["released"]),
            "free_delta_min": min(c["free_delta"]),
        }
        summary.append(row)

        def f(v, w, d=1):
            return f"{v:>{w}.{d}f}" if v is not None and v == v else f"{'-':>{w}}"

        print(f"{row['case']:<22}{row['gib']:>7.2f}{row['tensors']:>9}{f(p, 10)}{f(q, 11)}"
              f"{f(rp, 11)}{f(rq, 12)}{f(row['pause_ratio'], 9, 2)}{f(row['resume_ratio'], 10, 2)}"
              f"{f(row['backup_gbps'], 10)}{f(row['restore_gbps'], 9)}")
    print()
    for c in results["cases"]:
        print(f"{c['tag']}: every pause released {min(c['released']) / GiB:.2f} GiB or more; "
              f"device free memory rose by at least {min(c['free_delta']) / GiB:.2f} GiB"
              + (f"; content kept: {c.get('content_kept')}" if "content_kept" in c else ""))
    results["summary"] = summary

    out_dir = os.environ.get("OUT") or build_dir()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "torch_bench.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"figures in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
