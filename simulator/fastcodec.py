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
from controller_core.codec.message import uuid_from_str, write_uvarint

_I32 = struct.Struct(">i")
_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")
_uuid_cache: dict[str, bytes] = {}


def _uv_slow(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)  # the reference codec's writer
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


class ChangeBody(dict):
    """A PartitionChangeRecord body made from a plan shared by every partition with the same change: ``plan.tags``
    is :func:`change_tags` of the body, encoded once; only the partition id and topic id differ. ``part`` is for
    the writer of the body (the simulator's partition it was decided for)."""

    __slots__ = ("plan", "part")


def change_tags(version: int, d: dict) -> bytes:
    """The tagged-field section of a PartitionChangeRecord value (count, then the fields in tag order)."""
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
    return _uv(len(tags)) + b"".join(tags)


_CHANGE_HEAD = [b"\x01\x05" + _uv(v) for v in range(128)]  # frame version, api key 5, version


def _change(version: int, d: dict) -> bytes:
    tags = d.plan.tags if d.__class__ is ChangeBody else change_tags(version, d)
    return _CHANGE_HEAD[version] + _I32.pack(d["partitionId"]) + _uuid(d["topicId"]) + tags


_LE_PE = struct.Struct(">ii")


def partition_parts(version: int, d: dict) -> tuple[bytes, bytes]:
    """A PartitionRecord value without its head, ids and epochs: (replicas .. leader, directories .. tags);
    the value is ``head + partitionId + topicId + first + leaderEpoch partitionEpoch + second``."""
    first = b"".join([_ints(d["replicas"]), _ints(d["isr"]), _ints(d["removingReplicas"]),
                      _ints(d["addingReplicas"]), _I32.pack(d["leader"])])
    second = [_uuids(d.get("directories") or [])] if version >= 1 else []
    tags = []
    if d.get("leaderRecoveryState", 0) != 0:
        tags.append(_tag(0, struct.pack(">b", d["leaderRecoveryState"])))
    if version >= 2:
        for tag, key in ((1, "eligibleLeaderReplicas"), (2, "lastKnownElr")):
            if d.get(key) is not None:
                tags.append(_tag(tag, _ints(d[key])))
    second.append(_uv(len(tags)))
    second.extend(tags)
    return first, b"".join(second)


_PARTITION_HEAD = [b"\x01\x03" + _uv(v) for v in range(128)]  # frame version, api key 3, version


def partition_value(version: int, pid: int, topic_id: str, leader_epoch: int, partition_epoch: int,
                    parts: tuple[bytes, bytes]) -> bytes:
    """The PartitionRecord value from :func:`partition_parts` and the per-partition fields."""
    return (_PARTITION_HEAD[version] + _I32.pack(pid) + _uuid(topic_id) + parts[0]
            + _LE_PE.pack(leader_epoch, partition_epoch) + parts[1])


class PartitionBody(dict):
    """A PartitionRecord body with its :func:`partition_parts` already encoded (``parts``, shared by every
    partition created with the same assignment); ``reg`` is for the writer of the body (the simulator's
    registration it describes)."""

    __slots__ = ("parts", "reg")


def _partition(version: int, d: dict) -> bytes:
    return partition_value(version, d["partitionId"], d["topicId"], d["leaderEpoch"], d["partitionEpoch"],
                           partition_parts(version, d))


_NOOP = b"\x01\x14\x00\x00"


def value_of(rtype: str, version: int, d: dict) -> tuple[bytes | None, bytes, bool]:
    if rtype == "PARTITION_CHANGE_RECORD":
        return None, _change(version, d), False
    if rtype == "PARTITION_RECORD":  # ``d`` may be the value already encoded (:func:`partition_value`)
        if d.__class__ is PartitionBody:
            return None, partition_value(version, d["partitionId"], d["topicId"], d["leaderEpoch"],
                                         d["partitionEpoch"], d.parts), False
        return None, d if d.__class__ is bytes else _partition(version, d), False
    if rtype == "NO_OP_RECORD":
        return None, _NOOP, False
    return encode_value(rtype, version, d)


_change_frames: dict[tuple[bytes, int], tuple[int, bytes, bytes]] = {}


def _change_frame(tags: bytes, version: int) -> tuple[int, bytes, bytes]:
    """The bytes of a PartitionChangeRecord (as a batch record) around its partition id and topic id:
    (record length without the offset-delta varint, the bytes before the partition id, the bytes after the
    topic id). A record is ``varint(length) 00 00 zigzag(offset delta) before partitionId topicId after``."""
    frame = _change_frames.get((tags, version))
    if frame is None:
        if len(_change_frames) > 100_000:
            _change_frames.clear()
        value_len = len(_CHANGE_HEAD[version]) + 4 + 16 + len(tags)
        before = b"\x01" + _zz(value_len) + _CHANGE_HEAD[version]  # null key, value length, value head
        after = tags + b"\x00"                                        # tagged fields, no headers
        frame = _change_frames[(tags, version)] = (2 + len(before) + 4 + 16 + len(after), before, after)
    return frame


def encode_batch_fast(base_offset: int, records, *, leader_epoch: int, timestamp: int) -> bytes:
    """Same bytes as ``encode_batch(base_offset, records, leader_epoch=..., timestamp=...)``."""
    parts = []
    append = parts.append
    control = None
    uv = _UV
    pack_i32 = _I32.pack
    for i, (rtype, version, data) in enumerate(records):
        zi = uv[i << 1] if i < 16384 else _zz(i)  # zigzag of a non-negative n is 2n
        if data.__class__ is ChangeBody:  # rtype is PARTITION_CHANGE_RECORD
            if control:
                raise ValueError("control and metadata records cannot share a batch")
            control = False
            size, before, after = _change_frame(data.plan.tags, version)
            size += len(zi)
            parts += (uv[size << 1] if size < 16384 else _zz(size), b"\x00\x00", zi, before,
                      pack_i32(data["partitionId"]), _uuid(data["topicId"]), after)
            continue
        if rtype == "PARTITION_CHANGE_RECORD":
            value, is_control, keyb = _change(version, data), False, b"\x01"
        elif data.__class__ is bytes:  # a value already encoded (snapshots: :func:`partition_value`)
            value, is_control, keyb = data, False, b"\x01"
        else:
            key, value, is_control = value_of(rtype, version, data)
            keyb = b"\x01" if key is None else _zz(len(key)) + key
        if control is None:
            control = is_control
        elif control != is_control:
            raise ValueError("control and metadata records cannot share a batch")
        n = len(value)
        rec = b"\x00\x00" + zi + keyb + (uv[n << 1] if n < 16384 else _zz(n)) + value + b"\x00"
        n = len(rec)
        append(uv[n << 1] if n < 16384 else _zz(n))
        append(rec)
    body = b"".join(parts)
    attributes = ATTR_CONTROL if control else 0
    tail = _TAIL.pack(attributes, len(records) - 1, timestamp, timestamp, -1, -1, -1, len(records))
    crc = crc32c(tail + body)
    return _HEAD.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), leader_epoch, MAGIC_V2, crc) + tail + body
