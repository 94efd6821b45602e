# SPDX-License-Identifier: Apache-2.0
"""A/B of the control path: bench/rpc against two builds, in turns.

    python3 bench/rpc_ab.py OLD_BUILD NEW_BUILD [--rounds 5] [--iters 4000]

Each build's own vramd and libvram run this tree's bench/rpc: the binary
is copied into OLD_BUILD/bench/ (its rpath, $ORIGIN/.., then picks that
build's libvram). The configurations (fd store off; on with 64 idle pools;
the event thread; metrics served over HTTP with 64 idle pools) run in turns, OLD then NEW, ROUNDS times each, under
nice; the table gives the median of the rounds per figure and NEW/OLD.
Latencies on a shared machine move a lot between rounds: the daemon's CPU
time per call ("vramd us") moves least.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys

CONFIGS = [
    ("store off", {}),
    ("store on, 64 pools", {"BENCH_STORE": "1", "BENCH_POOLS": "64"}),
    ("event thread", {"BENCH_THREAD": "1"}),
    ("metrics served, 64 pools", {"BENCH_METRICS": "1", "BENCH_POOLS": "64"}),
]
FIELDS = ["p50", "p99", "max", "calls_s", "vramd_us"]


def run_once(build, bench, env_extra, iters):
    env = dict(os.environ)
    env.update(env_extra)
    env["BENCH_ITERS"] = str(iters)
    env["VRAMD_BIN"] = os.path.join(build, "vramd")
    env["VRAMCTL_BIN"] = os.path.join(build, "vramctl")
    env["VRAM_BUILD"] = build
    out = subprocess.run(["nice", "-n", "10", bench], env=env, check=True,
                         capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 8 or not cells[1].isdigit():
            continue
        key = "%s x%s" % (cells[0], cells[1])
        rows[key] = dict(zip(FIELDS, map(float, cells[3:8])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=4000)
    ap.add_argument("--configs", default="",
                    help="comma-separated indexes into %s (default all)"
                    % [c[0] for c in CONFIGS])
    a = ap.parse_args()
    configs = CONFIGS if not a.configs else [
        CONFIGS[int(i)] for i in a.configs.split(",")]
    new_bench = os.path.join(a.new, "bench", "rpc")
    old_bench = os.path.join(a.old, "bench", "rpc.ab")
    shutil.copy2(new_bench, old_bench)
    print("bench/rpc_ab: %d rounds of BENCH_ITERS=%d, old %s, new %s; "
          "medians (us, calls/s), new/old" % (a.rounds, a.iters, a.old, a.new))
    for name, extra in configs:
        got = {"old": [], "new": []}
        for _ in range(a.rounds):
            got["old"].append(run_once(a.old, old_bench, extra, a.iters))
            got["new"].append(run_once(a.new, new_bench, extra, a.iters))
        print("\n%s\n" % name)
        print("| row | p50 old / new | p99 old / new | calls/s old / new "
              "| vramd us/call old / new (ratio) |")
        print("|---|---|---|---|---|")
        for row in got["old"][0]:
            med = {}
            for side in ("old", "new"):
                med[side] = {f: statistics.median(r[row][f] for r in got[side])
                             for f in FIELDS}
            o, n = med["old"], med["new"]
            print("| %s | %.1f / %.1f | %.1f / %.1f | %.0f / %.0f | %.2f / %.2f (%.2f) |"
                  % (row, o["p50"], n["p50"], o["p99"], n["p99"], o["calls_s"],
                     n["calls_s"], o["vramd_us"], n["vramd_us"],
                     n["vramd_us"] / o["vramd_us"] if o["vramd_us"] else 0))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
