"""``kraft-audit decode``: Kafka's dump of metadata log files as JSON Lines, without Spark.

One line per record, files in the order given (a folder: bootstrap.checkpoint, then its segments and
snapshots by offset), records in offset order.  ``offset``, ``type``, ``version`` and ``data`` are
exactly what ``kafka-dump-log.sh --cluster-metadata-decoder`` prints as the record's payload; the
other keys say where the record came from.  Undecodable spans are reported on stderr (file and byte
position) and in ``--summary``; they never stop the dump.
"""
from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec.bronze import records_table
from controller_core.codec.jsonout import choose, concat
from controller_core.codec.logfile import iter_chunks
from controller_core.logdir import expand


def _lines(table: pa.Table, file: str) -> pa.Array:
    c = table.column
    s = pa.string()
    return concat(
        '{"offset":', pc.cast(c("offset"), s),
        ',"type":"', c("record_type"),
        '","version":', pc.cast(c("record_version"), s),
        ',"data":', c("data_json"),
        ',"file":' + json.dumps(file, ensure_ascii=False) + ',"position":', pc.cast(c("position"), s),
        ',"batchBaseOffset":', pc.cast(c("batch_base_offset"), s),
        ',"batchTimestamp":', pc.cast(pc.cast(c("batch_timestamp"), pa.int64()), s),
        ',"batchLeaderEpoch":', pc.cast(c("batch_leader_epoch"), s),
        ',"control":', choose(c("is_control").combine_chunks(), "true", "false"),
        "}")


def run(paths: list[str], summary: bool = False, strict: bool = False, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    failed = False
    for lf in expand(paths):
        name = str(lf.path)
        batches = records = 0
        types: dict[str, int] = {}
        errors = []
        for chunk in iter_chunks(str(lf.path), name, first_offset=lf.first_offset):
            batches += chunk.batches
            records += len(chunk)
            for q in chunk.quarantine:
                errors.append({"position": q.position, "length": q.length, "reason": q.reason, "message": q.message})
                print(f"kraft-audit decode: {q.message} [{q.reason}]", file=err)
            if not len(chunk):
                continue
            table = records_table(chunk, "", lf.label, lf.kind)
            if summary:
                for t, n in zip(*pc.value_counts(table.column("record_type")).flatten()):
                    types[t.as_py()] = types.get(t.as_py(), 0) + n.as_py()
            else:
                text = _lines(table, name)
                out.write("\n".join(text.to_pylist()))
                out.write("\n")
        failed |= bool(errors)
        if summary:
            out.write(json.dumps({"file": name, "batches": batches, "records": records,
                                  "types": dict(sorted(types.items())), "errors": errors}, ensure_ascii=False) + "\n")
    out.flush()
    return 1 if (strict and failed) else 0
