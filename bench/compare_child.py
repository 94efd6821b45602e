#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One backend of bench/compare.py, in a process of its own (upstream
torch_memory_saver and vramd's compat layer both hook torch's allocator and
must never share a process). Started by bench/compare.py; not meant to be
run by hand.

    compare_child.py --backend B --spec SPEC.json --result RESULT.json
    compare_child.py --trainer          the RL step's trainer (stdin/stdout)
    compare_child.py --mapper NAME      maps vramd pool NAME until stdin closes

B is tms (upstream, default backups), tms-retain (upstream with
retain_cpu_backup), vramd (vram.compat.torch_memory_saver) or raw (the
in-process floor, bench/compare_raw.py). The result file is rewritten after
every cycle, so what was measured survives a crash at interpreter exit
(upstream's known segfault, rc 139).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
GiB = 1 << 30
# Device memory a case leaves free beyond its own bytes (contexts, torch's
# cached blocks, the graph's small segments).
MARGIN = 3 * GiB


def expand(sizes):
    """[[count, bytes], ...] -> one size per allocation."""
    out = []
    for count, nbytes in sizes:
        out += [int(nbytes)] * int(count)
    return out


class Result:
    """The child's figures, saved atomically after every change."""

    def __init__(self, path, backend):
        self.path = path
        self.d = {"backend": backend, "complete": False, "notes": [], "unsupported": [], "cases": []}

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.d, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def note(self, text):
        self.d["notes"].append(text)
        print(text, flush=True)


# ---- backends ---------------------------------------------------------------


class TorchBackend:
    """torch_memory_saver's API, upstream's or vramd's."""

    def __init__(self, name, hook, res):
        import torch

        self.torch = torch
        self.name = name
        self.hook = hook
        if name.startswith("tms"):
            import torch_memory_saver as mod

            saver = mod.torch_memory_saver
            saver.hook_mode = hook
            # The property initializes the library (preload mode needs the
            # LD_PRELOAD that bench/compare.py set).
            saver.retain_cpu_backup = name == "tms-retain"
            res.d["retain_cpu_backup"] = bool(saver.retain_cpu_backup)
        else:
            import vram.compat.torch_memory_saver as mod

            saver = mod.torch_memory_saver
            saver.hook_mode = hook
            if hasattr(type(saver), "retain_cpu_backup"):
                saver.retain_cpu_backup = name == "vramd-retain"
                res.d["retain_cpu_backup"] = bool(saver.retain_cpu_backup)
            else:
                # vramd keeps its backups anyway; an engine that reads the
                # attribute would fail.
                res.d["unsupported"].append("compat: no retain_cpu_backup property (vramd always retains)")
        res.d["module"] = getattr(mod, "__file__", None)
        res.d["torch"] = torch.__version__
        res.d["device"] = torch.cuda.get_device_name()
        self.saver = saver

    def sync(self):
        self.torch.cuda.synchronize()

    def busy(self, ms):
        """Keeps the device running for ms, as an engine does between its
        wake and its next sleep: spin kernels (~0.1 ms each), one at a
        time, so that nothing is queued past the end."""
        end = time.perf_counter() + ms / 1000.0
        while time.perf_counter() < end:
            self.torch.cuda._sleep(200000)
            self.torch.cuda.synchronize()

    def mem_free(self):
        return self.torch.cuda.mem_get_info()[0]

    def group(self, tag, sizes, backup):
        return TorchGroup(self, tag, sizes, backup)

    def graph(self, tag, nbytes):
        return TorchGraph(self, tag, nbytes)


class TorchGroup:
    """A tag's tensors, each filled with its own byte."""

    def __init__(self, be, tag, sizes, backup):
        torch = be.torch
        self.be, self.tag = be, tag
        self.bytes = sum(sizes)
        with be.saver.region(tag=tag, enable_cpu_backup=backup):
            self.tensors = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in sizes]
        for i, t in enumerate(self.tensors):
            t.fill_(1 + i % 251)
        vals = [1 + i % 251 for i in range(len(sizes))]
        self.expect = torch.tensor(vals + vals, dtype=torch.uint8, device="cuda")
        be.sync()

    def pause(self):
        self.be.saver.pause(self.tag)

    def resume(self):
        self.be.saver.resume(self.tag)

    def content_ok(self):
        torch = self.be.torch
        got = torch.stack([t[0] for t in self.tensors] + [t[-1] for t in self.tensors])
        return bool(torch.equal(got, self.expect))


