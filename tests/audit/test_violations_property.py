"""The vectorized window codes agree with the scalar reference (audit.scalar) on random
partition histories: same windows, offsets, durations, open flags and severities."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from controller_core import timelines
from controller_core.vector import fold
from audit.local import HISTORY_DATED_SCHEMA
from audit.scalar import WINDOW_CODES, violations_scalar
from audit.violations import violations
from lake import catalog
from lake.config import load_config

CONFIG = load_config(overrides={"audit": {"long_window_ms": 50, "metadata_gap_ms": 25, "min_window_ms": 10}})
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
TOPICS = ["AAAAAAAAAAAAAAAAAAAAAQ", "BBBBBBBBBBBBBBBBBBBBBQ"]


@st.composite
def histories(draw):
    # every record's time (NoOps included): a steady beat with, sometimes, a stretch nobody wrote
    gap_at, gap_ms = draw(st.integers(0, 70)), draw(st.sampled_from([0, 0, 30, 200]))

    def at(offset: int) -> dt.datetime:
        return EPOCH + dt.timedelta(milliseconds=offset * 7 + (gap_ms if offset > gap_at else 0))

    rows, topic_rows = [], []
    offset = 0
    for tid in TOPICS:
        for off in sorted(draw(st.sets(st.integers(0, 60), min_size=1, max_size=4))):
            topic_rows.append({"topic_id": tid, "topic_name": "n" + tid[:2], "offset": off, "timestamp": EPOCH,
                               "deleted": False, "min_insync_replicas": 2,
                               "effective_min_isr": draw(st.integers(1, 3)), "min_isr_resolved_from_log": True,
                               "unclean_leader_election_enable": False, "metadata_version": 21,
                               "elr_enabled": draw(st.booleans()), "active_controller": 0,
                               # a leaderless / diskless topic now and then: no ISR rule judges those rows
                               "diskless": "diskless.enable" if draw(st.integers(0, 4)) == 0 else None})
    for tid in TOPICS:
        for p in range(draw(st.integers(1, 3))):
            offset = 0
            for _ in range(draw(st.integers(1, 8))):
                offset += draw(st.integers(1, 10))
                deleted = draw(st.integers(0, 9)) == 0
                isr = draw(st.lists(st.integers(0, 2), max_size=3, unique=True))
                leader = draw(st.sampled_from(isr + [-1]))
                ts = None if draw(st.integers(0, 15)) == 0 else at(offset)
                rows.append({"topic_id": tid, "partition_id": p, "offset": offset, "record_type":
                             "PARTITION_CHANGE_RECORD", "replicas": None if deleted else [0, 1, 2],
                             "isr": None if deleted else isr, "leader": None if deleted else leader,
                             "eligible_leader_replicas": None if deleted else
                             draw(st.lists(st.integers(0, 2), max_size=2, unique=True)),
                             "last_known_elr": None if deleted else [], "deleted": deleted, "orphan": False,
                             "valid_from_timestamp": ts})
    times = [{"offset": o, "timestamp": at(o), "record_type": "NO_OP_RECORD"} for o in range(0, 80)]
    # two brokers fenced and unfenced now and then: sometimes neither is active (the cluster is down)
    brokers = []
    for b in (0, 1):
        for off in sorted(draw(st.sets(st.integers(0, 70), max_size=5))):
            brokers.append({"broker_id": b, "offset": off, "timestamp": at(off), "event": "FENCE_BROKER_RECORD",
                            "registered": True, "broker_epoch": 1, "fenced": draw(st.booleans()),
                            "in_controlled_shutdown": False})
    return rows, topic_rows, times, brokers


def key(r) -> tuple:
    return (r["code"], r["topic_id"], r["partition"], r["first_offset"], r["last_offset"], r["open"],
            r["duration_ms"], r["severity"])


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(0, 500))
def test_vectorized_windows_equal_the_scalar_reference(data, end_ms):
    rows, topic_rows, times, brokers = data
    tables = {"record_times": pa.Table.from_pylist(times, schema=pa.schema([
                  ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("record_type", pa.string())])),
              catalog.PARTITION_STATE_HISTORY.name: pa.Table.from_pylist(rows, schema=HISTORY_DATED_SCHEMA),
              catalog.TOPIC_CONFIG_HISTORY.name: pa.Table.from_pylist(topic_rows, schema=timelines.TOPIC_SCHEMA),
              catalog.BROKER_STATE_HISTORY.name: pa.Table.from_pylist(brokers, schema=timelines.BROKER_SCHEMA)}
    end = EPOCH + dt.timedelta(milliseconds=500 + end_ms)
    fast = [r for r in violations(tables, CONFIG, 10_000, end).to_pylist() if r["code"] in WINDOW_CODES]
    slow = violations_scalar(tables, CONFIG, 10_000, end)
    slow = [dict(r, brokers=None) for r in slow]
    assert sorted(map(key, fast)) == sorted(map(key, slow))
    assert fold.HISTORY_SCHEMA.names[0] == "topic_id"
