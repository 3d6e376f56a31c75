"""Scalar reference codec for Kafka's flexible-version message bodies.

Reads and writes one message at a time, field by field, exactly as the schema declares it.  It is the
readable statement of the wire format that the vectorized decoder (:mod:`controller_core.codec.vector`)
is tested against, the encoder used by tests and the simulator, and the fallback that pins down the
exact error of a malformed record.  Values are in Kafka's JSON form: lowerCamel keys, uuids as
base64url strings, bytes as base64 strings, null as ``None``.
"""
from __future__ import annotations

import base64
import binascii
import re
import struct

from controller_core.codec import errors as E
from controller_core.codec.errors import DecodeError
from controller_core.schema import Field

_INT = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "int64": ">q", "float64": ">d"}
_SIZE = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8}
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


# ----------------------------------------------------------------------------------------- varints
def read_uvarint(buf, pos: int, limit: int) -> tuple[int, int]:
    """Unsigned LEB128 varint (at most 5 bytes, as Kafka's ``ByteUtils.readUnsignedVarint``)."""
    value = shift = 0
    for i in range(5):
        if pos + i >= limit:
            raise DecodeError(E.BAD_VARINT, "varint runs past the end of its record", pos)
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise DecodeError(E.BAD_VARINT, "varint longer than 5 bytes", pos)


def read_uvarlong(buf, pos: int, limit: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(10):
        if pos + i >= limit:
            raise DecodeError(E.BAD_VARINT, "varlong runs past the end of its record", pos)
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise DecodeError(E.BAD_VARINT, "varlong longer than 10 bytes", pos)


def zigzag_decode(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def read_varint(buf, pos: int, limit: int) -> tuple[int, int]:
    v, pos = read_uvarint(buf, pos, limit)
    return zigzag_decode(v), pos


def read_varlong(buf, pos: int, limit: int) -> tuple[int, int]:
    v, pos = read_uvarlong(buf, pos, limit)
    return zigzag_decode(v), pos


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, (value << 1) ^ (value >> 31) if -(1 << 31) <= value < (1 << 31) else _zz64(value))


def write_varlong(out: bytearray, value: int) -> None:
    write_uvarint(out, _zz64(value))


def _zz64(value: int) -> int:
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF


# ------------------------------------------------------------------------------------------- uuids
def uuid_to_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")  # 22 base64url chars; the last holds 2 bits


def uuid_from_str(text: str) -> bytes:
    """Inverse of uuid_to_str; refuses anything Kafka's Uuid.fromString would refuse."""
    if not isinstance(text, str) or not _UUID_TEXT.fullmatch(text):
        raise ValueError(f"not a Kafka uuid (22 base64url characters): {text!r}")
    return base64.urlsafe_b64decode(text + "==")


# ------------------------------------------------------------------------------------------ reader
_ABSENT = object()


class _Reader:
    __slots__ = ("buf", "pos", "limit")

    def __init__(self, buf, pos: int, limit: int):
        self.buf, self.pos, self.limit = buf, pos, limit

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.limit:
            raise DecodeError(E.MALFORMED_RECORD, f"field needs {n} bytes, {self.limit - start} left", start)
        self.pos = start + n
        return start

    def uvarint(self) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos, self.limit)
        return v

    def primitive(self, t: str):
        if t in _INT:
            start = self.take(_SIZE[t])
            return struct.unpack_from(_INT[t], self.buf, start)[0]
        if t == "bool":
            return self.buf[self.take(1)] != 0
        if t == "uuid":
            start = self.take(16)
            return uuid_to_str(bytes(self.buf[start:start + 16]))
        raise AssertionError(t)

    def compact_bytes(self, nullable: bool):
        n = self.uvarint() - 1
        if n < 0:
            if not nullable:
                raise DecodeError(E.MALFORMED_RECORD, "null in a non-nullable field", self.pos)
            return None
        start = self.take(n)
        return bytes(self.buf[start:start + n])


def read_struct(r: _Reader, fields, version: int, unknown: list | None = None) -> dict:
    """Read the fields of one struct (message body or nested struct) at ``version``.  Tagged fields the
    declaration does not have are appended to ``unknown`` as ``{"tag": n, "data": base64}`` when it is given
    (a message body), skipped otherwise (nested structs)."""
    out: dict = {}
    tagged: dict[int, Field] = {}
    for f in fields:
        if not f.present_in(version):
            continue
        if f.is_tagged_in(version):
            tagged[f.tag] = f
            out[f.json_name] = _ABSENT  # keeps Kafka's key order; dropped below unless the tag is present
            continue
        out[f.json_name] = _read_value(r, f, version)
    # The tagged-field section closes every struct of a flexible version.
    ntags = r.uvarint()
    last = -1
    for _ in range(ntags):
        tag = r.uvarint()
        size = r.uvarint()
        if tag <= last:
            raise DecodeError(E.MALFORMED_RECORD, f"tagged fields out of order ({tag} after {last})", r.pos)
        last = tag
        start = r.take(size)
        f = tagged.get(tag)
        if f is None:  # a tag of a newer version: kept as opaque bytes, as Kafka's readers keep them
            if unknown is not None:
                unknown.append({"tag": tag, "data": base64.b64encode(bytes(r.buf[start:start + size])).decode("ascii")})
            continue
        sub = _Reader(r.buf, start, start + size)
        out[f.json_name] = _read_value(sub, f, version)
        if sub.pos != start + size:
            raise DecodeError(E.MALFORMED_RECORD, f"tagged field {f.name} left {start + size - sub.pos} bytes", start)
    # Kafka's JSON form shows a tagged field only when it differs from its default.
    for f in tagged.values():
        v = out[f.json_name]
        if v is _ABSENT or v == f.default_value():
            del out[f.json_name]
    return out


