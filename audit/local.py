"""The silver tables of ``kraft-audit replay`` built from a log directory without Spark.

``silver_tables(log_dir)`` runs the same controller core the Spark job runs in its executors (the
vectorized fold and trigger explanation, the cluster timelines, the invariant checker) on one machine and
returns the tables with the columns and types the job writes (read back from the lake: timestamps are
``timestamp[us, UTC]``), minus the ``cluster`` column.  The audit (:mod:`audit.violations`)
therefore runs unchanged on either.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core import timelines
from controller_core.vector import fold
from lake import catalog

TS = pa.timestamp("us", tz="UTC")  # Spark TimestampType as read back from Delta
BREACH_SCHEMA = pa.schema([
    ("offset", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()), ("rule", pa.string()),
    ("severity", pa.string()), ("recorded", pa.string()), ("expected", pa.string()), ("message", pa.string()),
])
HISTORY_DATED_SCHEMA = pa.schema(list(fold.HISTORY_SCHEMA) + [
    pa.field("valid_from_timestamp", TS), pa.field("valid_to_timestamp", TS), pa.field("trigger", pa.string())])
LOG_END_SCHEMA = pa.schema([("end_offset", pa.int64()), ("end_timestamp", TS)])
SEGMENT = "segment"


def _with_us_timestamps(table: pa.Table) -> pa.Table:
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(TS))
    return table


def _triggers(bronze: pa.Table, history: pa.Table, brokers: pa.Table, topics: pa.Table, snaps) -> pa.Table:
    """(offset, topic_id, partition_id, trigger) per PartitionChangeRecord: the vectorized core's label
    where it reproduced the record, the scalar reference's elsewhere (as transforms/silver.py does)."""
    from controller_core.vector.explain import explain, scalar_batches
    from controller_core.rules.verify import verify_batches

    exp = explain(bronze, history, brokers, topics)
    matched = exp.column("matched").to_pylist()
    todo = {(t, p) for t, p, ok in zip(exp.column("topic_id").to_pylist(), exp.column("partition_id").to_pylist(),
                                       matched) if not ok}
    trig = exp.column("trigger").to_pylist()
    if todo:
        scalar = {(o, t, p): name for o, t, p, name in
                  verify_batches(scalar_batches(bronze, todo), snapshot_files=snaps).explained}
        key = zip(exp.column("offset").to_pylist(), exp.column("topic_id").to_pylist(),
                  exp.column("partition_id").to_pylist())
        trig = [t if ok else scalar.get(k, t) for t, ok, k in zip(trig, matched, key)]
    return pa.table({"offset": exp.column("offset"), "topic_id": exp.column("topic_id"),
                     "partition_id": exp.column("partition_id"), "trigger": pa.array(trig, pa.string())})


def _dated(history: pa.Table, bronze: pa.Table, triggers: pa.Table) -> pa.Table:
    """``transforms.silver.dated``: valid_from/to timestamps from the segment records at those offsets,
    and the trigger of each change record (null where there is none)."""
    seg = pc.equal(bronze.column("source_kind"), SEGMENT)
    s_off = bronze.column("offset").filter(seg).to_numpy()
    s_ts = bronze.column("timestamp").filter(seg).cast(TS)
    order = np.argsort(s_off, kind="stable")
    s_off = s_off[order]
    s_ts = s_ts.take(pa.array(order))

    def at(offsets: pa.ChunkedArray) -> pa.Array:
        if not len(s_off):
            return pa.nulls(len(offsets), TS)
        q = pc.fill_null(offsets, -1).to_numpy()
        j = np.clip(np.searchsorted(s_off, q), 0, len(s_off) - 1)
        hit = (s_off[j] == q) & (q >= 0)
        return pc.if_else(pa.array(hit), s_ts.take(pa.array(j)), pa.scalar(None, TS))

    history = history.cast(fold.HISTORY_SCHEMA)
    # Arrow joins carry no list columns: join the keys with a row number, then place the triggers
    keys = history.select(["offset", "topic_id", "partition_id"]).append_column(
        "_row", pa.array(np.arange(history.num_rows, dtype=np.int64)))
    hit = keys.join(triggers, ["offset", "topic_id", "partition_id"], join_type="inner")
    trigger = pa.nulls(history.num_rows, pa.string())
    if hit.num_rows:
        placed = np.full(history.num_rows, -1, np.int64)
        placed[hit.column("_row").to_numpy()] = np.arange(hit.num_rows)
        names = hit.column("trigger").combine_chunks()
        trigger = pc.if_else(pa.array(placed >= 0), names.take(pa.array(np.maximum(placed, 0))),
                             pa.scalar(None, pa.string()))
    trig = (history.append_column("valid_from_timestamp", at(history.column("offset")))
            .append_column("valid_to_timestamp", at(history.column("valid_to_offset")))
            .append_column("trigger", trigger))
    return trig.select(HISTORY_DATED_SCHEMA.names).cast(HISTORY_DATED_SCHEMA)


