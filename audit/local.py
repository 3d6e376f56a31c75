"""The silver tables of ``kraft-audit replay`` built from a log directory without Spark.

``silver_tables(log_dir)`` runs the replay pipeline the Spark job runs in its executors
(:mod:`controller_core.pipeline`) on one machine and returns the tables with the columns and types the job
writes (read back from the lake: timestamps are ``timestamp[us, UTC]``), minus the ``cluster`` column.  The audit (:mod:`audit.violations`)
therefore runs unchanged on either.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from controller_core import pipeline
from controller_core.codec.arrowutil import plain
from lake import catalog

TS = pipeline.TS
BREACH_SCHEMA = pa.schema([f for f in pipeline.BREACH_SCHEMA if f.name != "topic_id"])
HISTORY_DATED_SCHEMA = pipeline.HISTORY_DATED_SCHEMA
LOG_END_SCHEMA = pa.schema([("end_offset", pa.int64()), ("end_timestamp", TS)])


def _with_us_timestamps(table: pa.Table) -> pa.Table:
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(TS))
    return table


def silver_tables(log_dir: str | Path, invariants: bool = True) -> dict[str, pa.Table]:
    """The silver tables of a log directory, keyed by table name, plus ``log_end`` (one row: the offset
    and timestamp of the last record of the log, the instant open windows are measured to) and
    ``record_times`` (every segment record's offset and time, NoOps included: an audit "as of" an
    offset or time resolves on it).

    partition_state_history  pipeline.HISTORY_DATED_SCHEMA
    broker_state_history     timelines.BROKER_SCHEMA (timestamps in us)
    topic_config_history     timelines.TOPIC_SCHEMA (timestamps in us)
    invariant_breaches       offset, topic, partition, rule, severity, recorded, expected, message
    log_end                  end_offset, end_timestamp
    undecoded_spans          the spans that could not be decoded (controller_core.codec.errors.Quarantine)
    replay_notes             how the log was read (replay.kafka_start_note: where Kafka would start it from)
    missing_offsets          the runs of offsets no file holds (controller_core.replay.Gap)
    """
    rep, times = pipeline.from_log_dir(log_dir, invariants=invariants)
    if times.num_rows:
        last = int(np.argmax(np.asarray(times.column("offset"), np.int64)))
        log_end = pa.table({"end_offset": times.column("offset").take([last]),
                            "end_timestamp": times.column("timestamp").take([last])}, schema=LOG_END_SCHEMA)
    else:  # a snapshot alone: the state it describes
        log_end = pa.table({"end_offset": [rep.start_offset - 1], "end_timestamp": pa.nulls(1, TS)},
                           schema=LOG_END_SCHEMA)
    return {
        catalog.PARTITION_STATE_HISTORY.name: plain(rep.history),  # the lake's types, as the Spark audit reads them
        catalog.BROKER_STATE_HISTORY.name: _with_us_timestamps(rep.brokers),
        catalog.TOPIC_CONFIG_HISTORY.name: _with_us_timestamps(rep.topics),
        catalog.INVARIANT_BREACHES.name: rep.breaches.drop_columns(["topic_id"]),
        "log_end": log_end,
        "record_times": times,
        "undecoded_spans": rep.quarantine,  # what the replay could not decode (a list of spans, not a table)
        "replay_notes": rep.notes,  # (lines, not a table)
        "missing_offsets": rep.gaps,  # (a list of gaps, not a table)
    }


def log_end(tables: dict[str, pa.Table]) -> tuple[int, object]:
    """(end offset, end timestamp as a timezone-aware datetime) of ``silver_tables``' ``log_end``."""
    t = tables["log_end"]
    return int(t.column("end_offset")[0].as_py()), t.column("end_timestamp")[0].as_py()
