# SPDX-License-Identifier: Apache-2.0
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
Where the installed vLLM has the SleepModeBackend interface
(vllm-project/vllm#44074) the plugin also registers vramd's backend,
``--sleep-mode-backend vram``; older vLLMs reach vramd through the
allocator swap alone (their worker calls CuMemAllocator's sleep/wake_up).

Policy: vramd decides at allocation time whether a pool's content is kept
across a pause (vLLM decides at sleep time). Tags in
``CuMemAllocator.offload_tags_hint`` (default: "weights" and vLLM's
"default" tag, the ones vLLM offloads at sleep level 1) get pools with a
host backup; other tags are discarded. ``sleep(offload_tags)`` then releases
every pool; a backup pool whose tag is not in offload_tags (level 2) gives
its host copy back at once (vLLM keeps no copy at level 2 and reloads the
weights), and a tag asked to be offloaded whose pool has no backup is
discarded with a warning (set the hint before the first use_memory_pool).
"""

import contextlib
import logging
import os
import sys
from typing import Optional, Union

from vram import VramError

logger = logging.getLogger(__name__)

__all__ = ["CuMemAllocator", "install", "register", "register_sleep_mode_backend"]


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
        """Releases the memory of every tag. Tags in offload_tags keep their
        content in host memory (their pools have a backup); every other
        tag keeps nothing, as vLLM's: a backup pool outside offload_tags
        (level 2, offload_tags=()) gives its host copy back at once, and
        wakes up with zeroed memory for vLLM to reload the weights into."""
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
        self._drop_backups(vt, lambda tag: tag not in offload_tags)
        logger.info(
            "vramd: sleep released %.2f GiB (device free %.2f -> %.2f GiB)",
            rep.bytes / 2**30,
            rep.free_before / 2**30,
            rep.free_after / 2**30,
        )

    @staticmethod
    def _drop_backups(vt, which):
        """Gives back the host copy of every paused backup pool whose tag
        which(tag) selects: no host memory is kept for it."""
        for tag, backup, _dev, pool in vt.pools():
            if backup and which(tag) and not pool.closed:
                pool.backup_release()

    def discard(self, tags) -> None:
        """Releases tags' memory without keeping their content (vLLM's
        discard, and the sleep-mode backend's)."""
        if isinstance(tags, str):
            tags = (tags,)
        vt = _vt_if_used()
        if vt is None:
            return
        vt.pause(list(tags))
        self._drop_backups(vt, lambda tag: tag in tags)

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


def _sleep_mode_backend_class():
    """vramd's SleepModeBackend (vllm-project/vllm#44074) for the
    installed vLLM, or None when it has no such interface. Made on first
    use, so that this module imports without vLLM."""
    global _backend_class
    if _backend_class is not None:
        return _backend_class
    try:
        from vllm.device_allocator.sleep_mode_backend import SleepModeBackend
    except ImportError:
        return None

    class VramSleepModeBackend(SleepModeBackend):
        """vLLM's sleep and wake-up on vramd: level 1 keeps the weights in
        a host backup, level 2 keeps no host copy; resume(tags) wakes the
        tags asked for (staged wake); a resume that cannot get the memory
        raises RuntimeError and the engine stays suspended."""

        def suspend(self, level: int = 1) -> None:
            CuMemAllocator.get_instance().sleep(offload_tags=("weights",) if level == 1 else tuple())
            self._state = "SUSPENDED"

        def resume(self, tags=None) -> None:
            self._state = "RESUMING"
            try:
                CuMemAllocator.get_instance().wake_up(tags)
            except BaseException:
                self._state = "SUSPENDED"
                raise
            self._state = "RUNNING"

        def discard(self, tags) -> None:
            CuMemAllocator.get_instance().discard(tags)
            self._state = "SUSPENDED"

        @classmethod
        def preserves_communicators(cls) -> bool:
            # Only pools pause; NCCL's communicators and buffers are not
            # in them.
            return True

        @classmethod
        def preserves_graphs_with_communicators(cls) -> bool:
            # Pools come back at the same addresses and NCCL's state is
            # never touched, so captured graphs replay as they were.
            return True

    _backend_class = VramSleepModeBackend
    return _backend_class


_backend_class = None


def __getattr__(name):
    # vLLM's factory loads a backend as getattr(module, class_name).
    if name == "VramSleepModeBackend":
        cls = _sleep_mode_backend_class()
        if cls is not None:
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_sleep_mode_backend(name="vram"):
    """Registers vramd's sleep-mode backend with vLLM's factory under name
    (select it with --sleep-mode-backend vram). Returns False when the
    installed vLLM has no SleepModeBackend interface."""
    try:
        from vllm.device_allocator.sleep_mode_backend import SleepModeBackendFactory
    except ImportError:
        return False
    try:
        SleepModeBackendFactory.register_backend(name, __name__, "VramSleepModeBackend")
    except ValueError:
        pass  # registered already (the plugin runs once per process it loads in)
    return True


def register():
    """vLLM's general-plugin entry point, run in every vLLM process: with
    VRAM_VLLM=1, vramd's CuMemAllocator replaces vLLM's (the memory the
    worker allocates in use_memory_pool goes to vramd pools) and, where
    vLLM has SleepModeBackend, vramd's backend is registered as "vram"."""
    if os.environ.get("VRAM_VLLM", "") not in ("", "0"):
        if install():
            backend = register_sleep_mode_backend()
            logger.info(
                "vramd: vLLM sleep mode runs on vramd%s",
                " (sleep-mode backend 'vram')" if backend else " (allocator swap)",
            )