def _breaches(bronze: pa.Table) -> pa.Table:
    from controller_core.vector.explain import scalar_batches
    from controller_core.rules.invariants import check_batches

    found = check_batches(scalar_batches(bronze, None))
    rows = [{"offset": b.offset, "topic": b.topic, "partition": b.partition, "rule": b.rule, "severity": b.severity,
             "recorded": json.dumps(b.recorded, default=str), "expected": json.dumps(b.expected, default=str),
             "message": b.message} for b in found]
    return pa.Table.from_pylist(rows, schema=BREACH_SCHEMA)


def silver_tables(log_dir: str | Path, invariants: bool = True) -> dict[str, pa.Table]:
    """The silver tables of a log directory, keyed by table name, plus ``log_end`` (one row: the offset
    and timestamp of the last record of the log, the instant open windows are measured to).

    partition_state_history  fold.HISTORY_SCHEMA + valid_from_timestamp, valid_to_timestamp, trigger
    broker_state_history     timelines.BROKER_SCHEMA (timestamps in us)
    topic_config_history     timelines.TOPIC_SCHEMA (timestamps in us)
    invariant_breaches       offset, topic, partition, rule, severity, recorded, expected, message
    log_end                  end_offset, end_timestamp
    """
    from controller_core.vector.explain import cluster_level_recs, replay_table
    from controller_core.replay import SKIP

    bronze, snaps = replay_table(log_dir)
    if bronze is None:
        raise FileNotFoundError(f"{log_dir}: no metadata records to replay")
    seg = pc.equal(bronze.column("source_kind"), SEGMENT).to_numpy(zero_copy_only=False)
    offsets = bronze.column("offset").to_numpy()
    last = int(np.flatnonzero(seg)[np.argmax(offsets[seg])]) if seg.any() else bronze.num_rows - 1
    # every segment record's time (NoOps included): an audit "as of" an offset or time resolves it here
    record_times = pa.table({"offset": bronze.column("offset").filter(pa.array(seg)),
                             "timestamp": bronze.column("timestamp").filter(pa.array(seg)).cast(TS)})
    log_end = pa.table({"end_offset": [int(offsets[last])],
                        "end_timestamp": bronze.column("timestamp").cast(TS).take(pa.array([last]))},
                       schema=LOG_END_SCHEMA)

    # the replay reads what the Spark job reads: no NoOps, transaction markers or raft control records
    bronze = bronze.filter(pc.invert(pc.is_in(bronze.column("record_type"), pa.array(sorted(SKIP)))))
    history = fold.fold_partitions(bronze)
    brokers, topics = timelines.build(cluster_level_recs(bronze))
    triggers = _triggers(bronze, history, brokers, topics, snaps)
    return {
        catalog.PARTITION_STATE_HISTORY.name: _dated(history, bronze, triggers),
        catalog.BROKER_STATE_HISTORY.name: _with_us_timestamps(brokers),
        catalog.TOPIC_CONFIG_HISTORY.name: _with_us_timestamps(topics),
        catalog.INVARIANT_BREACHES.name: _breaches(bronze) if invariants else BREACH_SCHEMA.empty_table(),
        "log_end": log_end,
        "record_times": record_times,
    }


def log_end(tables: dict[str, pa.Table]) -> tuple[int, object]:
    """(end offset, end timestamp as a timezone-aware datetime) of ``silver_tables``' ``log_end``."""
    t = tables["log_end"]
    return int(t.column("end_offset")[0].as_py()), t.column("end_timestamp")[0].as_py()
