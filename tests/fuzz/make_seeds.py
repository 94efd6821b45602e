#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/fuzz/corpus/daemon: one seed per request type (and a few
sequences, some read on a reading thread), in daemon_fuzz.c's record format. Protobuf is encoded by hand
here (field numbers from proto/vram.proto) so that no generator is needed.
Run it again after adding a request type."""
import os
import struct
import sys


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def f_int(n, v):
    return varint(n << 3) + varint(v)


def f_msg(n, body):
    return varint(n << 3 | 2) + varint(len(body)) + body


def f_str(n, s):
    return f_msg(n, s.encode() if isinstance(s, str) else s)


def req(rid, field, body):
    return f_int(1, rid) + f_msg(field, body)


def rec(payload, flags=0):
    return bytes([flags]) + struct.pack("<H", len(payload)) + payload


def sel(name=None, tag=None, all_=False):
    b = b""
    if name:
        b += f_str(1, name)
    if tag:
        b += f_str(2, tag)
    if all_:
        b += f_int(4, 1)
    return b


create = req(2, 11, f_str(1, "p") + f_str(2, "t") + f_int(4, 1) + f_int(5, 4 << 20))
create_persist = req(2, 11, f_str(1, "q") + f_int(5, 4 << 20) + f_int(6, 1))
grow = req(3, 13, f_int(1, 1) + f_int(2, 2 << 20))
pause = req(4, 16, f_msg(1, sel("p")) + f_int(2, 20))
resume = req(5, 17, f_msg(1, sel("p")) + f_int(2, 20))
seeds = {
    "hello_only": b"",
    "create": rec(create),
    "create_persistent": rec(create_persist),
    "create_grow": rec(create) + rec(grow),
    "open": rec(req(2, 12, f_str(1, "p") + f_int(2, 1))),
    "close": rec(create) + rec(req(3, 14, f_int(1, 1))),
    "drop": rec(create) + rec(req(3, 15, f_str(1, "p"))),
    "pause_resume": rec(create) + rec(grow) + rec(pause) + rec(resume),
    "pause_all": rec(req(4, 16, f_msg(1, sel(all_=True)))),
    "list": rec(req(2, 18, b"")) + rec(req(3, 18, f_msg(1, sel(tag="t")) + f_int(2, 5))),
    "stats": rec(req(2, 19, b"")),
    "audit": rec(req(2, 22, b"")),
    "ping": rec(req(2, 21, b"")),
    "ack": rec(create) + rec(grow) + rec(pause) + rec(f_msg(20, f_int(1, 1))),
    "fd_attached": rec(req(2, 21, b""), flags=2),
    "raw_garbage": rec(b"VRAM\xff\xff\xff\xff\x00\x00\x00\x00", flags=1),
    "no_hello": rec(req(2, 21, b""), flags=4),
    "second_hello": rec(req(2, 10, f_int(1, 1))),
    "bad_name": rec(req(2, 11, f_str(1, b"\xff\xfe"))),
}
# 20 pings send the session to a reading thread (daemon/server.c: 16 in
# a row), so that what follows is read there: the hand-over at a request,
# and the thread's own errors.
pings = b"".join(rec(req(2 + i, 21, b"")) for i in range(20))
seeds.update({
    "pings_then_stats": pings + rec(req(30, 19, b"")) + pings,
    "pings_then_garbage": pings + rec(b"VRAM\xff\xff\xff\xff\x00\x00\x00\x00", flags=1),
    "pings_then_fd": pings + rec(req(30, 21, b""), flags=2),
    "pings_then_undecodable": pings + rec(b"\xff\xff\xff"),
    "pings_then_pause_resume": pings + rec(create) + rec(grow) + rec(pause) + rec(resume),
})
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "daemon")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

# tests/fuzz/corpus/client: what the fake daemon of client_fuzz.c sends
# after the hello (ServerMsg payloads; the client's ids are 2, 3, ...).


def resp(rid, field=None, body=b"", err=0, message=None):
    b = f_int(1, rid)
    if err:
        b += f_int(2, err)
    if message:
        b += f_str(3, message)
    if field:
        b += f_msg(field, body)
    return f_msg(1, b)


def event(eid, kind, pool, chunks=b""):
    return f_msg(2, f_int(1, eid) + f_int(2, kind) + f_int(3, pool) + chunks)


neg1 = varint((1 << 64) - 1)
info = f_int(1, 1) + f_str(2, "p") + f_str(3, "default") + f_int(9, 4 << 20)
chunk = f_msg(2, f_int(1, 0) + f_int(2, 2 << 20) + f_int(3, 0))
pool_reply = f_msg(1, info) + varint(3 << 3) + neg1
grow_reply = f_msg(1, f_int(1, 0) + f_int(2, 2 << 20) + f_int(3, 0))
client = {
    "nothing": b"",
    "stats": rec(resp(2, 15, f_int(3, 1))),
    "stats_list": rec(resp(2, 15)) + rec(resp(3, 14, f_msg(1, info))),
    "list_paged": rec(resp(2, 15)) + rec(resp(3, 14, f_msg(1, info) + f_int(2, 1)))
    + rec(resp(4, 14, f_msg(1, info))),
    "error": rec(resp(2, err=5, message="no")),
    "create": rec(resp(2, 15)) + rec(resp(3, 14)) + rec(resp(4, 11, pool_reply)),
    "create_grow": rec(resp(2, 15)) + rec(resp(3, 14)) + rec(resp(4, 11, pool_reply))
    + rec(resp(5, 12, grow_reply), flags=2),
    "events": rec(resp(2, 15)) + rec(resp(3, 14)) + rec(resp(4, 11, pool_reply))
    + rec(event(1, 0, 1)) + rec(event(2, 1, 1, chunk), flags=2) + rec(event(3, 3, 1)),
    "unknown_id": rec(resp(99, 15)),
    "garbage": rec(b"\xff\xff\xff", flags=1),
}
cout = os.path.join(os.path.dirname(out), "client")
os.makedirs(cout, exist_ok=True)
for name, data in client.items():
    with open(os.path.join(cout, name), "wb") as f:
        f.write(data)
