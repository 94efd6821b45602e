#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks bench/compare.py's parts that need no GPU (make
bench-compare-selftest): argument parsing, the summary, ratios, tables,
CSV, JSON, --render and the plots on the figures recorded in issue 11; the
skip path (exit 77 without PyTorch or a GPU); the mapper sweep's
orchestration, for real, against a vramd on the host backend; and
bench/create_probe.py's every mode against the fake CUDA driver.

The issue's figures are min / median / max of five cycles; the cycles
here are rebuilt from them as [min, median, median, median, max] (the
first cycle first where the issue names it), which keeps each statistic.
The sweep figures here are not measurements: they are made up from
FACTS.md's per-GiB costs only to draw the plots, and are never written
to docs/results.

Prints one line per check; exits 1 if any fails.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402

GiB, MiB = compare.GiB, compare.MiB
failures = []


def check(what, ok, detail=""):
    print(f"{'ok' if ok else 'FAIL'}   {what}" + (f": {detail}" if detail and not ok else ""))
    if not ok:
        failures.append(what)


def cycles(lo, med, hi, first=None):
    c = [lo, med, med, med, hi]
    if first is not None:
        c = [first, lo, med, med, hi]
    return c


def case(name, layout, backup, pause, resume):
    return {"name": name, "bytes": compare.layout_bytes(layout), "count": sum(n for n, _ in layout),
            "backup": backup, "pause_ms": pause, "resume_ms": resume, "status": "ok"}


def ok(cases, **kw):
    return dict({"status": "ok", "complete": True, "rc": 0, "cases": cases, "notes": [], "unsupported": []}, **kw)


def sample_results():
    """Issue 11's tables as bench/compare.py's results."""
    L1, L2, L3 = [[1, 64 * GiB]], [[1024, 16 * MiB]], [[256, 64 * MiB]]
    t = {
        "discard-one": {"layout": L1, "backup": False, "by": {
            "tms": ok([case("discard-one", L1, False, cycles(29.8, 32.6, 47.0), cycles(2.1, 3.0, 338.5))]),
            "vramd": ok([case("discard-one", L1, False, cycles(29.0, 30.8, 48.5), cycles(14.3, 128.9, 135.1))]),
            "raw": {"status": "skipped", "why": "not in the issue's table", "cases": []}}},
        "discard-many": {"layout": L2, "backup": False, "by": {
            "tms": ok([case("discard-many", L2, False, cycles(44.6, 46.8, 47.2), cycles(44.1, 45.5, 47.6))]),
            "vramd": ok([case("discard-many", L2, False, cycles(8.1, 9.3, 12.5), cycles(26.9, 28.2, 35.9))])}},
        "host": {"layout": L3, "backup": True, "by": {
            "tms": ok([case("host", L3, True, cycles(6204, 6661, 11354), cycles(1819, 1863, 1996))],
                      rc=139, notes=["exited with rc 139 after saving its figures (upstream's segfault at exit)"]),
            "tms-retain": ok([case("host", L3, True, cycles(330.5, 333.8, 333.8, first=6210),
                                   cycles(326.2, 329.6, 332.9))]),
            "vramd": ok([case("host", L3, True, cycles(321.7, 5225.6, 5560.2), cycles(1097.3, 1180.8, 1428.1))],
                        unsupported=["compat: no retain_cpu_backup property (vramd always retains)"]),
            "vramd-retain": ok([case("host", L3, True, cycles(318.0, 320.0, 322.0), cycles(314.0, 316.0, 318.0))])}},
    }
    rl_med = {  # phase: (TMS default, TMS retaining, vramd, vramd retaining)
        "engine_pause": (7254, 378.6, 350.1, 340.0), "trainer_alloc_write": (270.4, 275.6, 224.4, 224.0),
        "trainer_free": (50.7, 58.4, 47.4, 47.0), "wake_weights": (2202, 571.0, 564.7, 550.0),
        "wake_kv": (44.1, 37.1, 38.6, 38.0), "total": (9631, 1317, 1228, 1200)}
    rl = {"spec": {"weights": L3, "kv": L1, "graph_bytes": 0, "trainer_bytes": 100 * GiB},
          "by": {b: ok([], phases={k: [v[i]] * 5 for k, v in rl_med.items()})
                 for i, b in enumerate(("tms", "tms-retain", "vramd", "vramd-retain"))}}
    # Made-up sweep points (see the docstring): FACTS.md's ~0.6 ms/GiB release, a fixed
    # cost per allocation, and a per-mapper step.
    def pt(x, p, r):
        return {"name": f"x{x}", "bytes": int(x * GiB), "count": 1, "mappers": x, "status": "ok",
                "pause_ms": [p * 0.9, p, p * 1.2], "resume_ms": [r * 0.9, r, r * 1.3]}
    sweeps = {
        "size": {"by": {b: ok([pt(g, 0.6 * g * f + 0.1, 0.05 * g * f + 0.2) for g in (1, 4, 16, 64)])
                        for b, f in (("tms", 1.3), ("vramd", 1.0), ("raw", 0.9))}},
        "count": {"by": {b: ok([dict(pt(1, 40 + n * f, 3 + n * f), count=n) for n in (1, 16, 256, 4096)])
                         for b, f in (("tms", 0.045), ("vramd", 0.008), ("raw", 0.005))}},
        "mappers": {"by": {"vramd": ok([pt(n, 10 + 0.5 * n, 12 + 2 * n) for n in range(1, 9)])}},
    }
    return {"env": {"probe": {"device": "NVIDIA H200 (issue 11's figures)", "torch": "2.11"},
                    "tms": {"version": "0.0.10b1"}, "args": {"cycles": 5, "tms_hook": "torch"}},
            "table": t, "rl": rl, "sweeps": sweeps, "notes": ["sample data from issue 11"]}