class TorchGraph:
    """A CUDA graph whose private pool is pausable under tag: it fills a
    buffer of nbytes and sums it (the buffer is freed inside the capture,
    so its memory stays in the graph's pool, as activations do)."""

    def __init__(self, be, tag, nbytes):
        torch = be.torch
        self.be, self.tag, self.nbytes = be, tag, nbytes
        self.bytes = nbytes
        # The same work once outside the capture (kernels loaded, as
        # torch's graph docs ask); its memory goes back before the capture
        # (which empties torch's cache itself).
        torch.full((nbytes,), 1, dtype=torch.uint8, device="cuda").sum(dtype=torch.int64)
        be.sync()
        torch.cuda.empty_cache()
        self.g = torch.cuda.CUDAGraph()
        with be.saver.cuda_graph(self.g, tag=tag):
            buf = torch.full((nbytes,), 1, dtype=torch.uint8, device="cuda")
            self.out = buf.sum(dtype=torch.int64)
            del buf
        if not self.content_ok():
            raise RuntimeError("the graph's first replay gave a wrong sum")

    def pause(self):
        self.be.saver.pause(self.tag)

    def resume(self):
        self.be.saver.resume(self.tag)

    def content_ok(self):
        self.g.replay()
        self.be.sync()
        return int(self.out.item()) == self.nbytes


class RawBackend:
    def __init__(self, res):
        import compare_raw

        self.raw = compare_raw
        self.drv = compare_raw.Driver(0)
        res.d["granularity"] = self.drv.granularity

    def sync(self):
        self.drv.sync()

    def busy(self, ms):
        """As TorchBackend.busy: memsets of a 64 MiB scratch allocation,
        one at a time, for ms."""
        self.drv.busy(ms)

    def mem_free(self):
        return self.drv.mem_info()[0]

    def group(self, tag, sizes, backup):
        return self.raw.Group(self.drv, sizes, backup)

    def graph(self, tag, nbytes):
        # The allocations torch makes for the graph's pool: the buffer's
        # segment and a small one for the sum.
        return self.raw.Group(self.drv, [nbytes, 2 * MiB], False)


def timed(be, fn):
    be.sync()
    t0 = time.perf_counter()
    fn()
    be.sync()
    return (time.perf_counter() - t0) * 1000.0


# ---- workloads ----------------------------------------------------------------


def engine_runs(be, spec):
    """The engine's time between a wake (or its first allocations) and
    its next sleep: --run-ms of work on the device, untimed (0: none).
    Work, not sleep: an idle H200 slows down (a 64 GiB pause took 73 ms
    after 200 ms idle against 31 back to back, through every backend;
    docs/results/h200-2026-12-02-s11, run 4)."""
    if spec.get("run_ms"):
        be.busy(spec["run_ms"])


def run_cycles(be, spec, res):
    """Each case: allocate, then pause/resume cycles; the case is left
    paused (or released) so the next case has the device."""
    for case in spec["cases"]:
        sizes = expand(case["sizes"])
        c = {"name": case["name"], "bytes": sum(sizes), "count": len(sizes),
             "backup": case["backup"], "pause_ms": [], "resume_ms": [], "freed": [],
             "content_ok": [], "status": "ok"}
        res.d["cases"].append(c)
        free = be.mem_free()
        if c["bytes"] + MARGIN > free:
            c["status"] = "skipped"
            c["why"] = f"{c['bytes'] / GiB:.1f} GiB does not fit ({free / GiB:.1f} GiB free)"
            res.note(f"{case['name']}: skipped: {c['why']}")
            res.save()
            continue
        g = be.group(case.get("tag", case["name"]), sizes, case["backup"])
        for _ in range(spec["cycles"]):
            engine_runs(be, spec)
            f0 = be.mem_free()
            c["pause_ms"].append(timed(be, g.pause))
            c["freed"].append(be.mem_free() - f0)
            if spec.get("gap_ms"):
                time.sleep(spec["gap_ms"] / 1000.0)
            c["resume_ms"].append(timed(be, g.resume))
            if case["backup"]:
                c["content_ok"].append(g.content_ok())
            res.save()
        print(f"{case['name']}: pause {c['pause_ms']} resume {c['resume_ms']}", flush=True)
        g.pause()
        if hasattr(g, "close"):
            g.close()


