"""torch_memory_saver's API, backed by vramd.

A module that stands in for the ``torch_memory_saver`` package, so that an
engine switches with one line:

    import vram.compat.torch_memory_saver as torch_memory_saver
    # was: import torch_memory_saver

    saver = torch_memory_saver.torch_memory_saver   # the singleton
    with saver.region(tag="weights", enable_cpu_backup=True):
        ...
    saver.pause("kv_cache"); saver.resume("kv_cache")

or, without editing the engine, ``install()`` before it imports
torch_memory_saver (in the same process).

Differences from torch_memory_saver, all in the user's favour: no
LD_PRELOAD (``configure_subprocess()`` does nothing, and both hook modes
work, CUDA graphs included); the memory belongs to vramd, so vramctl sees
and can pause it; pause/resume of a tag already in that state, or of a tag
never used, does nothing rather than fail. ``get_cpu_backup`` is not
provided (torch_memory_saver leaves it unimplemented too). torch is imported
only when memory is first used.
"""

import contextlib
import sys
from typing import Optional

__all__ = [
    "TorchMemorySaver",
    "torch_memory_saver",
    "memory_saver",
    "configure_subprocess",
    "change_env",
    "install",
]

_TAG_DEFAULT = "default"
HOOK_MODES = ("preload", "torch")


def _vt():
    import vram.torch

    return vram.torch


def _vt_if_used():
    """vram.torch if a region was ever entered (else no pool exists, and
    there is nothing to pause: torch need not even be imported)."""
    return sys.modules.get("vram.torch")


class TorchMemorySaver:
    """torch_memory_saver.TorchMemorySaver over vram.torch. Every instance
    shares the process's vramd pools (one per tag and backup choice), as
    every torch_memory_saver instance shares its one native library."""

    def __init__(self):
        self._hook_mode = None
        self._memory_margin_bytes = 0
        self._disabled_depth = 0

    def region(self, tag: str = _TAG_DEFAULT, enable_cpu_backup: bool = False):
        """Tensors allocated inside are pausable under tag; with
        enable_cpu_backup their content survives pause/resume."""
        return _vt().region(tag, backup=enable_cpu_backup)

    @contextlib.contextmanager
    def cuda_graph(
        self,
        cuda_graph,
        pool=None,
        stream=None,
        capture_error_mode="global",
        tag: str = _TAG_DEFAULT,
        enable_cpu_backup: bool = False,
    ):
        """Like torch.cuda.graph(...), with the graph's memory pausable
        under tag."""
        with _vt().cuda_graph(
            cuda_graph,
            pool=pool,
            stream=stream,
            capture_error_mode=capture_error_mode,
            tag=tag,
            backup=enable_cpu_backup,
        ):
            yield

    @contextlib.contextmanager
    def disable(self):
        """Inside a region: allocations go to torch's own allocator (not
        pausable), in a fresh pool dropped afterwards, as
        torch_memory_saver does."""
        import torch

        pool = torch.cuda.MemPool()
        self._disabled_depth += 1
        try:
            with torch.cuda.use_mem_pool(pool):
                yield
        finally:
            self._disabled_depth -= 1
            del pool

    def pause(self, tag: Optional[str] = None):
        """Releases the memory of tag (None: every tag)."""
        vt = _vt_if_used()
        if vt is not None:
            vt.pause(tag)

    def resume(self, tag: Optional[str] = None):
        """Brings back the memory of tag (None: every tag)."""
        vt = _vt_if_used()
        if vt is not None:
            vt.resume(tag)

    # -- attributes engines touch --------------------------------------------

    @property
    def enabled(self):
        return True

    @property
    def hook_mode(self):
        # torch_memory_saver has no getter either.
        raise AttributeError("hook_mode can only be set")

    @hook_mode.setter
    def hook_mode(self, mode):
        # Both modes behave the same here: vramd needs no preload, and
        # CUDA graph memory is pausable either way.
        if mode not in HOOK_MODES:
            raise ValueError(f"unknown hook mode {mode!r}; expected one of {HOOK_MODES}")
        self._hook_mode = mode

    @property
    def memory_margin_bytes(self):
        raise NotImplementedError("Only setter is supported")

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value: int):
        # vramd fails a resume that does not fit with ENOMEM instead of
        # keeping a margin; the value is kept and unused.
        self._memory_margin_bytes = int(value)

    def get_cpu_backup(self, x):
        raise NotImplementedError("get_cpu_backup is not supported by vramd's torch_memory_saver")


torch_memory_saver = TorchMemorySaver()
# torch_memory_saver's older name for the singleton.
memory_saver = torch_memory_saver


@contextlib.contextmanager
def configure_subprocess():
    """Nothing to set up: vramd needs no LD_PRELOAD in subprocesses."""
    yield


@contextlib.contextmanager
def change_env(key: str, value: str):
    """torch_memory_saver's helper: sets an environment variable inside the
    block."""
    import os

    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def install():
    """Makes ``import torch_memory_saver`` give this module, in this
    process, from now on. Returns the module."""
    mod = sys.modules[__name__]
    sys.modules["torch_memory_saver"] = mod
    return mod