def test_parsing():
    check("parse_size", compare.parse_size("64G") == 64 * GiB and compare.parse_size("16MiB") == 16 * MiB
          and compare.parse_size("2048") == 2048)
    check("parse_layout", compare.parse_layout("256x64M") == [[256, 64 * MiB]]
          and compare.parse_layout("1x1G+2x2M") == [[1, GiB], [2, 2 * MiB]])
    a = compare.arg_parser().parse_args(["--cycles", "7", "--sizes", "1,0.5", "--backends", "vramd,raw"])
    check("arguments", a.cycles == 7 and a.sizes == [1.0, 0.5] and a.rl_kv == [[1, 64 * GiB]]
          and a.trainer == 100 * GiB and a.mappers == list(range(1, 9)) and a.run_ms == 0)
    a = compare.arg_parser().parse_args(["--run-ms", "200"])
    check("--run-ms", a.run_ms == 200)
    try:
        compare.parse_size("lots")
        check("a bad size is refused", False)
    except Exception:
        check("a bad size is refused", True)


def test_parts(out):
    """libvram's debug line for a restore in parts, read back from a
    child's log and summed up per child as medians."""
    log = os.path.join(out, "parts.log")
    with open(log, "w") as f:
        f.write("libvram: debug: pool w: restored in parts, 20 chunk(s): copies 330.50 ms, between them 4.20 ms\n"
                "libvram: debug: pool w: mapped 2 chunk(s), 128 MiB, in 0.31 ms; restored in 6.45 ms; more to come\n"
                "libvram: debug: pool w: restored in parts, 20 chunk(s): copies 332.50 ms, between them 5.00 ms\n"
                "libvram: debug: pool w: restored in parts, 18 chunk(s): copies 340.00 ms, between them 9.00 ms\n")
    parts = compare.restores_in_parts(log)
    check("restores in parts read from a child's log",
          len(parts) == 3 and parts[0] == {"chunks": 20, "copy_ms": 330.5, "gap_ms": 4.2}, parts)
    check("a missing log has none", compare.restores_in_parts(os.path.join(out, "none.log")) == [])
    lines = compare.parts_lines({"table": {"host": {"by": {"vramd-retain": {"parts": parts}}}},
                                 "rl": {"by": {"vramd": {"parts": []}}}})
    check("their medians, one line per child",
          lines == ["- host through vramd retain: 3 restore(s) in parts of 20 chunks, copies 332.5 ms, "
                    "between them 5.00 ms (medians)"], lines)


