"""Kafka record batches (magic v2) and KRaft record framing: layout, scalar reader and encoder.

Layout of a v2 batch (big endian)::

    0  baseOffset int64        8  batchLength int32     12 partitionLeaderEpoch int32
    16 magic int8              17 crc uint32 (CRC32C of bytes 21..end)
    21 attributes int16        23 lastOffsetDelta int32  27 baseTimestamp int64
    35 maxTimestamp int64      43 producerId int64       51 producerEpoch int16
    53 baseSequence int32      57 recordsCount int32     61 records...

A record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint, key (varint
length, -1 = null), value (varint length), header count varint, headers.  A metadata record's value is
``frameVersion uvarint (1), apiKey uvarint, version uvarint, body``; a control record's key is
``(version int16, type int16)`` and its value the control message, starting with its own Version.
"""
from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field

import crc32c as _crc32c

from controller_core.codec import errors as E
from controller_core.codec.errors import DecodeError
from controller_core.codec.message import (
    decode_body, encode_body, read_uvarint, read_varint, read_varlong, write_uvarint, write_varint,
    write_varlong,
)
from controller_core.records import (
    BY_API_KEY, BY_CONTROL_TYPE, BY_TYPE_NAME, UNKNOWN_CONTROL, UNKNOWN_METADATA, UNKNOWN_RECORD_TYPE, newest_layout,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
CRC_START = 21
MAGIC_V2 = 2
ATTR_COMPRESSION_MASK = 0x07
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
METADATA_FRAME_VERSION = 1


def crc32c(data) -> int:
    return _crc32c.crc32c(data)


@dataclass
class BatchHeader:
    position: int
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK


def read_header(buf, pos: int, end: int) -> BatchHeader:
    """Parse and sanity-check the fixed batch header at ``pos`` (raises DecodeError)."""
    if end - pos < HEADER_SIZE:
        raise DecodeError(E.TRUNCATED_BATCH, f"{end - pos} bytes left, a batch header needs {HEADER_SIZE}",
                          pos, end - pos)
    h = BatchHeader(pos, *HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC_V2:
        raise DecodeError(E.UNSUPPORTED_MAGIC, f"magic byte is {h.magic}, only record batch v2 exists in KRaft",
                          pos, min(end - pos, max(h.size, HEADER_SIZE)))
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise DecodeError(E.BAD_BATCH_HEADER, f"batchLength {h.batch_length} is smaller than a batch header",
                          pos, HEADER_SIZE)
    if pos + h.size > end:
        raise DecodeError(E.TRUNCATED_BATCH, f"batch declares {h.size} bytes but only {end - pos} remain",
                          pos, end - pos)
    return h


def verify_crc(buf, h: BatchHeader) -> None:
    actual = crc32c(memoryview(buf)[h.position + CRC_START:h.position + h.size])
    if actual != h.crc:
        raise DecodeError(E.CRC_MISMATCH, f"stored CRC32C {h.crc:#010x}, computed {actual:#010x}",
                          h.position, h.size)


@dataclass
class Record:
    """One decoded record, as the scalar reference reader produces it."""

    offset: int
    timestamp: int
    type: str
    version: int
    data: dict
    position: int  # byte position of the record in the buffer
    batch: BatchHeader = field(repr=False)
    type_id: int | None = None  # the apiKey (metadata) or control type (control record)
    unknown_tagged_fields: list | None = None  # [{"tag", "data" (base64)}] of a body's tags not declared

    def to_json_dict(self) -> dict:
        out = {"offset": self.offset, "type": self.type, "version": self.version, "data": self.data}
        if self.unknown_tagged_fields:
            out["unknownTaggedFields"] = self.unknown_tagged_fields
        return out


def read_records(buf, h: BatchHeader) -> list[Record]:
    """Decode every record of a (CRC-verified) batch.  Raises DecodeError on the first bad record."""
    if h.compression:
        raise DecodeError(E.COMPRESSED_BATCH,
                          f"batch is {COMPRESSION_NAMES.get(h.compression, h.compression)}-compressed; "
                          "KRaft metadata logs are written uncompressed", h.position, h.size)
    pos, end = h.position + HEADER_SIZE, h.position + h.size
    out = []
    for _ in range(h.records_count):
        start = pos
        length, pos = read_varint(buf, pos, end)
        if length < 0 or pos + length > end:
            raise DecodeError(E.MALFORMED_RECORD, f"record length {length} overruns its batch", start)
        rend = pos + length
        pos += 1  # attributes
        ts_delta, pos = read_varlong(buf, pos, rend)
        off_delta, pos = read_varint(buf, pos, rend)
        klen, pos = read_varint(buf, pos, rend)
        kpos = pos
        pos = _skip(pos, klen, rend, start, "key")
        vlen, pos = read_varint(buf, pos, rend)
        vpos = pos
        pos = _skip(pos, vlen, rend, start, "value")
        nheaders, pos = read_varint(buf, pos, rend)
        for _ in range(max(nheaders, 0)):
            hk, pos = read_varint(buf, pos, rend)
            pos = _skip(pos, hk, rend, start, "header key")
            hv, pos = read_varint(buf, pos, rend)
            pos = _skip(pos, hv, rend, start, "header value")
        if pos != rend:
            raise DecodeError(E.MALFORMED_RECORD, f"record framing ends at {pos}, declared end {rend}", start)
        extras: dict = {}
        rtype, version, data = decode_value(buf, h.is_control, kpos, klen, vpos, vlen, start, extras)
        out.append(Record(h.base_offset + off_delta, h.base_timestamp + ts_delta, rtype, version, data, start, h,
                          extras.get("type_id"), extras.get("unknown_tagged_fields")))
        pos = rend
    if pos != end:
        raise DecodeError(E.MALFORMED_RECORD, f"{end - pos} bytes after the last record of the batch", pos)
    return out


def _skip(pos: int, length: int, rend: int, rpos: int, what: str) -> int:
    """Step over a length-prefixed part of a record (-1 = null), which must end inside the record."""
    end = pos + max(length, 0)
    if end > rend:
        raise DecodeError(E.MALFORMED_RECORD, f"record {what} of {length} bytes overruns the record's end", rpos)
    return end


def decode_value(buf, is_control: bool, kpos: int, klen: int, vpos: int, vlen: int, rpos: int,
                 extras: dict | None = None):
    """(type name, version, data) of one record's key/value.

    Newer Kafka (README "Newer Kafka"): a version above the newest declared is read with the newest declared
    layout; tagged fields the layout does not have are kept (``extras["unknown_tagged_fields"]``); a record of
    an apiKey or control type not declared is kept as :data:`~controller_core.records.UNKNOWN_RECORD_TYPE`
    with its type number and value bytes.  ``extras`` also receives ``type_id`` (apiKey / control type)."""
    extras = {} if extras is None else extras
    vend = vpos + vlen
    if vlen < 0:
        raise DecodeError(E.MALFORMED_RECORD, "record has a null value", rpos)
    if is_control:
        if klen != 4:
            raise DecodeError(E.MALFORMED_RECORD, f"control record key has {klen} bytes, expected 4", rpos)
        ctype = struct.unpack_from(">h", buf, kpos + 2)[0]
        extras["type_id"] = ctype
        if vlen < 2:  # every control message starts with its int16 Version
            raise DecodeError(E.MALFORMED_RECORD, "control record value too short", rpos)
        version = struct.unpack_from(">h", buf, vpos)[0]
        rdef = BY_CONTROL_TYPE.get(ctype)
        if rdef is None:
            return UNKNOWN_RECORD_TYPE, version, unknown_data(UNKNOWN_CONTROL, ctype, bytes(buf[vpos:vend]))
        body = vpos
    else:
        frame, p = read_uvarint(buf, vpos, vend)
        if frame != METADATA_FRAME_VERSION:
            raise DecodeError(E.MALFORMED_RECORD, f"metadata frame version {frame}, expected 1", rpos)
        api_key, p = read_uvarint(buf, p, vend)
        version, p = read_uvarint(buf, p, vend)
        extras["type_id"] = api_key
        if api_key > 0x7FFF:
            raise DecodeError(E.MALFORMED_RECORD, f"apiKey {api_key} is not an int16", rpos)
        if version > 0x7FFF:
            raise DecodeError(E.UNKNOWN_RECORD_VERSION, f"apiKey {api_key} version {version} is not an int16", rpos)
        rdef = BY_API_KEY.get(api_key)
        if rdef is None:
            return UNKNOWN_RECORD_TYPE, version, unknown_data(UNKNOWN_METADATA, api_key, bytes(buf[p:vend]))
        body = p
    if version < 0:
        raise DecodeError(E.UNKNOWN_RECORD_VERSION, f"{rdef.type_name} version {version} is unknown", rpos)
    layout = newest_layout(rdef, version)
    unknown: list = []
    try:
        data = decode_body(buf, body, vend, rdef.fields, layout, unknown)
    except DecodeError as exc:
        if layout != version:  # a newer version that is not the newest known one plus tagged fields
            raise DecodeError(E.UNKNOWN_RECORD_VERSION, f"{rdef.type_name} v{version} does not read with the newest "
                              f"known layout (v{layout}): {exc.detail}", rpos) from None
        raise DecodeError(exc.reason, f"{rdef.type_name} v{version}: {exc.detail}", rpos) from None
    if unknown:
        extras["unknown_tagged_fields"] = unknown
    return rdef.type_name, version, data


def unknown_data(rdef, type_id: int, value: bytes) -> dict:
    """The ``data`` of an UNKNOWN_RECORD: ``{"apiKey"|"controlType": n, "value": base64 of the bytes}``."""
    return {rdef.fields[0].json_name: type_id, "value": base64.b64encode(value).decode("ascii")}


# ----------------------------------------------------------------------------------------- encoder
RAW = "RAW"  # a record given as bytes (raw_record): what a newer Kafka writes and this build does not declare


def raw_record(type_id: int, version: int, body: bytes, control: bool = False) -> tuple[str, int, dict]:
    """A record for :func:`encode_batch` given as its type number, version and body bytes (a metadata record's
    bytes after frameVersion/apiKey/version; a control record's whole value): an apiKey or control type this
    build does not declare, or a version above the newest declared (tests and the simulator write them)."""
    return (RAW, version, {"typeId": type_id, "body": bytes(body), "control": control})


def encode_value(type_name: str, version: int, data: dict) -> tuple[bytes | None, bytes, bool]:
    """(key, value, is_control) for one record given in Kafka's JSON form (or :func:`raw_record`)."""
    if type_name == RAW:
        if data["control"]:
            return struct.pack(">hh", 0, data["typeId"]), data["body"], True
        head = bytearray()
        write_uvarint(head, METADATA_FRAME_VERSION)
        write_uvarint(head, data["typeId"])
        write_uvarint(head, version)
        return None, bytes(head) + data["body"], False
    rdef = BY_TYPE_NAME[type_name]
    if version not in rdef.valid_versions:
        raise ValueError(f"{type_name} has no version {version}")
    if rdef.is_control:
        body = dict(data)
        body.setdefault("version", version)
        return struct.pack(">hh", 0, rdef.control_type), encode_body(rdef.fields, version, body), True
    head = bytearray()
    write_uvarint(head, METADATA_FRAME_VERSION)
    write_uvarint(head, rdef.api_key)
    write_uvarint(head, version)
    return None, bytes(head) + encode_body(rdef.fields, version, data), False


def encode_batch(base_offset: int, records: list[tuple[str, int, dict]], *, leader_epoch: int = 1,
                 timestamp: int = 0, timestamp_deltas: list[int] | None = None) -> bytes:
    """One v2 batch holding ``records`` [(type, version, data)], all metadata or all control."""
    if not records:
        raise ValueError("a batch holds at least one record")
    body = bytearray()
    control = None
    for i, (rtype, version, data) in enumerate(records):
        key, value, is_control = encode_value(rtype, version, data)
        if control is None:
            control = is_control
        elif control != is_control:
            raise ValueError("control and metadata records cannot share a batch")
        rec = bytearray([0])  # attributes
        write_varlong(rec, timestamp_deltas[i] if timestamp_deltas else 0)
        write_varint(rec, i)
        if key is None:
            write_varint(rec, -1)
        else:
            write_varint(rec, len(key))
            rec += key
        write_varint(rec, len(value))
        rec += value
        write_varint(rec, 0)  # no headers
        write_varint(body, len(rec))
        body += rec
    attributes = ATTR_CONTROL if control else 0
    max_ts = timestamp + (max(timestamp_deltas) if timestamp_deltas else 0)
    tail = struct.pack(">hiqqqhii", attributes, len(records) - 1, timestamp, max_ts, -1, -1, -1, len(records))
    crc = crc32c(tail + body)
    head = struct.pack(">qiibI", base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), leader_epoch, MAGIC_V2, crc)
    return head + tail + bytes(body)


def iter_batches_scalar(buf, end: int | None = None):
    """Yield (header, records) for every batch of an uncorrupted buffer (reference reader; raises)."""
    end = len(buf) if end is None else end
    pos = 0
    while pos < end:
        h = read_header(buf, pos, end)
        verify_crc(buf, h)
        yield h, read_records(buf, h)
        pos += h.size
