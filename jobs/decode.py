"""``kraft-audit decode``: Kafka's dump of metadata log files as JSON Lines, without Spark.

One line per record, files in the order given (a folder: bootstrap.checkpoint, then its segments and
snapshots by offset), records in offset order.  ``offset``, ``type``, ``version`` and ``data`` are
exactly what ``kafka-dump-log.sh --cluster-metadata-decoder`` prints as the record's payload; the
other keys say where the record came from.  Undecodable spans are reported on stderr (file and byte
position) and in ``--summary``; they never stop the dump.

What a newer Kafka wrote (README "Newer Kafka") is printed, never dropped: a record of an apiKey this
build does not know as ``"type":"UNKNOWN_RECORD"`` with ``"data":{"apiKey":n,"value":"<base64>"}``
(a control record: ``"controlType"``), a record carrying tagged fields not declared with an extra
``"unknownTaggedFields":[{"tag":n,"data":"<base64>"}]`` beside ``data``; one stderr warning per
(type, version) says how many and where the first one is.
"""
from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec.bronze import NewerKafka, chunk_has_newer, records_table
from controller_core.codec.jsonout import choose, concat
from controller_core.codec.jsonwrite import chunk_lines, record_lines
from controller_core.codec.logfile import COMPILED_MIN_RECORDS, TYPE_NAMES, DecodedChunk, iter_chunks
from controller_core.logdir import expand


def _lines(table: pa.Table, file: str) -> pa.Array:
    """The JSON Lines of bronze rows with Arrow string kernels: the reference of the compiled writers
    (codec/jsonwrite.chunk_lines, straight from the decoder, and record_lines, from bronze rows, which decode uses
    for a chunk holding what a newer Kafka wrote; the tests hold all three byte for byte equal)."""
    c = table.column
    s = pa.string()
    tags = c("unknown_tagged_fields").combine_chunks()
    extra = ("" if tags.null_count == len(tags) else
             pc.fill_null(concat(',"unknownTaggedFields":', tags), ""))
    return concat(
        '{"offset":', pc.cast(c("offset"), s),
        ',"type":"', c("record_type"),
        '","version":', pc.cast(c("record_version"), s),
        ',"data":', c("data_json"), extra,
        ',"file":' + json.dumps(file, ensure_ascii=False) + ',"position":', pc.cast(c("position"), s),
        ',"batchBaseOffset":', pc.cast(c("batch_base_offset"), s),
        ',"batchTimestamp":', pc.cast(pc.cast(c("batch_timestamp"), pa.int64()), s),
        ',"batchLeaderEpoch":', pc.cast(c("batch_leader_epoch"), s),
        ',"control":', choose(c("is_control").combine_chunks(), "true", "false"),
        "}\n")


def _utf8(lines: pa.Array) -> memoryview:
    """The lines of a string array (each ending in a newline) as one span of UTF-8 bytes: its data buffer,
    not a Python object per line."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if not len(lines):
        return memoryview(b"")
    width = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    off = np.frombuffer(lines.buffers()[1], width)[lines.offset:lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[int(off[0]):int(off[-1])]


def _write(out, data: memoryview) -> None:
    """JSON Lines are UTF-8: written to the binary stream under a text one (stdout, a file) as they are -- no
    str made and encoded again: 0.30 -> 0.22 s for 233 k records -- and decoded only for a text-only stream."""
    binary = getattr(out, "buffer", None)
    if binary is None:
        out.write(bytes(data).decode("utf-8"))
        return
    out.flush()  # what was written as text goes first
    binary.write(data)


def _add_types(types: dict[str, int], codes: np.ndarray, counts: np.ndarray) -> None:
    """Add records per type code to the summary's counts per type name."""
    for code, n in zip(codes.tolist(), counts.tolist()):
        if n:
            types[TYPE_NAMES[code]] = types.get(TYPE_NAMES[code], 0) + n


def run(paths: list[str], summary: bool = False, strict: bool = False, out=None, err=None) -> int:
    if summary:  # numba loads only for the summary (its compiled functions come from the cache)
        from controller_core.codec.walk import SummaryWalk
    out = out or sys.stdout
    err = err or sys.stderr
    failed = False
    newer = NewerKafka()
    for lf in expand(paths):
        name = str(lf.path)
        batches = records = 0
        types: dict[str, int] = {}
        errors = []
        # --summary: the compiled walk counts every window it finds regular; the rest is decoded below
        fast = SummaryWalk() if summary else None
        for chunk in iter_chunks(str(lf.path), name, first_offset=lf.first_offset, fast=fast):
            if not isinstance(chunk, DecodedChunk):  # a window the walk counted (a WindowSummary)
                batches += chunk.batches
                records += chunk.records
                _add_types(types, np.arange(len(chunk.counts)), chunk.counts)
                continue
            batches += chunk.batches
            records += len(chunk)
            for q in chunk.quarantine:
                errors.append({"position": q.position, "length": q.length, "reason": q.reason, "message": q.message})
                print(f"kraft-audit decode: {q.message} [{q.reason}]", file=err)
            if not len(chunk):
                continue
            has_newer = chunk_has_newer(chunk)
            if summary:  # record_type is TYPE_NAMES[type_code] (bronze.records_table)
                _add_types(types, *np.unique(chunk.type_code, return_counts=True))
                if has_newer:
                    newer.add(records_table(chunk, "", lf.label, lf.kind))
            else:
                # (a few lines: the Arrow kernels, cheaper than loading the compiled writers from numba's cache)
                compiled = len(chunk) >= COMPILED_MIN_RECORDS
                file_json = json.dumps(name, ensure_ascii=False)
                spans = chunk_lines(chunk, file_json) if compiled and not has_newer else None
                if spans is None:  # what a newer Kafka wrote is counted (and its unknown tags printed) from bronze rows
                    table = records_table(chunk, "", lf.label, lf.kind)
                    if has_newer:
                        newer.add(table)
                    raw = record_lines(table, file_json) if compiled else None
                    spans = [memoryview(raw) if raw is not None else _utf8(_lines(table, name))]
                for span in spans:
                    _write(out, span)
        failed |= bool(errors)
        if summary:
            out.write(json.dumps({"file": name, "batches": batches, "records": records,
                                  "types": dict(sorted(types.items())), "errors": errors}, ensure_ascii=False) + "\n")
    out.flush()
    for line in newer.lines():
        print(f"kraft-audit decode: warning: {line}", file=err)
    return 1 if (strict and failed) else 0