def _read_value(r: _Reader, f: Field, version: int):
    nullable = f.is_nullable_in(version)
    if f.is_array:
        n = r.uvarint() - 1
        if n < 0:
            if not nullable:
                raise DecodeError(E.MALFORMED_RECORD, f"null array in non-nullable field {f.name}", r.pos)
            return None
        et = f.element_type
        if n > r.limit - r.pos:  # every element takes at least one byte
            raise DecodeError(E.MALFORMED_RECORD, f"array {f.name} claims {n} elements", r.pos)
        if f.is_struct:
            return [read_struct(r, f.fields, version) for _ in range(n)]
        return [_read_primitive_or_string(r, et, False) for _ in range(n)]
    if f.is_struct:
        return read_struct(r, f.fields, version)
    return _read_primitive_or_string(r, f.type, nullable)


def _read_primitive_or_string(r: _Reader, t: str, nullable: bool):
    if t == "string":
        raw = r.compact_bytes(nullable)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(E.MALFORMED_RECORD, f"string is not UTF-8: {exc}", r.pos) from None
    if t == "bytes":
        raw = r.compact_bytes(nullable)
        return None if raw is None else base64.b64encode(raw).decode("ascii")
    return r.primitive(t)


def decode_body(buf, start: int, end: int, fields, version: int, unknown: list | None = None) -> dict:
    """Decode one message body occupying exactly ``buf[start:end]``; its unknown tagged fields go to
    ``unknown`` when given (see :func:`read_struct`)."""
    r = _Reader(buf, start, end)
    out = read_struct(r, fields, version, unknown)
    if r.pos != end:
        raise DecodeError(E.TRAILING_BYTES, f"{end - r.pos} bytes left after the message body", r.pos)
    return out


# ------------------------------------------------------------------------------------------ writer
def write_struct(out: bytearray, fields, version: int, data: dict, extra_tags: dict[int, bytes] | None = None) -> None:
    """Write one struct at ``version``; keys missing from ``data`` take the field's default.  ``extra_tags``
    ({tag: raw bytes}) are written as tagged fields the declaration does not have (a newer version's, as a
    test or the simulator writes them).

    A key the declaration does not have is an error: silently writing the default instead would
    turn a typo in a test or the simulator into a wrong record."""
    unknown = set(data) - {f.json_name for f in fields}
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}; declared: {[f.json_name for f in fields]}")
    tagged = []
    for f in fields:
        if not f.present_in(version):
            continue
        value = data.get(f.json_name, f.default_value())
        if f.is_tagged_in(version):
            if value != f.default_value():
                tagged.append((f.tag, f, value))
            continue
        _write_value(out, f, version, value)
    for tag, raw in (extra_tags or {}).items():
        if any(t == tag for t, _, _ in tagged) or any(f.tag == tag and f.is_tagged_in(version) for f in fields):
            raise ValueError(f"extra tag {tag} is a declared tag")
        tagged.append((tag, None, bytes(raw)))
    tagged.sort(key=lambda t: t[0])
    write_uvarint(out, len(tagged))
    for tag, f, value in tagged:
        body = bytearray()
        if f is None:
            body += value
        else:
            _write_value(body, f, version, value)
        write_uvarint(out, tag)
        write_uvarint(out, len(body))
        out += body


def _write_value(out: bytearray, f: Field, version: int, value) -> None:
    if value is None:
        if not f.is_nullable_in(version):
            raise ValueError(f"{f.name} is not nullable in version {version}")
        write_uvarint(out, 0)
        return
    if f.is_array:
        write_uvarint(out, len(value) + 1)
        for item in value:
            if f.is_struct:
                write_struct(out, f.fields, version, item)
            else:
                _write_primitive_or_string(out, f.element_type, item)
        return
    if f.is_struct:
        write_struct(out, f.fields, version, value)
        return
    _write_primitive_or_string(out, f.type, value)


def _write_primitive_or_string(out: bytearray, t: str, value) -> None:
    if t == "string":
        raw = value.encode("utf-8")
        write_uvarint(out, len(raw) + 1)
        out += raw
    elif t == "bytes":
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not base64: {value!r}") from exc
        write_uvarint(out, len(raw) + 1)
        out += raw
    elif t == "uuid":
        out += uuid_from_str(value)
    elif t == "bool":
        out.append(1 if value else 0)
    else:
        out += struct.pack(_INT[t], value)


def encode_body(fields, version: int, data: dict, extra_tags: dict[int, bytes] | None = None) -> bytes:
    out = bytearray()
    write_struct(out, fields, version, data, extra_tags)
    return bytes(out)