def test_report(out):
    res = sample_results()
    summ = compare.report(res, out)
    rows = {r["workload"]: r for r in summ["rows"]}
    many = rows["discard, 1024 x 16 MiB"]
    check("ratio of medians", abs(many["ratio_pause_ms"] - 9.3 / 46.8) < 1e-9, many["ratio_pause_ms"])
    one = rows["discard, 64 GiB"]
    check("min / median / max", one["vramd_resume_ms"]["min"] == 14.3 and one["vramd_resume_ms"]["median"] == 128.9
          and one["vramd_resume_ms"]["max"] == 135.1)
    ret = rows["same, both with retain_cpu_backup"]
    check("the retained row puts tms-retain against vramd-retain",
          ret["tms_pause_ms"]["first"] == 6210 and ret["vramd_pause_ms"]["median"] == 320.0)
    check("a skipped floor is no figure", one["raw_pause_ms"] is None and one["floor_ratio_pause_ms"] is None)
    rl = {r["key"]: r for r in summ["rl"]}
    check("RL ratios", abs(rl["total"]["ratio_tms"] - 1228 / 9631) < 1e-9
          and abs(rl["total"]["ratio_tms_retain"] - 1200 / 1317) < 1e-9)
    v = compare.verdict(summ)
    check("the verdict names the cells where vramd is slower",
          "discard, 64 GiB resume" in v[0] and "discard, 1024 x 16 MiB" not in v[0], v)
    md = open(os.path.join(out, "compare.md")).read()
    check("compare.md has both tables", "| discard, 64 GiB | 29.8 / 32.6 / 47.0 | 29.0 / 30.8 / 48.5 | 0.94 |" in md
          and "| total | 9631.0 | 1317.0 | 1228.0 | 1200.0 | - | 0.13 | 0.91 | - |" in md, md[:400])
    check("unsupported features are listed", "no retain_cpu_backup property" in md)
    lines = open(os.path.join(out, "compare.csv")).read().splitlines()
    # 8 cases x 2 metrics x 5 cycles; 4 RL backends x 6 phases x 5; the size and count
    # sweeps 3 backends x 4 points x 2 metrics x 3 cycles each; mappers 8 x 2 x 3
    want = 1 + 8 * 2 * 5 + 4 * 6 * 5 + 2 * (3 * 4 * 2 * 3) + 8 * 2 * 3
    check("compare.csv has every figure", len(lines) == want, f"{len(lines)} lines, want {want}")
    j = json.load(open(os.path.join(out, "compare.json")))
    check("compare.json has the summary", "summary" in j and len(j["summary"]["rows"]) == 4)
    try:
        import matplotlib  # noqa: F401
        pngs = [f for f in ("compare_size.png", "compare_count.png", "compare_mappers.png")
                if os.path.getsize(os.path.join(out, f)) > 1000]
        check("plots drawn", len(pngs) == 3, pngs)
    except ImportError:
        print("skip   plots: no matplotlib here")
    r = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "--render",
                        os.path.join(out, "compare.json"), "--out", os.path.join(out, "again")],
                       capture_output=True, text=True)
    check("--render of compare.json", r.returncode == 0 and os.path.exists(os.path.join(out, "again", "compare.md")),
          r.stdout[-500:] + r.stderr[-500:])


def test_skip(out):
    have_torch = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    if have_torch:
        print("skip   exit 77 without PyTorch: PyTorch is installed here")
        return
    r = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "--out", out],
                       capture_output=True, text=True)
    check("exit 77 without PyTorch", r.returncode == 77 and "skipped: no PyTorch" in r.stdout,
          f"rc {r.returncode}: {r.stdout} {r.stderr}")


def test_mappers(out):
    build = os.environ.get("VRAM_BUILD") or os.path.join(ROOT, "build")
    if not os.path.exists(os.path.join(build, "vramd")):
        print(f"skip   mapper sweep: no {build}/vramd (make first)")
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import vramtest

    d = vramtest.Daemon(backend="host", capacity="512M", devices=1)
    try:
        spec = os.path.join(out, "mappers.spec.json")
        result = os.path.join(out, "mappers.result.json")
        with open(spec, "w") as f:
            json.dump({"kind": "mappers", "cycles": 2, "mappers": [1, 3], "bytes": 64 * MiB}, f)
        env = dict(os.environ, VRAM_SOCKET=d.socket, VRAM_BUILD=build, PYTHONPATH=os.path.join(ROOT, "python"))
        r = subprocess.run([sys.executable, os.path.join(HERE, "compare_child.py"), "--backend", "vramd",
                            "--spec", spec, "--result", result], env=env, capture_output=True, text=True,
                           timeout=120)
        res = json.load(open(result))
        cs = res.get("cases", [])
        check("mapper sweep on the host backend", r.returncode == 0 and res["complete"] and len(cs) == 2
              and all(c["status"] == "ok" and len(c["pause_ms"]) == 2 for c in cs),
              f"rc {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}\n{json.dumps(res)[:800]}")
    finally:
        rc = d.stop()
        check("vramd exits cleanly after the mapper sweep", rc == 0, d.log()[-2000:])


