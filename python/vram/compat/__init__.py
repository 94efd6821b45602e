# SPDX-License-Identifier: Apache-2.0
"""Drop-in replacements for the in-process allocators engines use today,
backed by vramd:

- vram.compat.torch_memory_saver: the torch_memory_saver module (SGLang,
  slime, verl, ...): ``import vram.compat.torch_memory_saver as
  torch_memory_saver``.
- vram.compat.vllm: vLLM's sleep-mode CuMemAllocator (``VRAM_VLLM=1``
  with this package installed, or ``vram.compat.vllm.install()``).

See docs/python.md.
"""
