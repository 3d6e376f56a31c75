"""Cluster timelines: the state of every broker and the resolved settings of every topic, as rows
valid from one offset to the next (silver ``broker_state_history`` and ``topic_config_history``).

Broker, config, feature and topic records are a tiny share of a metadata log, so these are built by
replaying them in order with the scalar image; the partition history (the bulk) is folded with
NumPy in :mod:`controller_core.vector.fold`.
"""
from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from controller_core.replay import Rec
from controller_core.image import MIN_ISR, TOPIC, Cluster, ReplayError, min_isr_value

TS = pa.timestamp("ms", tz="UTC")
BROKER_SCHEMA = pa.schema([
    ("broker_id", pa.int32()), ("offset", pa.int64()), ("timestamp", TS), ("event", pa.string()),
    ("registered", pa.bool_()), ("broker_epoch", pa.int64()), ("incarnation_id", pa.string()),
    ("fenced", pa.bool_()), ("in_controlled_shutdown", pa.bool_()), ("log_dirs", pa.list_(pa.string())),
    ("rack", pa.string()), ("valid_to_offset", pa.int64()),
    ("cordoned_log_dirs", pa.list_(pa.string())),  # KIP-1066; null: the records never said
])
TOPIC_SCHEMA = pa.schema([
    ("topic_id", pa.string()), ("topic_name", pa.string()), ("offset", pa.int64()), ("timestamp", TS),
    ("deleted", pa.bool_()), ("min_insync_replicas", pa.int32()), ("effective_min_isr", pa.int32()),
    ("min_isr_resolved_from_log", pa.bool_()), ("unclean_leader_election_enable", pa.bool_()),
    ("metadata_version", pa.int16()), ("elr_enabled", pa.bool_()), ("active_controller", pa.int32()),
    ("valid_to_offset", pa.int64()),
    # the config making the topic leaderless / diskless (image.DISKLESS_CONFIGS, e.g. "diskless.enable"), else null
    ("diskless", pa.string()),
])
BROKER_RECORDS = {"REGISTER_BROKER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD",
                  "UNFENCE_BROKER_RECORD", "UNREGISTER_BROKER_RECORD"}
TOPIC_INPUTS = {"TOPIC_RECORD", "REMOVE_TOPIC_RECORD", "CONFIG_RECORD", "FEATURE_LEVEL_RECORD", "LEADER_CHANGE",
                "PARTITION_RECORD", "PARTITION_CHANGE_RECORD"}


PARTITION_RECORDS = ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")


def _broker_id(rec: Rec) -> int:
    d = rec.data
    return d["id"] if "id" in d else d["brokerId"]


def _broker_row(c: Cluster, rec: Rec) -> dict:
    """The broker's registration state after a broker record (an unregistered broker: nulls)."""
    b = _broker_id(rec)
    br = c.brokers.get(b)
    return {"broker_id": b, "offset": rec.offset, "timestamp": rec.timestamp, "event": rec.type,
            "registered": br is not None, "broker_epoch": br.epoch if br else None,
            "incarnation_id": br.incarnation_id if br else None, "fenced": br.fenced if br else None,
            "in_controlled_shutdown": br.in_controlled_shutdown if br else None,
            "log_dirs": list(br.log_dirs) if br else None, "rack": br.rack if br else None,
            "cordoned_log_dirs": list(br.cordoned_log_dirs) if br and br.cordoned_log_dirs is not None else None}


def _topic_row(c: Cluster, tid: str, name: str, rec: Rec, deleted: bool) -> dict:
    configured = c.topic_config(name, MIN_ISR)
    return {"topic_id": tid, "topic_name": name, "offset": rec.offset, "timestamp": rec.timestamp,
            "deleted": deleted, "min_insync_replicas": min_isr_value(configured),
            "effective_min_isr": c.min_isr(tid) if not deleted else None,
            "min_isr_resolved_from_log": configured is not None,
            "unclean_leader_election_enable": c.unclean_enabled(tid), "metadata_version": c.metadata_version,
            "elr_enabled": c.elr_enabled, "active_controller": c.controller_id,
            "diskless": c.diskless(tid) if not deleted else None}


def _p0_assignment(c: Cluster, tid: str) -> tuple | None:
    """Partition 0's replicas, adding and removing replicas: what caps the topic's effective min ISR."""
    p0 = c.partitions.get((tid, 0))
    return None if p0 is None else (tuple(p0.replicas), tuple(p0.adding), tuple(p0.removing))


