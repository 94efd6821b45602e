#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""vramd against upstream torch_memory_saver, side by side, in one run
(make bench-compare; issue 11). Needs a GPU and PyTorch; exits 77 without.

Every workload runs through five backends, each in a subprocess of its own
(bench/compare_child.py; the two libraries hook the same allocator and must
never share a process):

  tms         upstream torch_memory_saver (its default: host backups
              allocated at each pause and freed at each resume)
  tms-retain  upstream with retain_cpu_backup = True
  vramd       vram.compat.torch_memory_saver with upstream's default
              (backups given back after each resume)
  vramd-retain  the same with retain_cpu_backup = True (host workloads:
              the retention row and the RL step's retaining column)
  raw         the floor: the same allocations, one cuMemCreate per tensor,
              made in-process through libcuda (bench/compare_raw.py)

Workloads (the issue's tables): discard one 64 GiB tensor; discard 1024
tensors of 16 MiB; host backup 256 x 64 MiB; the co-located RL step (an
engine with those weights, a 64 GiB KV cache and a CUDA-graph pool pauses
them; a trainer process allocates 100 GiB, writes and frees it; the engine
wakes weights, KV, then the graph). Sweeps for the plots: time against pool
size, allocation count, and (vramd only) mappers of one pool.

Every pause and resume is timed from the call to its return with a device
synchronize on both sides. Cells are min / median / max over the cycles;
ratios are vramd's median over upstream's (below 1: vramd is faster).

Upstream is found built in --tms-dir (default $TMS_DIR, else .tms/): see
tools/tms-build.sh. Its library segfaults at interpreter exit; the child
has saved its figures by then, and rc 139 from a tms child is accepted.

Results: a table on stdout, and compare.json, compare.csv, compare.md and
the plots (compare_size.png, compare_count.png, compare_mappers.png; with
matplotlib) in --out (default $OUT, else build/compare-results/). Logs of
every child in OUT/logs/. --render OUT/compare.json prints and plots an
earlier run again (no GPU needed). COMPARE_VRAMD_ARGS adds options to
the vramd it starts (e.g. "--chunk-max 16G"); compare.json records them.

vramd runs as etc/vramd.service runs it: host backups in a tmpfs mounted
huge=within_size (host_backup_dir), which this script mounts in a
directory of its own when it can (root), and unmounts at the end;
--vramd-backups memfd keeps them in memfds (what vramd does without the
unit's TemporaryFileSystem=). compare.json records which.
"""

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "bench")
CHILD = os.path.join(HERE, "compare_child.py")
MiB = 1 << 20
GiB = 1 << 30
MARGIN = 3 * GiB
BACKENDS = ("tms", "tms-retain", "vramd", "vramd-retain", "raw")
LABEL = {"tms": "TMS", "tms-retain": "TMS retain", "vramd": "vramd", "vramd-retain": "vramd retain",
         "raw": "floor"}
TMS_CRASH_RCS = (139, -11)  # upstream's segfault at interpreter exit


# ---- arguments ------------------------------------------------------------


def parse_size(s):
    """'64G', '16M', '1024K', '2048' (bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", s, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 64G, 16M)")
    mult = {"": 1, "K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def parse_layout(s):
    """'1024x16M' -> [[1024, 16 MiB]]; '256x64M+1x1G' for mixed layouts."""
    out = []
    for part in s.split("+"):
        if "x" in part:
            n, size = part.split("x", 1)
            out.append([int(n), parse_size(size)])
        else:
            out.append([1, parse_size(part)])
    return out


def parse_list(s, conv=int):
    return [conv(x) for x in s.split(",") if x.strip()]


def size_str(n):
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB} GiB"
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n // MiB} MiB"


def layout_str(layout):
    return " + ".join(f"{size_str(b)}" if c == 1 else f"{c} x {size_str(b)}" for c, b in layout)


def layout_bytes(layout):
    return sum(c * b for c, b in layout)


def arg_parser():
    ap = argparse.ArgumentParser(
        prog="bench/compare.py",
        description="vramd against upstream torch_memory_saver, side by side (issue 11)",
    )
    ap.add_argument("--cycles", type=int, default=5, help="pause/resume cycles per workload (default 5)")
    ap.add_argument("--gap-ms", type=float, default=0, help="idle between a pause and its resume")
    ap.add_argument("--run-ms", type=float, default=0,
                    help="idle before each pause, as an engine runs between a wake and its next sleep "
                         "(0: each pause right after the last resume)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="subset of " + ",".join(BACKENDS))
    ap.add_argument("--workloads", default="discard-one,discard-many,host,rl",
                    help="subset of discard-one,discard-many,host,rl (or none)")
    ap.add_argument("--discard-one", type=parse_layout, default=parse_layout("1x64G"))
    ap.add_argument("--discard-many", type=parse_layout, default=parse_layout("1024x16M"))
    ap.add_argument("--host", type=parse_layout, default=parse_layout("256x64M"))
    ap.add_argument("--rl-weights", type=parse_layout, default=parse_layout("256x64M"))
    ap.add_argument("--rl-kv", type=parse_layout, default=parse_layout("1x64G"))
    ap.add_argument("--rl-graph", type=parse_size, default=parse_size("1G"),
                    help="the CUDA graph's pool (0: no graph)")
    ap.add_argument("--trainer", type=parse_size, default=parse_size("100G"))
    ap.add_argument("--trainer-tensor", type=parse_size, default=parse_size("1G"))
    ap.add_argument("--sweeps", default="size,count,mappers", help="subset of size,count,mappers (or none)")
    ap.add_argument("--sweep-cycles", type=int, default=5)
    ap.add_argument("--sizes", type=lambda s: parse_list(s, float), default=[1, 2, 4, 8, 16, 32, 64, 128],
                    help="size sweep, GiB (one discard tensor each)")
    ap.add_argument("--counts", type=parse_list, default=[1, 4, 16, 64, 256, 1024, 4096],
                    help="count sweep: tensors sharing --count-total")
    ap.add_argument("--count-total", type=parse_size, default=parse_size("64G"))
    ap.add_argument("--mappers", type=parse_list, default=list(range(1, 9)))
    ap.add_argument("--mapper-pool", type=parse_size, default=parse_size("16G"))
    ap.add_argument("--tms-dir", default=os.environ.get("TMS_DIR") or os.path.join(ROOT, ".tms"))
    ap.add_argument("--tms-hook", choices=("preload", "torch"), default="preload",
                    help="upstream's hook mode (default preload, its default; only preload pauses graphs)")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(
        os.environ.get("VRAM_BUILD") or os.path.join(ROOT, "build"), "compare-results"))
    ap.add_argument("--timeout", type=int, default=900, help="seconds per child")
    ap.add_argument("--vramd-backups", choices=("unit", "memfd"), default="unit",
                    help="vramd's host backups: in a huge-page tmpfs as vramd.service has them (default), or memfds")
    ap.add_argument("--render", metavar="JSON", help="print and plot an earlier compare.json; no GPU")
    return ap


# ---- what the machine has --------------------------------------------------

PROBE = r"""
import json, sys
try:
    import torch
except Exception as e:
    print(json.dumps({"torch": None, "why": f"{type(e).__name__}: {e}"})); sys.exit(0)
d = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.is_available()}
if d["gpu"]:
    free, total = torch.cuda.mem_get_info()
    d.update(device=torch.cuda.get_device_name(), free=free, total=total)
print(json.dumps(d))
"""


def probe_torch():
    """What torch sees, from a short-lived process (the parent holds no
    CUDA context: 0.5 GiB of device memory the children would lack)."""
    try:
        r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as e:
        return {"torch": None, "why": f"probe failed: {e}"}


def host_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def find_tms(tms_dir, hook):
    """Upstream built by tools/tms-build.sh: {"dir", "preload", "version"}
    or {"why"}."""
    pkg = os.path.join(tms_dir, "torch_memory_saver")
    if not os.path.isfile(os.path.join(pkg, "__init__.py")):
        return {"why": f"upstream torch_memory_saver is not built in {tms_dir} "
                       "(tools/tms-build.sh export here, then tools/tms-build.sh build on the GPU machine)"}
    info = {"dir": tms_dir}
    for d in (pkg, tms_dir):
        libs = sorted(f for f in os.listdir(d) if f.startswith("torch_memory_saver_hook_mode_preload") and f.endswith(".so"))
        if libs:
            info["preload"] = os.path.join(d, libs[-1])
            break
    if hook == "preload" and "preload" not in info:
        return {"why": f"{tms_dir} has no torch_memory_saver_hook_mode_preload*.so (rebuild with tools/tms-build.sh build)"}
    vfile = os.path.join(tms_dir, "TMS_VERSION")
    if os.path.exists(vfile):
        with open(vfile) as f:
            info["version"] = f.read().strip()
    return info


def preload_lib_path(so):
    """Extra LD_LIBRARY_PATH the preloaded library needs (its libcudart),
    when the loader cannot find it by itself."""
    try:
        out = subprocess.run(["ldd", so], capture_output=True, text=True, timeout=30).stdout
    except Exception:
        return []
    missing = [l.split()[0] for l in out.splitlines() if "not found" in l]
    if not missing:
        return []
    cands = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64"), "/usr/local/cuda/lib64"]
    try:
        r = subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                           capture_output=True, text=True, timeout=120)
        tdir = r.stdout.strip()
        if tdir:
            site = os.path.dirname(tdir)
            for sub in ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "torch/lib"):
                cands.append(os.path.join(site, sub) if not sub.startswith("torch") else os.path.join(tdir, "lib"))
    except Exception:
        pass
    found = []
    for m in missing:
        for c in cands:
            if os.path.exists(os.path.join(c, m)) and c not in found:
                found.append(c)
                break
    return found


# ---- running the children ----------------------------------------------------


class Runner:
    def __init__(self, a, out, tms, socket):
        self.a, self.out, self.tms, self.socket = a, out, tms, socket
        self.logs = os.path.join(out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.seq = 0
        self.preload_extra = None

    def env(self, backend):
        env = dict(os.environ)
        for k in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TMS_RETAIN_CPU_BACKUP"):
            env.pop(k, None)
        # The caller's PYTHONPATH (where torch may live) stays, behind
        # the one package the backend needs; the trainer gets it alone.
        base = os.environ.get("PYTHONPATH", "")
        env["COMPARE_BASE_PYTHONPATH"] = base
        env["PYTHONPATH"] = ":".join(p for p in (os.path.join(ROOT, "python"), base) if p)
        env.setdefault("VRAM_BUILD", os.path.join(ROOT, "build"))
        if backend.startswith("tms"):
            env["PYTHONPATH"] = ":".join(p for p in (self.tms["dir"], base) if p)
            if self.a.tms_hook == "preload":
                env["LD_PRELOAD"] = self.tms["preload"]
                if self.preload_extra is None:
                    self.preload_extra = preload_lib_path(self.tms["preload"])
                extra = self.preload_extra
                if extra:
                    env["LD_LIBRARY_PATH"] = ":".join(extra + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        elif backend.startswith("vramd"):
            env["VRAM_SOCKET"] = self.socket
        return env

    def run(self, backend, name, spec):
        """Runs one child; returns its result with "status" and "rc"."""
        self.seq += 1
        stem = f"{self.seq:02d}-{name}-{backend}"
        spec_path = os.path.join(self.logs, stem + ".spec.json")
        res_path = os.path.join(self.logs, stem + ".result.json")
        log_path = os.path.join(self.logs, stem + ".log")
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        print(f"-- {name} through {backend}", flush=True)
        t0 = time.monotonic()
        with open(log_path, "w") as log:
            try:
                p = subprocess.run([sys.executable, CHILD, "--backend", backend, "--spec", spec_path,
                                    "--result", res_path], env=self.env(backend), stdout=log,
                                   stderr=subprocess.STDOUT, timeout=self.a.timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        try:
            with open(res_path) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {"backend": backend, "complete": False, "cases": []}
        res["rc"] = rc
        res["log"] = os.path.relpath(log_path, self.out)
        if backend.startswith("vramd"):
            res["parts"] = restores_in_parts(log_path)
        res["wall_s"] = time.monotonic() - t0
        if res.get("complete") and rc == 0:
            res["status"] = "ok"
        elif res.get("complete") and backend.startswith("tms") and rc in TMS_CRASH_RCS:
            res["status"] = "ok"
            res.setdefault("notes", []).append(f"exited with rc {rc} after saving its figures (upstream's segfault at exit)")
        else:
            res["status"] = "failed"
            with open(log_path) as f:
                tail = f.read()[-3000:]
            res["why"] = res.get("error") or f"rc {rc}"
            print(f"   FAILED ({res['why']}); the end of {log_path}:\n{tail}", flush=True)
        if res["status"] == "ok":
            print(f"   done in {res['wall_s']:.0f} s" + (f" (rc {rc})" if rc else ""), flush=True)
        return res


PARTS_LINE = re.compile(r"restored in parts, (\d+) chunk\(s\): copies ([\d.]+) ms, between them ([\d.]+) ms")


def restores_in_parts(log_path):
    """libvram's debug line for each restore in parts in a child's log
    (VRAM_LOG=debug): its chunks, and the ms of its copies and between
    them (what the device waited for: a map, the daemon's event)."""
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    return [{"chunks": int(n), "copy_ms": float(c), "gap_ms": float(g)} for n, c, g in PARTS_LINE.findall(text)]


def parts_lines(results):
    """One line per vramd child that restored in parts: medians of its
    copies and of the time between them."""
    runs = [(w, t.get("by", {})) for w, t in results.get("table", {}).items()]
    runs.append(("rl", results.get("rl", {}).get("by", {})))
    L = []
    for w, by in runs:
        for b in ("vramd", "vramd-retain"):
            parts = (by.get(b) or {}).get("parts") or []
            if parts:
                L.append(f"- {w} through {LABEL[b]}: {len(parts)} restore(s) in parts of "
                         f"{statistics.median(p['chunks'] for p in parts):g} chunks, copies "
                         f"{statistics.median(p['copy_ms'] for p in parts):.1f} ms, between them "
                         f"{statistics.median(p['gap_ms'] for p in parts):.2f} ms (medians)")
    return L


def skipped(why):
    print(f"   skipped: {why}", flush=True)
    return {"status": "skipped", "why": why, "cases": []}


# ---- the run -------------------------------------------------------------------


def run_all(a, probe, out):
    backends = [b for b in parse_list(a.backends, str)]
    for b in backends:
        if b not in BACKENDS:
            raise SystemExit(f"compare: unknown backend {b} (one of {', '.join(BACKENDS)})")
    workloads = [] if a.workloads == "none" else parse_list(a.workloads, str)
    sweeps = [] if a.sweeps == "none" else parse_list(a.sweeps, str)
    results = {"env": {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                       "probe": probe, "args": {k: v for k, v in vars(a).items()},
                       "host_available": host_available()},
               "table": {}, "rl": {}, "sweeps": {}, "notes": []}
    unavailable = {}
    tms = find_tms(a.tms_dir, a.tms_hook)
    results["env"]["tms"] = tms
    if "why" in tms:
        for b in ("tms", "tms-retain"):
            unavailable[b] = tms["why"]
        results["notes"].append(tms["why"])
        print(f"compare: {tms['why']}; its cells are skipped")
    daemon = None
    if "vramd" in backends or "vramd-retain" in backends:
        try:
            sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
            import vramtest

            # COMPARE_VRAMD_ARGS: more daemon options (e.g. "--chunk-max 16G"
            # to try another chunk layout), recorded in the results.
            extra = ["--ack-timeout-ms", "120000", "--log-level", "info"]
            huge_dir = huge_tmpfs_mount() if a.vramd_backups == "unit" else None
            if huge_dir:
                extra += ["--set", "host_backup_dir=" + huge_dir]
            results["env"]["vramd_backups"] = (
                "tmpfs huge=within_size at " + huge_dir if huge_dir else
                "memfd" + (" (no huge-page tmpfs could be mounted: not root?)" if a.vramd_backups == "unit" else ""))
            extra += os.environ.get("COMPARE_VRAMD_ARGS", "").split()
            results["env"]["vramd_args"] = extra
            daemon = vramtest.Daemon(backend="cuda", extra=extra)
        except Exception as e:
            huge_tmpfs_unmount()
            unavailable["vramd"] = "vramd did not start: " + " ".join(str(e).split())[:400]
            unavailable["vramd-retain"] = unavailable["vramd"]
            results["notes"].append(unavailable["vramd"])
            print(f"compare: {unavailable['vramd']}; its cells are skipped")
    runner = Runner(a, out, tms, daemon.socket if daemon else None)
    free = probe["free"]
    host = results["env"]["host_available"]

    def fits(nbytes, backup_bytes=0):
        if nbytes + MARGIN > free:
            return f"{size_str(nbytes)} does not fit the device ({size_str(free)} free)"
        if backup_bytes and host is not None and 2 * backup_bytes > host:
            return f"host backups of {size_str(backup_bytes)} need twice that in host memory ({size_str(host)} available)"
        return None

    def each(name, spec, nbytes, backup_bytes, only=None):
        cell = {}
        why = fits(nbytes, backup_bytes)
        for b in backends:
            if only and b not in only:
                continue
            if b in unavailable:
                cell[b] = skipped(unavailable[b])
            elif why:
                cell[b] = skipped(why)
            else:
                cell[b] = runner.run(b, name, spec)
        return cell

    base = {"cycles": a.cycles, "gap_ms": a.gap_ms, "run_ms": a.run_ms, "tms_hook": a.tms_hook}
    try:
        for w in workloads:
            if w in ("discard-one", "discard-many", "host"):
                layout = getattr(a, w.replace("-", "_"))
                backup = w == "host"
                spec = dict(base, kind="cycles", cases=[{"name": w, "tag": w, "sizes": layout, "backup": backup}])
                nbytes = layout_bytes(layout)
                only = None if backup else ("tms", "vramd", "raw")  # retention only matters with backups
                results["table"][w] = {"layout": layout, "backup": backup,
                                       "by": each(w, spec, nbytes, nbytes if backup else 0, only)}
            elif w == "rl":
                spec = dict(base, kind="rl", weights=a.rl_weights, kv=a.rl_kv, graph_bytes=a.rl_graph,
                            trainer_bytes=a.trainer, trainer_tensor_bytes=a.trainer_tensor)
                engine = layout_bytes(a.rl_weights) + layout_bytes(a.rl_kv) + a.rl_graph
                why = fits(engine, layout_bytes(a.rl_weights)) or (
                    None if a.trainer + 2 * MARGIN <= free else
                    f"the trainer's {size_str(a.trainer)} does not fit ({size_str(free)} free)")
                by = {}
                for b in backends:
                    if b in unavailable:
                        by[b] = skipped(unavailable[b])
                    elif why:
                        by[b] = skipped(why)
                    else:
                        by[b] = runner.run(b, "rl", spec)
                results["rl"] = {"spec": spec, "by": by}
            else:
                raise SystemExit(f"compare: unknown workload {w}")
        sweep_backends = [b for b in ("tms", "vramd", "raw") if b in backends]
        for s in sweeps:
            if s in ("size", "count"):
                if s == "size":
                    layouts = [[[1, int(g * GiB)]] for g in a.sizes]
                else:
                    layouts = []
                    for n in a.counts:
                        each_ = a.count_total // n // (2 * MiB) * (2 * MiB)
                        if each_ == 0:
                            print(f"compare: count sweep: {n} allocations of {size_str(a.count_total)} "
                                  "would be under 2 MiB each: skipped")
                            continue
                        layouts.append([[n, each_]])
                cases = [{"name": f"{s}-{layout_str(l)}", "tag": f"{s}{i}", "sizes": l, "backup": False}
                         for i, l in enumerate(layouts)]
                spec = dict(base, kind="cycles", cycles=a.sweep_cycles, cases=cases)
                by = {}
                for b in sweep_backends:
                    by[b] = skipped(unavailable[b]) if b in unavailable else runner.run(b, f"sweep-{s}", spec)
                results["sweeps"][s] = {"by": by}
            elif s == "mappers":
                spec = {"kind": "mappers", "cycles": a.sweep_cycles, "mappers": a.mappers,
                        "bytes": a.mapper_pool, "backup": False}
                if "vramd" not in backends:
                    continue
                if "vramd" in unavailable:
                    r = skipped(unavailable["vramd"])
                elif fits(a.mapper_pool + max(a.mappers) * GiB):
                    # each mapper holds a context of ~0.5 GiB
                    r = skipped(fits(a.mapper_pool + max(a.mappers) * GiB))
                else:
                    r = runner.run("vramd", "sweep-mappers", spec)
                results["sweeps"]["mappers"] = {"by": {"vramd": r}}
            else:
                raise SystemExit(f"compare: unknown sweep {s}")
    finally:
        if daemon is not None:
            try:
                shutil.copy(daemon.log_path, os.path.join(out, "vramd.log"))
            except OSError:
                pass
            rc = daemon.stop()
            if rc != 0:
                results["notes"].append(f"vramd exited with {rc}")
        huge_tmpfs_unmount()
    return results


HUGE_TMPFS = []


def huge_tmpfs_mount():
    """Mounts a tmpfs with huge pages (as vramd.service's
    TemporaryFileSystem= has one) in a new directory; its path, or None
    where that cannot be done (not root)."""
    import tempfile

    d = tempfile.mkdtemp(prefix="vramd-compare-backup-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "huge=within_size,size=90%,mode=0700",
                            "vramd-compare", d], capture_output=True, text=True)
        err = r.stderr.strip() if r.returncode else None
    except OSError as e:
        err = str(e)
    if err is not None:
        print(f"compare: no huge-page tmpfs for vramd's host backups ({err}); memfds instead")
        os.rmdir(d)
        return None
    HUGE_TMPFS.append(d)
    return d


def huge_tmpfs_unmount():
    while HUGE_TMPFS:
        d = HUGE_TMPFS.pop()
        subprocess.run(["umount", d])
        os.rmdir(d)


# ---- figures ----------------------------------------------------------------------


def stats(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals),
            "first": vals[0], "n": len(vals)}


def ratio(a, b):
    return a / b if a is not None and b else None


def cell(s):
    return "-" if s is None else f"{s['min']:.1f} / {s['median']:.1f} / {s['max']:.1f}"


def num(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"


def case_of(res, i=0):
    if not res or res.get("status") != "ok":
        return None
    cs = res.get("cases", [])
    if i < len(cs) and cs[i].get("status") == "ok":
        return cs[i]
    return None


def metric(res, m, i=0):
    c = case_of(res, i)
    return stats(c[m]) if c else None


def status_of(res):
    if not res:
        return "not run"
    if res.get("status") == "ok":
        return "ok"
    return f"{res.get('status')}: {res.get('why', '')}"


TABLE_ROWS = (
    # (label, workload, upstream backend, vramd backend)
    ("discard, {layout}", "discard-one", "tms", "vramd"),
    ("discard, {layout}", "discard-many", "tms", "vramd"),
    ("host backup, {layout}", "host", "tms", "vramd"),
    ("same, both with retain_cpu_backup", "host", "tms-retain", "vramd-retain"),
)

RL_PHASES = (
    ("engine pause", "engine_pause"),
    ("  of which KV", "pause_kv"),
    ("  of which weights", "pause_weights"),
    ("  of which graph", "pause_graph"),
    ("trainer allocates and writes", "trainer_alloc_write"),
    ("trainer frees", "trainer_free"),
    ("wake weights", "wake_weights"),
    ("wake KV", "wake_kv"),
    ("wake graph", "wake_graph"),
    ("total", "total"),
)


def summarize(results):
    """Rows of the main table, the RL table and the sweeps, with ratios."""
    rows = []
    for label, w, up, vb in TABLE_ROWS:
        t = results.get("table", {}).get(w)
        if not t:
            continue
        by = t["by"]
        layout = layout_str(t["layout"]) + (f" ({size_str(layout_bytes(t['layout']))})" if t["backup"] else "")
        row = {"workload": label.format(layout=layout), "key": w, "upstream": up,
               "bytes": layout_bytes(t["layout"]), "backup": t["backup"]}
        if vb not in by:
            vb = "vramd"
        for b, col in ((up, "tms"), (vb, "vramd"), ("raw", "raw")):
            for m in ("pause_ms", "resume_ms"):
                row[f"{col}_{m}"] = metric(by.get(b), m)
            row[f"{col}_status"] = status_of(by.get(b))
        for m in ("pause_ms", "resume_ms"):
            v, u, r = (row[f"{c}_{m}"] for c in ("vramd", "tms", "raw"))
            row[f"ratio_{m}"] = ratio(v and v["median"], u and u["median"])
            row[f"floor_ratio_{m}"] = ratio(v and v["median"], r and r["median"])
        rows.append(row)
    rl = []
    by = results.get("rl", {}).get("by", {})
    for label, k in RL_PHASES:
        row = {"phase": label, "key": k}
        for b in BACKENDS:
            r = by.get(b)
            ph = r.get("phases", {}).get(k) if r and r.get("status") == "ok" else None
            row[b] = stats(ph) if ph else None
        med = {b: (row[b]["median"] if row[b] else None) for b in BACKENDS}
        row["ratio_tms"] = ratio(med["vramd"], med["tms"])
        row["ratio_tms_retain"] = ratio(med["vramd-retain"] or med["vramd"], med["tms-retain"])
        row["ratio_floor"] = ratio(med["vramd"], med["raw"])
        rl.append(row)
    sweeps = {}
    for s, d in results.get("sweeps", {}).items():
        pts = {}
        for b, r in d.get("by", {}).items():
            if not r or r.get("status") != "ok":
                continue
            for c in r.get("cases", []):
                if c.get("status") != "ok" or not c.get("pause_ms"):
                    continue
                x = c["mappers"] if s == "mappers" else (c["bytes"] / GiB if s == "size" else c["count"])
                pts.setdefault(b, []).append({"x": x, "pause_ms": stats(c["pause_ms"]),
                                              "resume_ms": stats(c["resume_ms"])})
        sweeps[s] = pts
    return {"rows": rows, "rl": rl, "sweeps": sweeps}


def md_tables(results, summ):
    """The tables as Markdown lines (printed and written to compare.md)."""
    L = []
    env = results.get("env", {})
    p = env.get("probe", {})
    tms = env.get("tms", {})
    cycles = env.get("args", {}).get("cycles")
    run_ms = env.get("args", {}).get("run_ms") or 0
    runs = f", {run_ms:g} ms idle before each pause (--run-ms)" if run_ms else ""
    L.append(f"{p.get('device', '?')}, torch {p.get('torch', '?')}, upstream torch_memory_saver "
             f"{tms.get('version', tms.get('why', '?'))} (hook {env.get('args', {}).get('tms_hook', '?')}), "
             f"{cycles} cycles{runs}, ms min / median / max; x = vramd median / other median")
    if env.get("vramd_backups") or env.get("vramd_args"):
        L.append("")
        L.append(f"vramd's host backups: {env.get('vramd_backups', 'memfd')}; its options: {' '.join(env.get('vramd_args', []))}")
    L.append("")
    L.append("| workload | TMS pause | vramd pause | x | TMS resume | vramd resume | x | floor pause | floor resume | x floor pause | x floor resume |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in summ["rows"]:
        L.append(f"| {r['workload']} | {cell(r['tms_pause_ms'])} | {cell(r['vramd_pause_ms'])} | "
                 f"{num(r['ratio_pause_ms'], 2)} | {cell(r['tms_resume_ms'])} | {cell(r['vramd_resume_ms'])} | "
                 f"{num(r['ratio_resume_ms'], 2)} | {cell(r['raw_pause_ms'])} | {cell(r['raw_resume_ms'])} | "
                 f"{num(r['floor_ratio_pause_ms'], 2)} | {num(r['floor_ratio_resume_ms'], 2)} |")
    if summ["rows"]:
        L.append("")
        L.append("First cycle (ms):")
        L.append("")
        L.append("| workload | TMS pause | vramd pause | floor pause | TMS resume | vramd resume | floor resume |")
        L.append("|---|---|---|---|---|---|---|")
        for r in summ["rows"]:
            f = [num(r[k]["first"]) if r[k] else "-" for k in
                 ("tms_pause_ms", "vramd_pause_ms", "raw_pause_ms", "tms_resume_ms", "vramd_resume_ms", "raw_resume_ms")]
            L.append(f"| {r['workload']} | " + " | ".join(f) + " |")
        for r in summ["rows"]:
            if r["backup"]:
                for m, what in (("pause_ms", "backup"), ("resume_ms", "restore")):
                    s = r[f"vramd_{m}"]
                    if s:
                        gb = r["bytes"] / 1e9
                        L.append(f"- vramd {what} of {size_str(r['bytes'])}: {gb / (s['first'] / 1e3):.1f} GB/s "
                                 f"first cycle, {gb / (s['median'] / 1e3):.1f} GB/s median")
                break
    if any(any(row[b] for b in BACKENDS) for row in summ["rl"]):
        spec = results.get("rl", {}).get("spec", {})
        L.append("")
        L.append(f"Co-located RL step (weights {layout_str(spec.get('weights', []))} with host backup, KV "
                 f"{layout_str(spec.get('kv', []))}, graph pool {size_str(spec.get('graph_bytes', 0))}, trainer "
                 f"{size_str(spec.get('trainer_bytes', 0))}), medians, ms:")
        L.append("")
        L.append("| phase | TMS (default) | TMS retaining backups | vramd (default) | vramd retaining | floor "
                 "| x TMS | x TMS retain | x floor |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for row in summ["rl"]:
            m = [num(row[b]["median"]) if row[b] else "-" for b in BACKENDS]
            L.append(f"| {row['phase']} | " + " | ".join(m) + f" | {num(row['ratio_tms'], 2)} | "
                     f"{num(row['ratio_tms_retain'], 2)} | {num(row['ratio_floor'], 2)} |")
        by = results.get("rl", {}).get("by", {})
        for b in BACKENDS:
            r = by.get(b) or {}
            ch = r.get("checks", {})
            bad = [k for k, v in ch.items() if v and not all(v)]
            if bad:
                L.append(f"- {LABEL[b]}: content check failed: {', '.join(bad)}")
    pl = parts_lines(results)
    if pl:
        L.append("")
        L.append("vramd's restores in parts (libvram's debug log):")
        L.append("")
        L += pl
    for s, pts in summ["sweeps"].items():
        if not pts:
            continue
        xs = sorted({p["x"] for v in pts.values() for p in v})
        bs = [b for b in BACKENDS if b in pts]
        head = {"size": "GiB", "count": "allocations", "mappers": "mappers"}[s]
        L.append("")
        L.append(f"Sweep against {head}, medians, ms:")
        L.append("")
        L.append(f"| {head} | " + " | ".join(f"{LABEL[b]} pause" for b in bs) + " | "
                 + " | ".join(f"{LABEL[b]} resume" for b in bs) + " |")
        L.append("|---" * (1 + 2 * len(bs)) + "|")
        for x in xs:
            by_b = {b: {p["x"]: p for p in pts[b]}.get(x) for b in bs}
            pa = [num(by_b[b]["pause_ms"]["median"]) if by_b[b] else "-" for b in bs]
            re_ = [num(by_b[b]["resume_ms"]["median"]) if by_b[b] else "-" for b in bs]
            L.append(f"| {x:g} | " + " | ".join(pa) + " | " + " | ".join(re_) + " |")
    return L


def verdict(summ):
    """The issue's first criterion: vramd at least as fast as upstream in
    every cell. Returns lines."""
    worse = []
    for r in summ["rows"]:
        for m in ("pause_ms", "resume_ms"):
            x = r[f"ratio_{m}"]
            if x is not None and x > 1.0:
                worse.append(f"{r['workload']} {m[:-3]} ({x:.2f}x)")
    for row in summ["rl"]:
        for k, who in (("ratio_tms", "TMS"), ("ratio_tms_retain", "TMS retain")):
            if row[k] is not None and row[k] > 1.0 and not row["phase"].startswith("  "):
                worse.append(f"RL {row['phase']} vs {who} ({row[k]:.2f}x)")
    if not any(r[f"ratio_{m}"] is not None for r in summ["rows"] for m in ("pause_ms", "resume_ms")):
        return ["no cell has both vramd and upstream figures"]
    if worse:
        return ["vramd is slower than upstream in: " + "; ".join(worse)]
    return ["vramd is at least as fast as upstream in every cell measured"]


def write_csv(results, path):
    """Every figure, one a row: section, workload, backend, case, metric,
    cycle, ms."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "workload", "backend", "case", "bytes", "count", "metric", "cycle", "ms"])
        for name, t in results.get("table", {}).items():
            for b, r in t["by"].items():
                for c in r.get("cases", []):
                    for m in ("pause_ms", "resume_ms"):
                        for i, v in enumerate(c.get(m, [])):
                            w.writerow(["table", name, b, c["name"], c["bytes"], c["count"], m, i + 1, f"{v:.4f}"])
        for b, r in results.get("rl", {}).get("by", {}).items():
            for k, vals in r.get("phases", {}).items():
                for i, v in enumerate(vals):
                    w.writerow(["rl", "rl", b, "rl", "", "", k, i + 1, f"{v:.4f}"])
        for s, d in results.get("sweeps", {}).items():
            for b, r in d.get("by", {}).items():
                for c in r.get("cases", []):
                    for m in ("pause_ms", "resume_ms"):
                        for i, v in enumerate(c.get(m, [])):
                            w.writerow([f"sweep-{s}", s, b, c["name"], c.get("bytes", ""),
                                        c.get("mappers", c.get("count", "")), m, i + 1, f"{v:.4f}"])


def report(results, out):
    """Prints the tables and writes compare.json, .csv, .md and the plots."""
    os.makedirs(out, exist_ok=True)
    summ = summarize(results)
    lines = md_tables(results, summ)
    lines += [""] + verdict(summ)
    notes = list(results.get("notes", []))
    for sec in ("table", "sweeps"):
        for name, t in results.get(sec, {}).items():
            for b, r in t.get("by", {}).items():
                for n in r.get("notes", []) + [f"unsupported: {u}" for u in r.get("unsupported", [])]:
                    notes.append(f"{name} / {b}: {n}")
                if r.get("status") not in ("ok", None):
                    notes.append(f"{name} / {b}: {status_of(r)}")
    for b, r in results.get("rl", {}).get("by", {}).items():
        for n in r.get("notes", []) + [f"unsupported: {u}" for u in r.get("unsupported", [])]:
            notes.append(f"rl / {b}: {n}")
        if r.get("status") not in ("ok", None):
            notes.append(f"rl / {b}: {status_of(r)}")
    if notes:
        lines += [""] + [f"- {n}" for n in dict.fromkeys(notes)]
    sys.path.insert(0, HERE)
    import plot

    pngs = plot.plot_compare(summ["sweeps"], out)
    if pngs:
        lines += ["", "Plots: " + ", ".join(os.path.relpath(p, out) for p in pngs)]
    text = "\n".join(lines) + "\n"
    print()
    print(text, end="")
    results["summary"] = summ
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    write_csv(results, os.path.join(out, "compare.csv"))
    with open(os.path.join(out, "compare.md"), "w") as f:
        f.write(text)
    print(f"figures in {out}/compare.json, compare.csv, compare.md")
    return summ


def main(argv=None):
    a = arg_parser().parse_args(argv)
    if a.render:
        with open(a.render) as f:
            results = json.load(f)
        out = a.out if "--out" in (argv or sys.argv) else os.path.dirname(os.path.abspath(a.render))
        report(results, out)
        return 0
    if a.cycles < 1 or a.sweep_cycles < 1:
        raise SystemExit("compare: --cycles and --sweep-cycles must be 1 or more")
    probe = probe_torch()
    if not probe.get("torch"):
        print(f"compare: skipped: no PyTorch here ({probe.get('why')})")
        return 77
    if not probe.get("gpu"):
        print(f"compare: skipped: PyTorch {probe['torch']} sees no GPU")
        return 77
    out = a.out
    os.makedirs(out, exist_ok=True)
    print(f"compare: {probe['device']}, {size_str(probe['free'])} free of {size_str(probe['total'])}; "
          f"torch {probe['torch']} (CUDA {probe['cuda']}); results in {out}", flush=True)
    results = run_all(a, probe, out)
    report(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
