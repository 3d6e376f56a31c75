"""A faster encoder for the records the simulator writes by the million (PartitionChangeRecord,
PartitionRecord, NoOpRecord), producing exactly the bytes of :func:`controller_core.codec.batch.encode_batch`
(the tests compare the two); every other record type goes through the generic encoder.

Layout facts used (Kafka's flexible-version message format): compact arrays are ``uvarint(n + 1)`` then
the items; tagged fields follow the fixed ones as ``uvarint(count)`` then ``uvarint(tag) uvarint(size)
bytes`` in tag order; a metadata record value starts with ``uvarint(frame version 1) uvarint(api key)
uvarint(version)``.
"""
from __future__ import annotations

import struct

from controller_core.codec.batch import (
    ATTR_CONTROL, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, crc32c, encode_value,
)
from controller_core.codec.message import uuid_from_str

_I32 = struct.Struct(">i")
_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")
_uuid_cache: dict[str, bytes] = {}


def _uv_slow(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_UV = [_uv_slow(i) for i in range(1 << 15)]  # varints of small values, precomputed


def _uv(n: int) -> bytes:
    return _UV[n] if n < 32768 else _uv_slow(n)


def _zz(n: int) -> bytes:
    return _uv((n << 1) ^ (n >> 63))


def _uuid(text: str) -> bytes:
    raw = _uuid_cache.get(text)
    if raw is None:
        if len(_uuid_cache) > 1_000_000:
            _uuid_cache.clear()
        raw = _uuid_cache[text] = uuid_from_str(text)
    return raw


def _ints(xs) -> bytes:
    return _UV[len(xs) + 1] + struct.pack(">%di" % len(xs), *xs)


_dirs_cache: dict[tuple, bytes] = {}


def _uuids(xs) -> bytes:
    key = tuple(xs)
    raw = _dirs_cache.get(key)
    if raw is None:
        if len(_dirs_cache) > 100_000:
            _dirs_cache.clear()
        raw = _dirs_cache[key] = _uv(len(xs) + 1) + b"".join(_uuid(x) for x in xs)
    return raw


def _tag(tag: int, body: bytes) -> bytes:
    return _uv(tag) + _uv(len(body)) + body


def _change(version: int, d: dict) -> bytes:
    tags = []
    if d.get("isr") is not None:
        tags.append(_tag(0, _ints(d["isr"])))
    if d.get("leader", -2) != -2:
        tags.append(_tag(1, _I32.pack(d["leader"])))
    for tag, key in ((2, "replicas"), (3, "removingReplicas"), (4, "addingReplicas")):
        if d.get(key) is not None:
            tags.append(_tag(tag, _ints(d[key])))
    if d.get("leaderRecoveryState", -1) != -1:
        tags.append(_tag(5, struct.pack(">b", d["leaderRecoveryState"])))
    if version >= 2:
        for tag, key in ((6, "eligibleLeaderReplicas"), (7, "lastKnownElr")):
            if d.get(key) is not None:
                tags.append(_tag(tag, _ints(d[key])))
    if version >= 1 and d.get("directories") is not None:
        tags.append(_tag(8, _uuids(d["directories"])))
    return (b"\x01\x05" + _uv(version) + _I32.pack(d["partitionId"]) + _uuid(d["topicId"])
            + _uv(len(tags)) + b"".join(tags))


def _partition(version: int, d: dict) -> bytes:
    body = [b"\x01\x03", _uv(version), _I32.pack(d["partitionId"]), _uuid(d["topicId"]), _ints(d["replicas"]),
            _ints(d["isr"]), _ints(d["removingReplicas"]), _ints(d["addingReplicas"]), _I32.pack(d["leader"]),
            _I32.pack(d["leaderEpoch"]), _I32.pack(d["partitionEpoch"])]
    if version >= 1:
        body.append(_uuids(d.get("directories") or []))
    tags = []
    if d.get("leaderRecoveryState", 0) != 0:
        tags.append(_tag(0, struct.pack(">b", d["leaderRecoveryState"])))
    if version >= 2:
        for tag, key in ((1, "eligibleLeaderReplicas"), (2, "lastKnownElr")):
            if d.get(key) is not None:
                tags.append(_tag(tag, _ints(d[key])))
    body.append(_uv(len(tags)))
    body.extend(tags)
    return b"".join(body)


_NOOP = b"\x01\x14\x00\x00"


def value_of(rtype: str, version: int, d: dict) -> tuple[bytes | None, bytes, bool]:
    if rtype == "PARTITION_CHANGE_RECORD":
        return None, _change(version, d), False
    if rtype == "PARTITION_RECORD":
        return None, _partition(version, d), False
    if rtype == "NO_OP_RECORD":
        return None, _NOOP, False
    return encode_value(rtype, version, d)


def encode_batch_fast(base_offset: int, records, *, leader_epoch: int, timestamp: int) -> bytes:
    """Same bytes as ``encode_batch(base_offset, records, leader_epoch=..., timestamp=...)``."""
    parts = []
    control = None
    for i, (rtype, version, data) in enumerate(records):
        key, value, is_control = value_of(rtype, version, data)
        if control is None:
            control = is_control
        elif control != is_control:
            raise ValueError("control and metadata records cannot share a batch")
        keyb = b"\x01" if key is None else _zz(len(key)) + key
        rec = b"\x00\x00" + _zz(i) + keyb + _zz(len(value)) + value + b"\x00"
        parts.append(_zz(len(rec)))
        parts.append(rec)
    body = b"".join(parts)
    attributes = ATTR_CONTROL if control else 0
    tail = _TAIL.pack(attributes, len(records) - 1, timestamp, timestamp, -1, -1, -1, len(records))
    crc = crc32c(tail + body)
    return _HEAD.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), leader_epoch, MAGIC_V2, crc) + tail + body
