"""vLLM's sleep-mode allocator API (vllm.device_allocator.cumem
.CuMemAllocator), backed by vramd.

vLLM's workers call:

    allocator = CuMemAllocator.get_instance()
    with allocator.use_memory_pool(tag="weights"): load the model
    with allocator.use_memory_pool(tag="kv_cache"): allocate the KV cache
    allocator.sleep(offload_tags=("weights",))      # level 1
    allocator.wake_up(tags=["weights"]); allocator.wake_up(tags=["kv_cache"])
    allocator.get_current_usage()

To switch vLLM to vramd, install this package and set ``VRAM_VLLM=1`` in
the environment of the vLLM server: vLLM loads the ``vram`` general plugin
in every process it starts (entry point ``vllm.general_plugins``), and
with VRAM_VLLM=1 the plugin puts this CuMemAllocator in place of vLLM's.
In a program that drives vLLM in-process, ``install()`` does the same.

Policy: vramd decides at allocation time whether a pool's content is kept
across a pause (vLLM decides at sleep time). Tags in
``CuMemAllocator.offload_tags_hint`` (default: "weights" and vLLM's
"default" tag, the ones vLLM offloads at sleep level 1) get pools with a
host backup; other tags are discarded. ``sleep(offload_tags)`` then releases
every pool; a backup pool keeps its content even when its tag is not in
offload_tags (level 2), and a tag asked to be offloaded whose pool has no
backup is discarded with a warning (set the hint before the first
use_memory_pool).
"""

import contextlib
import logging
import os
import sys
from typing import Optional, Union

from vram import VramError

logger = logging.getLogger(__name__)

__all__ = ["CuMemAllocator", "install", "register"]


def _vt():
    import vram.torch

    return vram.torch


def _vt_if_used():
    """vram.torch if a pool was ever used (else there is nothing to
    release, and torch need not even be imported)."""
    return sys.modules.get("vram.torch")


class CuMemAllocator:
    """vLLM's CuMemAllocator, on vramd. A singleton: use get_instance()."""

    instance: "Optional[CuMemAllocator]" = None
    default_tag: str = "default"
    # Tags whose pools keep a host backup (see the module's docstring).
    offload_tags_hint = ("weights", "default")

    @staticmethod
    def get_instance() -> "CuMemAllocator":
        if CuMemAllocator.instance is None:
            CuMemAllocator.instance = CuMemAllocator()
        return CuMemAllocator.instance

    def __init__(self):
        self.current_tag: str = CuMemAllocator.default_tag
        # vLLM's attributes, kept for code that reads them: pools live in
        # vram.torch, which keeps them (and the allocator) for the life of
        # the process.
        self.pointer_to_data: dict = {}
        self.allocator_and_pools: dict = {}
        self._backup = {}  # tag -> whether its pool keeps a backup

    @contextlib.contextmanager
    def use_memory_pool(self, tag: Optional[str] = None):
        """Tensors allocated inside belong to tag's vramd pool."""
        if tag is None:
            tag = CuMemAllocator.default_tag
        assert isinstance(tag, str)
        backup = self._backup.get(tag)
        if backup is None:
            backup = tag in self.offload_tags_hint
            self._backup[tag] = backup
        old = self.current_tag
        self.current_tag = tag
        try:
            with _vt().region(tag, backup=backup) as pool:
                self.allocator_and_pools[tag] = pool
                yield
        finally:
            self.current_tag = old

    def sleep(self, offload_tags: Optional[Union[tuple, str]] = None) -> None:
        """Releases the memory of every tag; tags with a backup keep their
        content in host memory."""
        if offload_tags is None:
            offload_tags = (CuMemAllocator.default_tag,)
        elif isinstance(offload_tags, str):
            offload_tags = (offload_tags,)
        for tag in offload_tags:
            if tag in self._backup and not self._backup[tag]:
                logger.warning(
                    "vramd: tag %s has no host backup (not in "
                    "CuMemAllocator.offload_tags_hint when first used): "
                    "its content is discarded",
                    tag,
                )
        vt = _vt_if_used()
        if vt is None:
            return
        rep = vt.pause(None)
        logger.info(
            "vramd: sleep released %.2f GiB (device free %.2f -> %.2f GiB)",
            rep.bytes / 2**30,
            rep.free_before / 2**30,
            rep.free_after / 2**30,
        )

    def wake_up(self, tags: Optional[list] = None) -> None:
        """Brings back tags (None: all) at the same addresses, restoring
        backups. Raises RuntimeError, as vLLM's does when its allocator
        cannot map memory, if the device lacks the memory (or vramd fails
        otherwise): the message is vramd's, the vram.VramError with its
        errno is the exception's __cause__. A tag that could not wake stays
        asleep with its backup, tags woken before it stay awake, and the
        call can be retried."""
        vt = _vt_if_used()
        if vt is None:
            return
        try:
            vt.resume(tags)
        except VramError as e:
            raise RuntimeError(str(e)) from e

    def get_current_usage(self) -> int:
        """Bytes in this process's vramd pools (paused ones included)."""
        vt = _vt_if_used()
        return sum(vt.usage().values()) if vt is not None else 0

    def release_pools(self) -> None:
        """vLLM calls this at shutdown. Pools and the allocator stay for the
        life of the process (nothing here can run in the wrong order at
        exit), so there is nothing to do."""

    close = release_pools


def install():
    """Replaces vLLM's CuMemAllocator by this one, in this process.
    Returns False when vLLM is not installed."""
    try:
        import vllm.device_allocator.cumem as cumem
    except ImportError:
        return False
    cumem.CuMemAllocator = CuMemAllocator
    cumem.cumem_available = True
    return True


def register():
    """vLLM's general-plugin entry point: installs when VRAM_VLLM=1."""
    if os.environ.get("VRAM_VLLM", "") not in ("", "0"):
        if install():
            logger.info("vramd: vLLM sleep mode runs on vramd")
