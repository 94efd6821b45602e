# SPDX-License-Identifier: Apache-2.0
"""etc/k8s/: the manifests validate offline against the fields of the
Kubernetes API they use (tests/python/k8s_schema.py, strict), hold together
(mounts name volumes, the ConfigMap exists, socket paths and the vram gid
agree between vramd and its workers), keep the security context small, and
the ConfigMap's vramd.conf is one the real vramd starts with."""

import copy
import glob
import os
import re
import shutil
import subprocess

import pytest

import k8s_schema
import vramtest

yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed")

K8S = os.path.join(vramtest.ROOT, "etc", "k8s")


def _load_all():
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for d in yaml.safe_load_all(f):
                if d is not None:
                    docs.append((os.path.basename(path), d))
    return docs


def _one(docs, kind, name=None):
    found = [d for _, d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"want one {kind} {name or ''}, have {len(found)}"
    return found[0]


def _daemonset():
    return _one(_load_all(), "DaemonSet", "vramd")


def _vramd_container(ds):
    return [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "vramd"][0]


def _conf(text):
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def test_every_manifest_validates():
    docs = _load_all()
    kinds = sorted({d["kind"] for _, d in docs})
    assert {"DaemonSet", "ConfigMap", "Namespace", "Pod", "Role", "RoleBinding", "ServiceAccount"} <= set(kinds)
    problems = []
    for f, d in docs:
        problems += [f"{f}: {p}" for p in k8s_schema.validate(d)]
    assert not problems, "\n".join(problems)


def test_the_validator_catches_mistakes():
    ds = _daemonset()
    cases = []
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    cases.append((bad, "unknown field"))
    bad = copy.deepcopy(ds)
    del bad["spec"]["selector"]
    cases.append((bad, "spec.selector: required"))
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["hostPID"] = "true"
    cases.append((bad, "want bool"))
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["type"] = "Dir"
    cases.append((bad, "is not one of"))
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "256MB"
    cases.append((bad, "is not a quantity"))
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"] = {"port": 9474}
    cases.append((bad, "exactly one of"))
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": True}
    cases.append((bad, "map of strings"))
    bad = copy.deepcopy(ds)
    bad["apiVersion"] = "extensions/v1beta1"
    cases.append((bad, "unknown apiVersion/kind"))
    bad = copy.deepcopy(ds)
    del bad["metadata"]["namespace"]
    cases.append((bad, "namespaced object"))
    for doc, want in cases:
        errs = k8s_schema.validate(doc)
        assert any(want in e for e in errs), (want, errs)


def test_daemonset_holds_together():
    docs = _load_all()
    ds = _one(docs, "DaemonSet", "vramd")
    ns = ds["metadata"]["namespace"]
    _one(docs, "Namespace", ns)
    tpl = ds["spec"]["template"]
    sel = ds["spec"]["selector"]["matchLabels"]
    assert sel.items() <= tpl["metadata"]["labels"].items(), "the selector does not match the pods"
    spec = tpl["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    c = _vramd_container(ds)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert set(mounts) <= set(vols), "a mount names no volume"
    assert set(vols) <= set(mounts), "a volume is not mounted"

    cm_name = vols["config"]["configMap"]["name"]
    cm = _one(docs, "ConfigMap", cm_name)
    assert cm["metadata"]["namespace"] == ns
    conf_path = c["command"][c["command"].index("--config") + 1]
    assert os.path.dirname(conf_path) == mounts["config"]["mountPath"]
    conf = _conf(cm["data"][os.path.basename(conf_path)])

    # The socket: in the hostPath folder, where the probes look too.
    sock = conf["socket"]
    run = [m for m in c["volumeMounts"] if vols[m["name"]].get("hostPath")]
    assert len(run) == 1 and os.path.dirname(sock) == run[0]["mountPath"]
    assert not run[0].get("readOnly"), "vramd creates the socket there"
    host_dir = vols[run[0]["name"]]["hostPath"]["path"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        cmd = c[probe]["exec"]["command"]
        assert cmd[0] == "vramctl" and cmd[cmd.index("--socket") + 1] == sock and cmd[-1] == "status", probe
    assert conf["socket_mode"] == "0660"

    # Workers reach that socket with the vram group.
    pod = _one(docs, "Pod")
    pv = [v for v in pod["spec"]["volumes"] if "hostPath" in v]
    assert len(pv) == 1 and pv[0]["hostPath"]["path"] == host_dir
    wc = pod["spec"]["containers"][0]
    wm = [m for m in wc["volumeMounts"] if m["name"] == pv[0]["name"]][0]
    env = {e["name"]: e.get("value") for e in wc.get("env", [])}
    assert env["VRAM_SOCKET"] == os.path.join(wm["mountPath"], os.path.basename(sock))
    gid = c["securityContext"]["runAsGroup"]
    assert gid in pod["spec"]["securityContext"]["supplementalGroups"], "the worker is not in the vram group"
    assert "nvidia.com/gpu" in wc["resources"]["limits"], "the worker gets its GPUs from the device plugin"

    # The controller's RBAC reaches the DaemonSet's pods.
    role = _one(docs, "Role", "vramd-controller")
    assert role["metadata"]["namespace"] == ns
    rules = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert {("pods", "list"), ("pods/exec", "create")} <= rules


def test_daemonset_keeps_privilege_small():
    ds = _daemonset()
    spec = ds["spec"]["template"]["spec"]
    c = _vramd_container(ds)
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    assert spec["automountServiceAccountToken"] is False
    # The GPUs come through the runtime, not the device plugin: a request
    # would take them away from the workers.
    for part in ("requests", "limits"):
        assert not any(k.startswith("nvidia.com/") or k.startswith("amd.com/") for k in c["resources"].get(part, {}))
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    assert "memory" not in c["resources"].get("limits", {}), "an OOM kill loses every backup"
    for v in spec["volumes"]:
        if "hostPath" in v:
            assert v["hostPath"]["path"] == "/run/vramd", "no other host path"


def test_the_configmap_conf_starts_vramd(tmp_path):
    """The real vramd reads the ConfigMap's vramd.conf (it refuses unknown
    keys), on the host backend and a test socket instead of the node's."""
    cm = _one(_load_all(), "ConfigMap", "vramd-config")
    conf = tmp_path / "vramd.conf"
    conf.write_text(cm["data"]["vramd.conf"])
    d = vramtest.Daemon(devices=1, extra=("--config", str(conf)))
    try:
        assert d.alive
        r = subprocess.run(
            [os.environ.get("VRAMCTL_BIN") or os.path.join(vramtest.build_dir(), "vramctl"),
             "--socket", d.socket, "status", "--json"],
            capture_output=True, text=True, timeout=30,
        )
        assert r.returncode == 0, r.stderr
    finally:
        assert d.stop() == 0, d.log()
    # A key it does not know stops it: the check above means something.
    conf.write_text(cm["data"]["vramd.conf"] + "no_such_key = 1\n")
    with pytest.raises(RuntimeError):
        vramtest.Daemon(devices=1, extra=("--config", str(conf))).stop()


def test_a_socket_connects_on_a_read_only_mount(tmp_path):
    """The worker pod mounts /run/vramd read-only: a socket still connects
    there (the kernel refuses writes on a read-only mount only to files,
    folders and links). Checked with a bind mount in a mount namespace."""
    unshare = shutil.which("unshare")
    if not unshare or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private bind mount")
    d = vramtest.Daemon(devices=1)
    try:
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        vramctl = os.environ.get("VRAMCTL_BIN") or os.path.join(vramtest.build_dir(), "vramctl")
        script = (
            f"mount --bind {d.dir} {mnt} && mount -o remount,bind,ro {mnt} || exit 77; "
            f"if touch {mnt}/probe 2>/dev/null; then echo writable; exit 1; fi; "
            f"exec {vramctl} --socket {mnt}/vramd.sock status"
        )
        r = subprocess.run([unshare, "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30)
        if r.returncode == 77:
            pytest.skip(f"no bind mounts here: {r.stderr.strip()}")
        assert r.returncode == 0, r.stdout + r.stderr
        assert re.search(r"^backend\s+host", r.stdout, re.M), r.stdout
    finally:
        assert d.stop() == 0
