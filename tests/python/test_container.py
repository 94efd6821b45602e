# SPDX-License-Identifier: Apache-2.0
"""etc/container/: the Containerfile, read statically (building it is
`make container`, not part of make test): images from debian:bookworm-slim
and the project's .debs only, nothing fetched from anywhere but Debian's
archive, apt's lists not left behind, and the daemon started as the
DaemonSet starts it. build-image.sh parses."""

import os
import re
import shlex
import shutil
import subprocess

import pytest

import vramtest

HERE = os.path.join(vramtest.ROOT, "etc", "container")
CONTAINERFILE = os.path.join(HERE, "Containerfile")
DEB_PATTERNS = {"vramd_*.deb", "libvram0_*.deb", "python3-vram_*.deb", "libvram-dev_*.deb"}
INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "COPY", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "CMD",
                "ENTRYPOINT", "LABEL", "USER", "WORKDIR", "EXPOSE"}


def _instructions(path=CONTAINERFILE):
    """(instruction, argument text) with continuation lines joined and
    comments dropped."""
    out = []
    cur = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    assert not cur, "a continuation line ends the file"
    return out


def _stages(ins):
    stages = {}
    name = None
    for word, arg in ins:
        if word == "FROM":
            m = re.match(r"^(\S+)(\s+AS\s+(\S+))?$", arg, re.I)
            assert m, arg
            name = m.group(3) or m.group(1)
            stages[name] = [("FROM", m.group(1))]
        else:
            assert name or word == "ARG", f"{word} before FROM"
            if name:
                stages[name].append((word, arg))
    return stages


def test_instructions_are_known_and_nothing_is_fetched():
    ins = _instructions()
    for word, arg in ins:
        assert word in INSTRUCTIONS, word
        assert word != "ADD", "ADD can fetch URLs; COPY the .debs"
        if word == "RUN":
            for bad in ("curl", "wget", "pip", "npm", "git ", "add-apt-repository", "http://", "https://",
                        "sources.list"):
                assert bad not in arg, f"RUN fetches from outside Debian's archive: {bad!r} in {arg!r}"
    args = [a for w, a in ins if w == "ARG"]
    assert "BASE=debian:bookworm-slim" in args


def test_stages_install_the_debs_and_clean_up():
    stages = _stages(_instructions())
    assert set(stages) == {"base", "vramd", "client"}
    assert stages["base"][0] == ("FROM", "${BASE}")
    for name in ("vramd", "client"):
        st = stages[name]
        assert st[0] == ("FROM", "base"), name
        copies = [a for w, a in st if w == "COPY"]
        assert len(copies) == 1, name
        *srcs, dst = copies[0].split()
        assert set(srcs) <= DEB_PATTERNS and dst == "/tmp/debs/", copies
        runs = [a for w, a in st if w == "RUN"]
        installs = [r for r in runs if "apt-get install" in r]
        assert len(installs) == 1, name
        run = installs[0]
        assert "apt-get update" in run and "rm -rf /var/lib/apt/lists/*" in run and "/tmp/debs" in run
        # Every package named is a copied .deb or a Debian package name.
        words = shlex.split(run.split("apt-get install", 1)[1].split("&&", 1)[0])
        pkgs = [w for w in words if not w.startswith("-")]
        for p in pkgs:
            assert p.startswith("/tmp/debs/") or re.match(r"^[a-z0-9][a-z0-9+.-]+$", p), p
        debs = {os.path.basename(p) for p in pkgs if p.startswith("/tmp/debs/")}
        assert debs == {s for s in srcs}, (name, debs, srcs)
        envs = [a for w, a in st if w == "ENV"]
        assert "VRAM_SOCKET=/run/vramd/vramd.sock" in envs, name
    assert "vramd_*.deb" in {os.path.basename(p) for p in _copied(stages["vramd"])}
    assert "python3-vram_*.deb" in {os.path.basename(p) for p in _copied(stages["client"])}


def _copied(stage):
    return [s for w, a in stage if w == "COPY" for s in a.split()[:-1]]


def test_the_daemon_starts_as_in_the_daemonset():
    yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed")
    stages = _stages(_instructions())
    cmd = [a for w, a in stages["vramd"] if w == "CMD"]
    assert len(cmd) == 1
    import json

    argv = json.loads(cmd[0])  # exec form: signals reach vramd itself
    with open(os.path.join(vramtest.ROOT, "etc", "k8s", "vramd.yaml"), encoding="utf-8") as f:
        ds = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "DaemonSet"][0]
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == argv
    assert ("VOLUME", '["/run/vramd"]') in stages["vramd"]
    assert ("STOPSIGNAL", "SIGTERM") in stages["vramd"]


def test_build_script_parses():
    bash = shutil.which("bash")
    if not bash:
        pytest.skip("no bash")
    script = os.path.join(HERE, "build-image.sh")
    assert os.access(script, os.X_OK)
    r = subprocess.run([bash, "-n", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    # Without the .debs it stops at once and says what to do.
    env = dict(os.environ, PATH=os.environ.get("PATH", ""))
    tool = shutil.which("true")
    r = subprocess.run([bash, script, "-d", "/nonexistent", "-t", tool, "-n"], capture_output=True, text=True,
                       timeout=30, env=env)
    assert r.returncode == 1 and "dpkg-buildpackage" in r.stderr, r.stderr
