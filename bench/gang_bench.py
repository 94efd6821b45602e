#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Gang pause and resume of a tag across 1, 2, 4 and 8 GPUs (as many as the
machine has), one rank per GPU as RL jobs run them.

For each rank count n, a fresh vramd serves the node; n rank processes
(each with CUDA_VISIBLE_DEVICES set to its GPU, registered under one job by
VRAM_JOB) each fill a pool of --gib GiB on its own device under tag
weights; a controller then times, from the call to its return, a gang
pause and a gang resume of the tag across the job (vram_gang_pause and
vram_gang_resume), --cycles times, and for comparison a plain pause and
resume of the same selection. Each rank acks from libvram's event thread.

    python3 bench/gang_bench.py [--gib 4] [--cycles 5] [--policy discard|host]
    python3 bench/gang_bench.py --backend host --devices 8   # no GPU: a dry run

Prints a table; writes gang_bench.csv and gang_bench.json to $OUT (else
build/bench-results/gang-DATE/). Exits 77 on the cuda backend without a GPU
(nvidia-smi -L lists none).
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

import vramtest  # noqa: E402

GiB = 1 << 30
JOB = "gang-bench"

RANK = r"""
import os, sys
import vram
r = int(os.environ["RANK"])
c = vram.connect(name=f"bench-rank{r}")
c.start_thread()
p = c.create_pool(f"bench.rank{r}", tag="weights", device=r,
                  backup=os.environ["POLICY"] == "host",
                  reserve_bytes=int(os.environ["BYTES"]) * 2)
p.reserve(int(os.environ["BYTES"]))
print("ready", flush=True)
sys.stdin.readline()
c.close()
"""


def gpu_count():
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def run_one(args, n):
    import vram

    extra = ["--ack-timeout-ms", "120000"]
    if args.backend == "host":
        d = vramtest.Daemon(
            backend="host", capacity=f"{int(args.gib * 2048) + 64}M", devices=n,
            extra=extra,
        )
    else:
        saved = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        d = vramtest.Daemon(backend="cuda", extra=extra)
        if saved is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    ranks = []
    rows = []
    try:
        for r in range(n):
            env = dict(
                RANK=r,
                BYTES=int(args.gib * GiB),
                POLICY=args.policy,
                VRAM_JOB=JOB,
                VRAM_INSTANCE=f"rank-{r}",
            )
            if args.backend == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = r
            ranks.append(
                subprocess.Popen(
                    [sys.executable, "-u", "-c", RANK],
                    env=vramtest.child_env(d, **env),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for p in ranks:
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a rank did not start:\n{d.log()}")
        with vram.connect(d.socket, name="gang-bench") as c:
            for cycle in range(args.cycles):
                for kind in ("gang", "plain"):
                    pause = c.gang_pause if kind == "gang" else c.pause
                    resume = c.gang_resume if kind == "gang" else c.resume
                    kw = dict(tag="weights", timeout_ms=120000)
                    if kind == "gang":
                        kw["job"] = JOB
                    t0 = time.perf_counter()
                    rp = pause(**kw)
                    t1 = time.perf_counter()
                    rr = resume(**kw)
                    t2 = time.perf_counter()
                    assert rp.pools == n and rr.pools == n, (rp, rr)
                    rows.append(
                        dict(
                            gpus=n,
                            kind=kind,
                            cycle=cycle,
                            policy=args.policy,
                            gib_per_rank=args.gib,
                            pause_ms=(t1 - t0) * 1e3,
                            resume_ms=(t2 - t1) * 1e3,
                            bytes=rp.bytes,
                        )
                    )
    finally:
        for p in ranks:
            if p.poll() is None:
                try:
                    p.stdin.write("\n")
                    p.stdin.flush()
                except OSError:
                    pass
        for p in ranks:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        d.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cuda", "host"], default="cuda")
    ap.add_argument("--devices", type=int, default=8, help="host backend only")
    ap.add_argument("--gib", type=float, default=4.0, help="pool per rank")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--policy", choices=["discard", "host"], default="discard")
    args = ap.parse_args()

    ndev = gpu_count() if args.backend == "cuda" else args.devices
    if ndev < 1:
        print("gang_bench: no GPU (nvidia-smi -L lists none)", file=sys.stderr)
        return 77
    counts = [n for n in (1, 2, 4, 8) if n <= ndev]
    out = os.environ.get("OUT") or os.path.join(
        ROOT, "build", "bench-results", "gang-" + time.strftime("%Y-%m-%d")
    )
    os.makedirs(out, exist_ok=True)

    rows = []
    for n in counts:
        rows += run_one(args, n)

    print(f"gang pause/resume of tag weights, {args.gib:g} GiB per rank, "
          f"policy {args.policy}, backend {args.backend}, median of "
          f"{args.cycles} cycles (first cycle included)")
    print(f"{'gpus':>4} {'kind':>6} {'pause ms':>10} {'resume ms':>10}")
    summary = []
    for n in counts:
        for kind in ("gang", "plain"):
            sel = [r for r in rows if r["gpus"] == n and r["kind"] == kind]
            p = statistics.median(r["pause_ms"] for r in sel)
            q = statistics.median(r["resume_ms"] for r in sel)
            summary.append(dict(gpus=n, kind=kind, pause_ms=p, resume_ms=q))
            print(f"{n:>4} {kind:>6} {p:>10.2f} {q:>10.2f}")
    with open(os.path.join(out, "gang_bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out, "gang_bench.json"), "w") as f:
        json.dump(dict(args=vars(args), gpus=ndev, summary=summary, rows=rows), f,
                  indent=1)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
