# SPDX-License-Identifier: Apache-2.0
"""python/vram/_lib.py's ctypes mirrors held against vram.h: every public
struct's size and every field's offset and size, as the C compiler lays
them out (build/tests/vram_layout, built by the Makefile from vram.h), and
the constants. A field added to vram.h and not to _lib.py, or the other
way round, fails here instead of corrupting memory at run time."""

import ctypes
import os
import subprocess

import pytest

from vram import _lib

# vram.h's struct -> _lib.py's Structure.
STRUCTS = {
    "vram_pool_options": _lib.PoolOptions,
    "vram_selector": _lib.Selector,
    "vram_report": _lib.Report,
    "vram_device_free": _lib.DeviceFree,
    "vram_mapper_info": _lib.MapperInfo,
    "vram_pool_info": _lib.PoolInfo,
    "vram_device_info": _lib.DeviceInfo,
    "vram_stats": _lib.Stats,
    "vram_process_usage": _lib.ProcessUsage,
    "vram_quota": _lib.Quota,
}

# vram.h's constant -> _lib.py's.
CONSTANTS = {
    "VRAM_LOG_ERROR": _lib.LOG_ERROR,
    "VRAM_LOG_WARN": _lib.LOG_WARN,
    "VRAM_LOG_INFO": _lib.LOG_INFO,
    "VRAM_LOG_DEBUG": _lib.LOG_DEBUG,
    "VRAM_POLICY_DISCARD": _lib.POLICY_DISCARD,
    "VRAM_POLICY_HOST": _lib.POLICY_HOST,
    "VRAM_STATE_INVALID": _lib.STATE_INVALID,
    "VRAM_STATE_ACTIVE": _lib.STATE_ACTIVE,
    "VRAM_STATE_PAUSING": _lib.STATE_PAUSING,
    "VRAM_STATE_PAUSED": _lib.STATE_PAUSED,
    "VRAM_STATE_RESUMING": _lib.STATE_RESUMING,
    "VRAM_POOL_PERSIST": _lib.POOL_PERSIST,
    "VRAM_OPEN_READONLY": _lib.OPEN_READONLY,
    "VRAM_CONNECT_RECONNECT": _lib.CONNECT_RECONNECT,
    "VRAM_CONNECT_WAIT": _lib.CONNECT_WAIT,
    "VRAM_CONNECT_ADMIN": _lib.CONNECT_ADMIN,
    "VRAM_MAX_DEVICES": _lib.MAX_DEVICES,
}


def _layout():
    build = os.environ.get("VRAM_BUILD", "build")
    prog = os.path.join(build, "tests", "vram_layout")
    assert os.path.exists(prog), f"{prog} is missing: make builds it"
    out = subprocess.run([prog], check=True, capture_output=True, text=True).stdout
    structs, fields, consts = {}, {}, {}
    for line in out.splitlines():
        w = line.split()
        if w[0] == "struct":
            structs[w[1]] = int(w[2])
            fields[w[1]] = []
        elif w[0] == "field":
            fields[w[1]].append((w[2], int(w[3]), int(w[4])))
        elif w[0] == "const":
            consts[w[1]] = int(w[2])
    return structs, fields, consts


def test_every_struct_is_mirrored():
    structs, _, _ = _layout()
    assert sorted(structs) == sorted(STRUCTS)


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_struct_layout_matches_the_header(name):
    structs, fields, _ = _layout()
    cls = STRUCTS[name]
    assert ctypes.sizeof(cls) == structs[name], f"sizeof(struct {name})"
    py = [f[0] for f in cls._fields_]
    assert py == [f[0] for f in fields[name]], f"fields of struct {name}"
    for field, offset, size in fields[name]:
        d = getattr(cls, field)
        assert (d.offset, d.size) == (offset, size), f"{name}.{field}"


def test_sized_structs_start_with_their_size():
    # The header's INIT macros set size to sizeof; Sized does the same.
    _, fields, _ = _layout()
    for name, cls in STRUCTS.items():
        if fields[name][0][0] != "size":
            continue
        assert issubclass(cls, _lib.Sized), name
        assert cls().size == ctypes.sizeof(cls), name


def test_constants_match_the_header():
    _, _, consts = _layout()
    for name, value in CONSTANTS.items():
        assert consts[name] == value, name
    assert consts["VRAM_VERSION_NUMBER"] >= _lib.MIN_VERSION_NUMBER
    assert _lib.lib.vram_version_number() == consts["VRAM_VERSION_NUMBER"]


def test_state_of_a_pool_libvram_no_longer_knows_raises(client):
    import errno

    import vram

    p = client.create_pool("abi.w", reserve_bytes=64 << 20)
    assert p.state == vram.State.ACTIVE
    # Closed behind the package's back: libvram closed the pool with it,
    # and vram_pool_state says VRAM_STATE_INVALID, never a real state.
    _lib.lib.vram_client_close(client._h)
    client._h = None
    with pytest.raises(vram.VramError) as e:
        p.state
    assert e.value.errno == errno.EINVAL
    assert "not an open pool" in e.value.message
    p._forget()
