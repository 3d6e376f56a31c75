"""Vectorized decoding of Kafka record batches into Arrow columns.

The scalar reader (:mod:`.batch`, :mod:`.message`) walks one field of one record at a time, which
costs ~15 us per record in Python.  Here only the two pointer-chasing walks stay in Python -- batch
headers (one step per batch) and record lengths (one step per record, a handful of byte-code ops) --
and everything else runs as NumPy operations over *all* records of a chunk at once:

* the record framing (attributes, timestamp/offset deltas, key, value, headers) is decoded with
  vectorized varint reads over the array of record positions;
* records are grouped by (control?, apiKey/control type, version) and each group's bodies are decoded
  by interpreting the schema declaration once per *field*, not once per record: every field read
  advances a position array for the whole group.  Variable-length pieces (compact strings and arrays)
  become Arrow offsets + gathered value buffers; arrays of structs and tagged-field sections are
  decoded in lock-step over the k-th element / k-th tag of every record.

Records whose bytes do not follow the format are not decoded here: they are flagged, and the caller
re-reads just those with the scalar reader, which names the exact error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from controller_core.codec.arrowutil import from_numpy, nulls, strings
from controller_core.schema import Field

PAD = 32  # zero bytes appended to every buffer so fixed-width gathers near the end stay in bounds

_FIXED = {"int8": (1, ">i1"), "int16": (2, ">i2"), "uint16": (2, ">u2"), "int32": (4, ">i4"), "uint32": (4, ">u4"),
          "int64": (8, ">i8"), "float64": (8, ">f8"), "bool": (1, "u1"), "uuid": (16, None)}
_ARROW = {"int8": pa.int8(), "int16": pa.int16(), "uint16": pa.uint16(), "int32": pa.int32(),
          "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(),
          "bytes": pa.binary(), "uuid": pa.string()}
_B64URL = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", np.uint8)


def padded(buf) -> np.ndarray:
    """The bytes as a uint8 array with PAD zero bytes after the end."""
    a = np.empty(len(buf) + PAD, np.uint8)
    a[:len(buf)] = np.frombuffer(buf, np.uint8)
    a[len(buf):] = 0
    return a


# ------------------------------------------------------------------------------------------ varints
def uvarint(a: np.ndarray, pos: np.ndarray, max_bytes: int = 5):
    """Unsigned varints starting at every ``pos``: (values uint64, next positions, ok mask).

    Nearly every varint in a metadata log is one or two bytes, so those cases cost a few whole-array
    operations; only values with more continuation bytes take the byte-by-byte path.
    """
    b0 = a[pos]
    c0 = b0 >= 0x80
    if not c0.any():
        return b0.astype(np.uint64), pos + 1, np.ones(len(pos), bool)
    b1 = a[pos + 1]
    if not (c0 & (b1 >= 0x80)).any():
        val = (b0 & 0x7F).astype(np.uint64)
        val[c0] |= b1[c0].astype(np.uint64) << np.uint64(7)
        return val, pos + 1 + c0, np.ones(len(pos), bool)
    val = (b0 & 0x7F).astype(np.uint64)
    nxt = pos + 1
    ok = np.ones(len(pos), bool)
    cont = np.flatnonzero(c0)
    shift = 7
    for _ in range(1, max_bytes):
        if len(cont) == 0:
            return val, nxt, ok
        p = nxt[cont]
        b = a[p]
        val[cont] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        nxt[cont] = p + 1
        cont = cont[(b & 0x80) != 0]
        shift += 7
    ok[cont] = False  # still continuing after max_bytes: not a varint Kafka writes
    return val, nxt, ok


def zigzag(v: np.ndarray) -> np.ndarray:
    return (v >> np.uint64(1)).astype(np.int64) ^ -(v & np.uint64(1)).astype(np.int64)


def varint(a, pos, max_bytes=5):
    v, nxt, ok = uvarint(a, pos, max_bytes)
    return zigzag(v), nxt, ok


def _unaligned(a: np.ndarray, dtype) -> np.ndarray:
    """A view of ``a`` holding one ``dtype`` value starting at *every* byte offset (stride 1)."""
    dt = np.dtype(dtype)
    return np.ndarray(shape=(len(a) - dt.itemsize + 1,), dtype=dt, buffer=a, strides=(1,))


def fixed(a: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """(n, width) bytes gathered at every position: one fancy-index over a stride-1 void view."""
    return _unaligned(a, f"V{width}")[pos].view(np.uint8).reshape(len(pos), width)


def be(a, pos, t: str) -> np.ndarray:
    """Big-endian fixed-width values at every position, in native byte order."""
    width, dt = _FIXED[t]
    if width == 1:
        return a[pos].view(np.int8) if t == "int8" else a[pos]
    return _unaligned(a, dt)[pos].astype(dt[1:])


# Two base64url characters for every 12-bit value: a uuid is 10 such values plus 8 bits.
_B64_PAIRS = (_B64URL[np.arange(4096) >> 6].astype(np.uint16)
              | (_B64URL[np.arange(4096) & 63].astype(np.uint16) << 8))


def _uuid_chars(raw: np.ndarray) -> np.ndarray:
    """The 22 base64url characters of each uuid of an (n, 16) byte matrix, as an (n, 22) byte matrix."""
    n = raw.shape[0]
    x = np.zeros((n, 18), np.uint8)
    x[:, :16] = raw
    g = x.reshape(n, 6, 3).astype(np.uint16)
    out = np.empty((n, 6, 2), np.uint16)  # little-endian uint16 = (first char, second char)
    out[..., 0] = _B64_PAIRS[(g[..., 0] << 4) | (g[..., 1] >> 4)]
    out[..., 1] = _B64_PAIRS[((g[..., 1] & 15) << 8) | g[..., 2]]
    return np.ascontiguousarray(out.view(np.uint8).reshape(n, 24)[:, :22])


def _fixed_strings(chars: np.ndarray) -> pa.Array:
    """A string array of the rows of an (n, w) byte matrix, each w characters."""
    n, w = chars.shape
    offsets = np.arange(n + 1, dtype=np.int32) * w
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


def uuid_strings(raw: np.ndarray) -> pa.Array:
    """Kafka's Uuid.toString() (base64url, no padding, 22 chars) for an (n, 16) byte matrix."""
    return _fixed_strings(_uuid_chars(raw))