class Trainer:
    """The RL step's trainer: a plain torch process (no hooks)."""

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("TMS_")}
        env["PYTHONPATH"] = os.environ.get("COMPARE_BASE_PYTHONPATH", "")
        env.pop("VRAM_SOCKET", None)
        self.p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--trainer"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the trainer did not start: {line!r} (rc {self.p.poll()})")

    def step(self, nbytes, tensor_bytes):
        self.p.stdin.write(json.dumps({"bytes": nbytes, "tensor_bytes": tensor_bytes}) + "\n")
        self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        if "error" in r:
            raise RuntimeError(f"trainer: {r['error']}")
        return r

    def close(self):
        try:
            self.p.stdin.write(json.dumps({"quit": True}) + "\n")
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait(120)


def run_rl(be, spec, res):
    """The co-located RL step: the engine pauses KV, weights and the graph;
    the trainer allocates, writes and frees; the engine wakes weights, KV,
    then the graph. Every phase timed, every cycle."""
    trainer = Trainer()
    phases = {k: [] for k in (
        "pause_kv", "pause_weights", "pause_graph", "engine_pause",
        "trainer_alloc", "trainer_write", "trainer_alloc_write", "trainer_free",
        "wake_weights", "wake_kv", "wake_graph", "total")}
    checks = {"weights_ok": [], "graph_ok": []}
    res.d["phases"] = phases
    res.d["checks"] = checks
    w = be.group("weights", expand(spec["weights"]), True)
    kv = be.group("kv_cache", expand(spec["kv"]), False)
    graph = None
    if spec.get("graph_bytes"):
        if be.__class__ is TorchBackend and be.name.startswith("tms") and be.hook != "preload":
            res.d["unsupported"].append("tms: cuda_graph needs hook_mode=preload; no graph pool")
        else:
            graph = be.graph("cuda_graph", int(spec["graph_bytes"]))
    res.d["engine_bytes"] = w.bytes + kv.bytes + (graph.bytes if graph else 0)
    res.save()
    for _ in range(spec["cycles"]):
        engine_runs(be, spec)
        t = {}
        t["pause_kv"] = timed(be, kv.pause)
        t["pause_weights"] = timed(be, w.pause)
        t["pause_graph"] = timed(be, graph.pause) if graph else 0.0
        t["engine_pause"] = t["pause_kv"] + t["pause_weights"] + t["pause_graph"]
        tr = trainer.step(int(spec["trainer_bytes"]), int(spec["trainer_tensor_bytes"]))
        t["trainer_alloc"] = tr["alloc_ms"]
        t["trainer_write"] = tr["write_ms"]
        t["trainer_alloc_write"] = tr["alloc_ms"] + tr["write_ms"]
        t["trainer_free"] = tr["free_ms"]
        t["wake_weights"] = timed(be, w.resume)
        t["wake_kv"] = timed(be, kv.resume)
        t["wake_graph"] = timed(be, graph.resume) if graph else 0.0
        t["total"] = (t["engine_pause"] + t["trainer_alloc_write"] + t["trainer_free"]
                      + t["wake_weights"] + t["wake_kv"] + t["wake_graph"])
        for k, v in t.items():
            phases[k].append(v)
        checks["weights_ok"].append(w.content_ok())
        if graph:
            checks["graph_ok"].append(graph.content_ok())
        res.save()
        print("rl step: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()), flush=True)
    trainer.close()


def run_mappers(spec, res):
    """vramd only: one pool mapped by n processes (this one, the owner,
    and n-1 mappers); the owner times pool.pause()/resume(), which return
    once every mapper has unmapped/mapped."""
    import vram

    client = vram.Client(name="compare owner")
    client.start_thread()
    res.d["cases"] = []
    for n in spec["mappers"]:
        c = {"name": f"mappers-{n}", "mappers": n, "bytes": int(spec["bytes"]),
             "pause_ms": [], "resume_ms": [], "status": "ok"}
        res.d["cases"].append(c)
        name = f"compare.{os.getpid()}.m{n}"
        pool = client.create_pool(name, tag=f"m{n}", device=0, backup=bool(spec.get("backup")))
        pool.reserve(int(spec["bytes"]))
        procs = []
        try:
            for _ in range(n - 1):
                p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--mapper", name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                procs.append(p)
                line = p.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"mapper did not open {name}: {line!r}")
            for _ in range(spec["cycles"]):
                t0 = time.perf_counter()
                pool.pause()
                t1 = time.perf_counter()
                pool.resume()
                t2 = time.perf_counter()
                c["pause_ms"].append((t1 - t0) * 1000.0)
                c["resume_ms"].append((t2 - t1) * 1000.0)
                res.save()
        except Exception as e:  # recorded, the sweep goes on
            c["status"] = "failed"
            c["why"] = f"{type(e).__name__}: {e}"
            res.note(f"{c['name']}: {c['why']}")
        finally:
            for p in procs:
                p.stdin.close()
            for p in procs:
                p.wait(60)
            pool.close()
        print(f"{c['name']}: pause {c['pause_ms']} resume {c['resume_ms']}", flush=True)
        res.save()
    client.close()