# A stand-in for torch, for create_probe.py's trainer: its calls, doing
# nothing (the driver is the fake, so there is no device anyway).
FAKE_TORCH = """
uint8 = "uint8"


class _T:
    def __init__(self, n):
        self.n = n

    def fill_(self, v):
        pass


def zeros(n, device=None):
    return _T(n)


def empty(n, dtype=None, device=None):
    return _T(n)


class cuda:
    synchronize = staticmethod(lambda: None)
    empty_cache = staticmethod(lambda: None)
"""


def test_create_probe(out):
    """bench/create_probe.py's every mode, end to end, against the fake
    driver (tests/unit/cuda_fake/libcuda_fake.c) at a small scale: its
    calls and its bookkeeping, not the driver's timing."""
    cc = shutil.which("cc")
    if not cc:
        print("skip   create_probe.py: no C compiler for the fake driver")
        return
    lib = os.path.join(out, "fakecuda")
    os.makedirs(os.path.join(out, "faketorch", "torch"))
    os.makedirs(lib)
    with open(os.path.join(out, "faketorch", "torch", "__init__.py"), "w") as f:
        f.write(FAKE_TORCH)
    r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", os.path.join(lib, "libcuda.so.1"),
                        os.path.join(ROOT, "tests", "unit", "cuda_fake", "libcuda_fake.c"), "-lpthread"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        check("create_probe.py: the fake driver builds", False, r.stderr[-1500:])
        return
    modes = ["wake", "wake-spread", "floor", "floor-interleaved", "pump:5:2", "pump-all-hold:5:2",
             "floor-pump:5", "floor-chunks:2", "peer:2", "peer-paced:3"]
    env = dict(os.environ, LD_LIBRARY_PATH=lib, COMPARE_BASE_PYTHONPATH=os.path.join(out, "faketorch"))
    env.pop("VRAM_LIBCUDA", None)
    # Two flag sets each for the burst and the spread wake; two pumps;
    # four floor cases; two peer cases.
    probe_check(out, env, "create_probe.py", ["--gap", "5", "--modes", ",".join(modes)], 12, "kv_ms", 300,
                "every mode")
    # bench/export_probe.py's and copy_probe.py's every case, against the
    # same driver; export_probe's at two alignments of the range.
    probe_check(out, env, "export_probe.py", ["--gap", "1", "--aligns-mib", "0,64"], 60, "ms", 120,
                "every case")
    probe_check(out, env, "copy_probe.py", ["--gap", "1"], 17, "ms", 120, "every case")
    # The floor's engine work between a wake and its next sleep (--run-ms).
    r = subprocess.run([sys.executable, "-c", "import compare_raw; compare_raw.Driver(0).busy(5)"],
                       env=env, cwd=HERE, capture_output=True, text=True, timeout=60)
    check("compare_raw's Driver.busy runs against the fake driver", r.returncode == 0, r.stderr[-1500:])


def probe_check(out, env, script, args, n_rows, key, timeout, what):
    """Runs bench/SCRIPT at --scale 0.01 for 2 cycles with args against
    the fake driver (env) and checks it wrote n_rows rows of 2 figures
    (key) each."""
    js = os.path.join(out, script.replace(".py", ".json"))
    r = subprocess.run([sys.executable, os.path.join(HERE, script), "--scale", "0.01", "--cycles", "2"] + args +
                       ["--out", js], env=env, capture_output=True, text=True, timeout=timeout)
    rows = json.load(open(js)) if r.returncode == 0 and os.path.exists(js) else []
    check(f"{script} runs {what} against the fake driver",
          r.returncode == 0 and len(rows) == n_rows and all(len(x[key]) == 2 for x in rows),
          f"rc {r.returncode}, {len(rows)} rows\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")


def main():
    out = tempfile.mkdtemp(prefix="compare-selftest-")
    try:
        test_parsing()
        test_parts(out)
        test_report(out)
        test_skip(os.path.join(out, "skip"))
        test_mappers(out)
        test_create_probe(os.path.join(out, "probe"))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"{'all passed' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