def uuid_array(raw: np.ndarray) -> pa.Array:
    """uuid_strings, computed once per distinct uuid: a log repeats a few topic and directory ids
    millions of times, and Arrow's hash-based dictionary encoding is far cheaper than base64.  Every id is
    22 characters: the rows are gathered as fixed 22-byte items (a third of an Arrow string take)."""
    n = raw.shape[0]
    if n < 4096:
        return uuid_strings(raw)
    fsb = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(np.ascontiguousarray(raw))])
    enc = fsb.dictionary_encode()
    uniq = np.frombuffer(enc.dictionary.buffers()[1], np.uint8)[:len(enc.dictionary) * 16].reshape(-1, 16)
    chars = _uuid_chars(uniq).view("V22").ravel()
    index = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.intp)
    return _fixed_strings(chars[index].view(np.uint8).reshape(n, 22))


def gather_ranges(a: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """Concatenate a[s:s+l] for every (s, l): returns (data bytes, int32 offsets)."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets.astype(np.int32)
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(total)
    return a[idx], offsets.astype(np.int32)


def _validity(valid: np.ndarray | None):
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


# --------------------------------------------------------------------------------- struct decoding
@dataclass
class Cursor:
    """Decoding state of a group of n records: where each one is, where it must end, is it sane."""

    a: np.ndarray
    pos: np.ndarray  # int64
    end: np.ndarray  # int64
    ok: np.ndarray  # bool

    def need(self, nbytes) -> None:
        """Mark records that would read past their end; they stop advancing."""
        bad = self.pos + nbytes > self.end
        if bad.any():
            self.ok &= ~bad

    def sub(self, idx: np.ndarray) -> "Cursor":
        return Cursor(self.a, self.pos[idx], self.end[idx], self.ok[idx])


def decode_struct(c: Cursor, fields, version: int, unknown: list | None = None) -> dict[str, pa.Array]:
    """Decode one struct of every record at ``c.pos`` (advancing it); Arrow array per JSON key.

    Tagged fields absent from a record get the field's default, so every column has one value per
    record; whether Kafka's JSON would show it is decided by the JSON writer.  Tagged fields the
    declaration does not have are appended to ``unknown`` as (record indices, tags, data positions,
    sizes) when it is given (a message body; :func:`unknown_tags` turns them into JSON), skipped otherwise.
    """
    out: dict[str, pa.Array] = {}
    tagged: dict[int, Field] = {}
    for f in fields:
        if not f.present_in(version):
            continue
        if f.is_tagged_in(version):
            tagged[f.tag] = f
            continue
        out[f.json_name] = _decode_value(c, f, version)
    _decode_tagged_section(c, tagged, version, out, unknown)
    # keep the declaration's key order
    order = [f.json_name for f in fields if f.present_in(version)]
    return {k: out[k] for k in order}


def _decode_tagged_section(c: Cursor, tagged: dict[int, Field], version: int, out: dict,
                           unknown: list | None = None) -> None:
    n = len(c.pos)
    ntags, c.pos, okv = uvarint(c.a, c.pos)
    c.ok &= okv
    ntags = np.where(c.ok, ntags, 0).astype(np.int64)
    pieces: dict[int, list] = {tag: [] for tag in tagged}
    step = 0
    last_tag = np.full(n, -1, np.int64)
    active = np.flatnonzero(ntags > 0)
    while len(active):
        tag, p, ok1 = uvarint(c.a, c.pos[active])
        size, p, ok2 = uvarint(c.a, p)
        tag = tag.astype(np.int64)
        size = size.astype(np.int64)
        good = ok1 & ok2 & (tag > last_tag[active]) & (p + size <= c.end[active])
        c.ok[active[~good]] = False
        last_tag[active] = tag
        for t, f in tagged.items():
            sel = good & (tag == t)
            if not sel.any():
                continue
            rows = active[sel]
            sc = Cursor(c.a, p[sel], p[sel] + size[sel], np.ones(len(rows), bool))
            arr = _decode_value(sc, f, version)
            fine = sc.ok & (sc.pos == sc.end)
            c.ok[rows[~fine]] = False
            pieces[t].append((rows, arr))
        if unknown is not None:
            other = good & ~np.isin(tag, np.fromiter(tagged, np.int64, len(tagged)))
            if other.any():
                unknown.append((active[other], tag[other], p[other], size[other]))
        c.pos[active] = np.where(good, p + size, c.pos[active])
        step += 1
        active = active[(ntags[active] > step) & c.ok[active]]
    for t, f in tagged.items():
        out[f.json_name] = _assemble(n, pieces[t], f, version)


def unknown_tags(a: np.ndarray, n: int, unknown: list, ok: np.ndarray) -> pa.Array | None:
    """The unknown tagged fields :func:`decode_struct` collected, as one JSON text per record
    (``[{"tag":n,"data":"<base64>"},...]`` in tag order; null for a record without any), or None when no
    record has one.  Rare (a newer Kafka's records), so built one by one."""
    import base64
    import json
    per: dict[int, list] = {}
    for rows, tags, pos, sizes in unknown:
        for r, t, p, z in zip(rows.tolist(), tags.tolist(), pos.tolist(), sizes.tolist()):
            if ok[r]:
                per.setdefault(r, []).append({"tag": t, "data": base64.b64encode(a[p:p + z].tobytes()).decode("ascii")})
    if not per:
        return None
    return pa.array([json.dumps(per[i], separators=(",", ":")) if i in per else None for i in range(n)], pa.string())


def _assemble(n: int, pieces: list, f: Field, version: int) -> pa.Array:
    """One column for a tagged field: present values where the tag was seen, the default elsewhere."""
    default = _default_array(f, version, 1)
    if not pieces:
        return _default_array(f, version, n)
    # index into concat([default, piece0, piece1, ...]): 0 = default
    take = np.zeros(n, np.int64)
    base = 1
    arrays = [default]
    for rows, arr in pieces:
        take[rows] = base + np.arange(len(rows))
        base += len(rows)
        arrays.append(arr)
    return pa.concat_arrays([x.cast(default.type) for x in arrays]).take(from_numpy(take))


def arrow_type(f: Field, version: int) -> pa.DataType:
    if f.is_struct:
        st = pa.struct([pa.field(g.json_name, arrow_type(g, version)) for g in f.fields if g.present_in(version)])
        return pa.list_(st) if f.is_array else st
    t = _ARROW[f.element_type]
    return pa.list_(t) if f.is_array else t


def _default_array(f: Field, version: int, n: int) -> pa.Array:
    t = arrow_type(f, version)
    d = f.default_value()
    if d is None:
        return nulls(n, t)
    if f.is_array:
        return pa.ListArray.from_arrays(from_numpy(np.zeros(n + 1, np.int32)), pa.nulls(0, t.value_type))
    if f.is_struct:
        return pa.array([d] * n, t)
    if isinstance(d, str):
        return strings([d] * n)
    return from_numpy(np.full(n, d, dtype=t.to_pandas_dtype()))


def _decode_value(c: Cursor, f: Field, version: int) -> pa.Array:
    nullable = f.is_nullable_in(version)
    if f.is_array:
        return _decode_array(c, f, version, nullable)
    if f.is_struct:
        cols = decode_struct(c, f.fields, version)
        return pa.StructArray.from_arrays(list(cols.values()), names=list(cols.keys())) if cols else \
            pa.array([{}] * len(c.pos), arrow_type(f, version))
    return _decode_scalar(c, f.type, nullable)


def _compact_length(c: Cursor, nullable: bool) -> tuple[np.ndarray, np.ndarray]:
    """A compact length (uvarint N+1, 0 = null) of every record: (length, not-null mask).

    The length is bounded by the bytes left (every element or byte takes at least one) before
    anything is allocated from it; records that are not sane get length 0."""
    ln, c.pos, okv = uvarint(c.a, c.pos)
    c.ok &= okv
    ln = ln.astype(np.int64) - 1
    valid = ln >= 0
    if not nullable:
        c.ok &= valid
    ln = np.maximum(ln, 0)
    c.need(ln)
    return np.where(c.ok, ln, 0), valid


def _decode_scalar(c: Cursor, t: str, nullable: bool) -> pa.Array:
    n = len(c.pos)
    if t in ("string", "bytes"):
        ln, valid = _compact_length(c, nullable)
        data, offsets = gather_ranges(c.a, c.pos, ln)
        arr = pa.Array.from_buffers(_ARROW[t], n, [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)])
        if t == "string":
            try:
                arr.validate(full=True)  # UTF-8
            except pa.ArrowInvalid:
                bad = _not_utf8(data, offsets)
                c.ok &= ~bad  # only those records: the scalar reader names their error
                ln = np.where(bad, 0, ln)
                data, offsets = gather_ranges(c.a, c.pos, ln)
                arr = pa.Array.from_buffers(_ARROW[t], n, [_validity(valid), pa.py_buffer(offsets),
                                                          pa.py_buffer(data)])
        c.pos = c.pos + ln
        return arr
    width, _ = _FIXED[t]
    c.need(width)
    p = np.where(c.ok, c.pos, 0)
    c.pos = c.pos + np.where(c.ok, width, 0)
    if t == "uuid":
        return uuid_array(fixed(c.a, p, 16))
    if t == "bool":
        return from_numpy(c.a[p] != 0)
    return from_numpy(be(c.a, p, t))


def _not_utf8(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Which of the strings data[offsets[i]:offsets[i+1]] are not valid UTF-8.  Only strings with a
    byte >= 0x80 can be invalid: found vectorized, and only those are decoded one by one."""
    high = np.zeros(len(data) + 1, np.int64)
    np.cumsum(data >= 0x80, out=high[1:])
    o = offsets.astype(np.int64)
    bad = np.zeros(len(o) - 1, bool)
    raw = data.tobytes()
    for i in np.flatnonzero(high[o[1:]] > high[o[:-1]]).tolist():
        try:
            raw[o[i]:o[i + 1]].decode("utf-8")
        except UnicodeDecodeError:
            bad[i] = True
    return bad


def _decode_array(c: Cursor, f: Field, version: int, nullable: bool) -> pa.Array:
    n = len(c.pos)
    cnt, valid = _compact_length(c, nullable)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(cnt, out=offsets[1:])
    et = f.element_type
    if not f.is_struct and et in _FIXED:
        width, _ = _FIXED[et]
        c.need(cnt * width)
        cnt = np.where(c.ok, cnt, 0)
        np.cumsum(cnt, out=offsets[1:])
        total = int(offsets[-1])
        epos = np.repeat(c.pos - offsets[:-1] * width, cnt) + np.arange(total) * width
        c.pos = c.pos + cnt * width
        if et == "uuid":
            values = uuid_array(fixed(c.a, epos, 16))
        elif et == "bool":
            values = from_numpy(c.a[epos] != 0)
        else:
            values = from_numpy(be(c.a, epos, et))
    else:
        values = _decode_elements(c, f, version, cnt, offsets)
    mask = None if valid.all() else from_numpy(~valid)
    return pa.ListArray.from_arrays(from_numpy(offsets.astype(np.int32)), values, mask=mask)


def _decode_elements(c: Cursor, f: Field, version: int, cnt: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """Variable-width elements (strings, structs): the k-th element of every record in lock-step."""
    total = int(offsets[-1])
    order = []
    parts = []
    k = 0
    active = np.flatnonzero(cnt > 0)
    while len(active):
        sc = c.sub(active)
        if f.is_struct:
            cols = decode_struct(sc, f.fields, version)
            names = list(cols.keys())
            parts.append(pa.StructArray.from_arrays(list(cols.values()), names=names) if cols else
                         pa.array([{}] * len(active), arrow_type(f, version).value_type))
        else:
            parts.append(_decode_scalar(sc, f.element_type, False))
        c.pos[active] = sc.pos
        c.ok[active] = sc.ok
        order.append(offsets[active] + k)
        k += 1
        active = active[(cnt[active] > k) & c.ok[active]]
    vtype = arrow_type(f, version).value_type
    if not parts:
        return pa.nulls(0, vtype)
    flat = pa.concat_arrays(parts)
    pos_of = np.concatenate(order)
    if len(pos_of) != total:  # records that went bad mid-array: pad so offsets stay consistent
        fill = np.setdiff1d(np.arange(total), pos_of)
        flat = pa.concat_arrays([flat, pa.nulls(len(fill), vtype)])
        pos_of = np.concatenate([pos_of, fill])
    inverse = np.empty(total, np.int64)
    inverse[pos_of] = np.arange(total)
    return flat.take(from_numpy(inverse))