# ---- helpers run as their own processes ------------------------------------


def trainer_main():
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("quit"):
            break
        try:
            n, each = cmd["bytes"], cmd["tensor_bytes"]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ts = [torch.empty(min(each, n - off), dtype=torch.uint8, device="cuda") for off in range(0, n, each)]
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for t in ts:
                t.fill_(7)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            t = None
            ts.clear()
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            r = {"alloc_ms": (t1 - t0) * 1e3, "write_ms": (t2 - t1) * 1e3, "free_ms": (t3 - t2) * 1e3}
        except Exception as e:
            r = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(r), flush=True)
    return 0


def mapper_main(name):
    import vram

    c = vram.Client(name="compare mapper")
    c.start_thread()
    p = c.open_pool(name)
    print("ready", flush=True)
    sys.stdin.read()
    p.close()
    c.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description="one backend of bench/compare.py")
    ap.add_argument("--backend", choices=("tms", "tms-retain", "vramd", "vramd-retain", "raw"))
    ap.add_argument("--spec")
    ap.add_argument("--result")
    ap.add_argument("--trainer", action="store_true")
    ap.add_argument("--mapper")
    a = ap.parse_args()
    if a.trainer:
        return trainer_main()
    if a.mapper:
        return mapper_main(a.mapper)
    if not (a.backend and a.spec and a.result):
        ap.error("--backend, --spec and --result are needed")
    with open(a.spec) as f:
        spec = json.load(f)
    res = Result(a.result, a.backend)
    res.d["kind"] = spec["kind"]
    res.save()
    sys.path.insert(0, HERE)
    try:
        if spec["kind"] == "mappers":
            run_mappers(spec, res)
        else:
            if a.backend == "raw":
                be = RawBackend(res)
            else:
                be = TorchBackend(a.backend, spec.get("tms_hook", "preload"), res)
            if spec["kind"] == "rl":
                run_rl(be, spec, res)
            else:
                run_cycles(be, spec, res)
        res.d["complete"] = True
    except Exception as e:
        import traceback

        traceback.print_exc()
        res.d["error"] = f"{type(e).__name__}: {e}"
    res.save()
    sys.stdout.flush()
    return 0 if res.d["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
