# SPDX-License-Identifier: Apache-2.0
"""The compatibility layers' API surface, as engines call it, without torch:
vram.compat.torch_memory_saver (torch_memory_saver's module and singleton)
and vram.compat.vllm (vLLM's CuMemAllocator and its plugin hook)."""

import inspect
import os
import sys
import types

import pytest

from vramtest import ROOT, run_python


def _params(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


E = inspect.Parameter.empty


# ---- torch_memory_saver ----------------------------------------------------------


def test_tms_module_surface():
    import vram.compat.torch_memory_saver as tms

    assert isinstance(tms.torch_memory_saver, tms.TorchMemorySaver)
    assert tms.memory_saver is tms.torch_memory_saver
    s = tms.TorchMemorySaver
    # The signatures of torch_memory_saver's TorchMemorySaver.
    assert _params(s.region) == [
        ("self", E),
        ("tag", "default"),
        ("enable_cpu_backup", False),
        ("enable_disk_backup", False),
        ("cpu_backup_backend", None),
    ]
    assert _params(s.cuda_graph) == [
        ("self", E),
        ("cuda_graph", E),
        ("pool", None),
        ("stream", None),
        ("capture_error_mode", "global"),
        ("tag", "default"),
        ("enable_cpu_backup", False),
        ("cpu_backup_backend", None),
    ]
    assert _params(s.get_cpu_backup) == [("self", E), ("x", E), ("zero_copy", False)]
    assert _params(s.set_disk_backup_dir) == [("self", E), ("path", E)]
    assert _params(s.pause) == [("self", E), ("tag", None)]
    assert _params(s.resume) == [("self", E), ("tag", None)]
    assert _params(s.disable) == [("self", E)]
    assert callable(tms.configure_subprocess) and callable(tms.change_env)


def test_tms_attributes_engines_touch():
    import vram.compat.torch_memory_saver as tms

    saver = tms.TorchMemorySaver()
    assert saver.enabled is True
    saver.hook_mode = "preload"  # SGLang sets it before first use
    saver.hook_mode = "torch"
    with pytest.raises(ValueError):
        saver.hook_mode = "bogus"
    with pytest.raises(AttributeError):
        saver.hook_mode
    saver.memory_margin_bytes = 1 << 30
    with pytest.raises(NotImplementedError):
        saver.memory_margin_bytes
    assert saver.retain_cpu_backup is False
    saver.retain_cpu_backup = True
    assert saver.retain_cpu_backup is True


def test_tms_pause_resume_before_any_region_do_nothing():
    # Nothing was allocated: nothing to release, and no torch needed.
    code = (
        "import sys\n"
        "import vram.compat.torch_memory_saver as t\n"
        "t.torch_memory_saver.pause()\n"
        "t.torch_memory_saver.resume('kv_cache')\n"
        "t.torch_memory_saver.pause('weights')\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n" and r.stderr == ""


def test_tms_configure_subprocess_and_change_env(monkeypatch):
    import vram.compat.torch_memory_saver as tms

    monkeypatch.delenv("VRAM_TMS_TEST", raising=False)
    monkeypatch.setenv("LD_PRELOAD", "libother.so")
    before = dict(os.environ)
    with tms.configure_subprocess():
        # libvram-preload.so first, what was there kept after it.
        lib, other = os.environ["LD_PRELOAD"].split(":")
        assert os.path.basename(lib) == "libvram-preload.so" and os.path.exists(lib)
        assert other == "libother.so"
        with tms.configure_subprocess():  # nested: not twice
            assert os.environ["LD_PRELOAD"] == f"{lib}:libother.so"
    assert dict(os.environ) == before
    with tms.change_env("VRAM_TMS_TEST", "1"):
        assert os.environ["VRAM_TMS_TEST"] == "1"
    assert "VRAM_TMS_TEST" not in os.environ


def test_tms_install_replaces_the_module():
    code = (
        "import vram.compat.torch_memory_saver as t\n"
        "t.install()\n"
        "import torch_memory_saver\n"
        "from torch_memory_saver import torch_memory_saver as s\n"
        "assert torch_memory_saver is t and s is t.torch_memory_saver\n"
        "print('ok')\n"
    )
    r = run_python(code)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_tms_sglang_adapter_pattern():
    """What SGLang's TorchMemorySaverAdapter does with the module, with the
    one-line switch applied."""
    code = (
        "import vram.compat.torch_memory_saver as torch_memory_saver\n"
        "_memory_saver = torch_memory_saver.torch_memory_saver\n"
        "_memory_saver.hook_mode = 'preload'\n"
        "with torch_memory_saver.configure_subprocess():\n"
        "    pass\n"
        "assert _memory_saver is not None and _memory_saver.enabled\n"
        "_memory_saver.pause(tag='kv_cache')\n"
        "_memory_saver.resume(tag='kv_cache')\n"
        "print('ok')\n"
    )
    r = run_python(code)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


# ---- vLLM ----------------------------------------------------------------------------


def test_vllm_allocator_surface():
    from vram.compat.vllm import CuMemAllocator

    a = CuMemAllocator.get_instance()
    assert a is CuMemAllocator.get_instance()
    assert CuMemAllocator.default_tag == "default"
    assert a.current_tag == "default"
    # The signatures of vLLM's CuMemAllocator.
    assert _params(CuMemAllocator.use_memory_pool) == [("self", E), ("tag", None)]
    assert _params(CuMemAllocator.sleep) == [("self", E), ("offload_tags", None)]
    assert _params(CuMemAllocator.wake_up) == [("self", E), ("tags", None)]
    assert _params(CuMemAllocator.get_current_usage) == [("self", E)]
    assert isinstance(inspect.getattr_static(CuMemAllocator, "get_instance"), staticmethod)
    assert hasattr(a, "pointer_to_data") and hasattr(a, "allocator_and_pools")
    a.release_pools()
    a.close()


def test_vllm_sleep_wake_without_pools():
    code = (
        "import sys\n"
        "from vram.compat.vllm import CuMemAllocator\n"
        "a = CuMemAllocator.get_instance()\n"
        "a.sleep(offload_tags=('weights',))\n"
        "a.sleep('weights')\n"
        "a.sleep()\n"
        "a.wake_up(['weights'])\n"
        "a.wake_up()\n"
        "assert a.get_current_usage() == 0\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    r = run_python(code)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def _fake_vllm(monkeypatch):
    """A stand-in for the vllm package: just vllm.device_allocator.cumem."""

    class Original:
        pass

    mods = {}
    for name in ("vllm", "vllm.device_allocator", "vllm.device_allocator.cumem"):
        mods[name] = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, mods[name])
    cumem = mods["vllm.device_allocator.cumem"]
    cumem.CuMemAllocator = Original
    cumem.cumem_available = False
    mods["vllm"].device_allocator = mods["vllm.device_allocator"]
    mods["vllm.device_allocator"].cumem = cumem
    return cumem, Original


def test_vllm_plugin_installs_only_when_asked(monkeypatch):
    import vram.compat.vllm as v

    cumem, original = _fake_vllm(monkeypatch)
    monkeypatch.delenv("VRAM_VLLM", raising=False)
    v.register()
    assert cumem.CuMemAllocator is original
    monkeypatch.setenv("VRAM_VLLM", "0")
    v.register()
    assert cumem.CuMemAllocator is original
    monkeypatch.setenv("VRAM_VLLM", "1")
    v.register()
    assert cumem.CuMemAllocator is v.CuMemAllocator
    assert cumem.cumem_available is True


def test_vllm_install_without_vllm():
    code = (
        "import vram.compat.vllm as v\n"
        "assert v.install() is False\n"
        "v.register()\n"
        "print('ok')\n"
    )
    r = run_python(code, VRAM_VLLM="1")
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_vllm_plugin_entry_point_is_declared():
    try:
        import tomllib
    except ImportError:
        pytest.skip("no tomllib (python < 3.11)")
    with open(os.path.join(ROOT, "python", "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    eps = meta["project"]["entry-points"]["vllm.general_plugins"]
    assert eps == {"vram": "vram.compat.vllm:register"}
    module, func = eps["vram"].split(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), func))


def test_vram_torch_needs_torch():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "try:\n"
        "    import vram.torch\n"
        "except ImportError:\n"
        "    print('ok')\n"
    )
    r = run_python(code)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