class _TopicRows:
    """topic_config_history rows, written only when a topic's resolved settings differ from its last row."""

    def __init__(self, c: Cluster):
        self.c = c
        self.rows: list[dict] = []
        self._last: dict[str, tuple] = {}  # topic id -> its last row without offset and timestamp

    def changed(self, rec: Rec, only: str | None = None) -> None:
        """A row for every live topic (or topic ``only``) whose settings resolve differently after ``rec``."""
        if only is not None:  # one topic: looked up, not found by walking every topic (thousands per record)
            name = self.c.topics.get(only)
            todo = [(only, name)] if name is not None else []
        else:
            todo = list(self.c.topics.items())
        for tid, name in todo:
            row = _topic_row(self.c, tid, name, rec, False)
            key = tuple(v for k, v in row.items() if k not in ("offset", "timestamp"))
            if self._last.get(tid) != key:
                self._last[tid] = key
                self.rows.append(row)

    def deleted(self, rec: Rec, tid: str, name: str) -> None:
        """The deletion row of topic ``tid``; the other topics may resolve differently without it."""
        self.rows.append(_topic_row(self.c, tid, name, rec, True))
        self._last.pop(tid, None)
        self.changed(rec)


def build(records: Iterable[Rec], image: Cluster | None = None,
          rejected: list | None = None) -> tuple[pa.Table, pa.Table]:
    """(broker_state_history, topic_config_history) for records in log order, replayed into ``image``
    (a fresh image when None; the caller's image holds the end state afterwards).  Records the image
    cannot apply are skipped, and listed in ``rejected`` as (file, offset, type, reason) if given.

    A topic row is written whenever something its resolved settings depend on may have changed:
    its creation or deletion, any config, feature or controller change (cluster-wide inputs), and
    a change to the replica set of its partition 0 (it caps the effective min ISR)."""
    c = image if image is not None else Cluster()
    brokers: list[dict] = []
    topics = _TopicRows(c)
    for rec in records:
        # what the record may change, read before it is applied
        removed_name = c.topics.get(rec.data["topicId"]) if rec.type == "REMOVE_TOPIC_RECORD" else None
        p0_before = _p0_assignment(c, rec.data["topicId"]) if rec.type in PARTITION_RECORDS else None
        try:
            c.apply(rec.type, rec.data, rec.offset)
        except ReplayError as exc:
            if rejected is not None:
                rejected.append((rec.file, rec.offset, rec.type, str(exc)))
            continue
        if rec.type in BROKER_RECORDS:
            brokers.append(_broker_row(c, rec))
        elif rec.type in PARTITION_RECORDS:
            tid = rec.data["topicId"]
            if rec.data["partitionId"] == 0 and p0_before != _p0_assignment(c, tid):
                topics.changed(rec, only=tid)
        elif rec.type == "REMOVE_TOPIC_RECORD" and removed_name is not None:
            topics.deleted(rec, rec.data["topicId"], removed_name)
        elif rec.type == "TOPIC_RECORD":
            topics.changed(rec, only=rec.data["topicId"])
        elif rec.type == "CONFIG_RECORD" and rec.data.get("resourceType") == TOPIC:
            # a topic's own config changes that topic's settings alone (broker and cluster defaults: any topic)
            tid = c.topic_ids.get(rec.data.get("resourceName"))
            if tid is not None:
                topics.changed(rec, only=tid)
        elif rec.type in TOPIC_INPUTS:
            topics.changed(rec)  # config, feature or controller change: any topic may resolve differently
    return _with_valid_to(brokers, "broker_id", BROKER_SCHEMA), _with_valid_to(topics.rows, "topic_id", TOPIC_SCHEMA)


def _with_valid_to(rows: list[dict], key: str, schema: pa.Schema) -> pa.Table:
    nxt: dict = {}
    for row in reversed(rows):
        row["valid_to_offset"] = nxt.get(row[key])
        nxt[row[key]] = row["offset"]
    return pa.Table.from_pylist(rows, schema=schema)


def current(table: pa.Table) -> pa.Table:
    """The rows of a broker or topic timeline (or of a history cut at a point) that nothing follows
    (``valid_to_offset`` null): each key's state at the end."""
    return table.filter(pc.is_null(table.column("valid_to_offset")))
