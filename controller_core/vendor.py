"""Logs written by a controller that is not Apache Kafka's, read under Apache Kafka's rules.

A Confluent Server controller finalizes its own feature, ``confluent.metadata.version`` (level 119 on Confluent
Platform 7.7), and writes no ``metadata.version`` FeatureLevelRecord.  Every rule that depends on the metadata
version (controller-rules §6: the leader-epoch bump on an ISR shrink below 3.6-IV0, directories from 3.7-IV2, ELR
from 4.0-IV1, ...) would then read level 0 -- a controller older than 3.3 --, and a healthy log shows a divergence
and an INV-BUMP-ON-SHRINK-OLDMV error on every ISR shrink.

The Apache level such a cluster runs at is not in the log, but it is bounded there: every RegisterBrokerRecord lists
the ``metadata.version`` range its broker supports, and the controller only finalizes a level every registered
broker supports.  A cluster is formatted at the newest level of its release (``kafka-storage format``'s default),
so the replay reads the Confluent feature as ``metadata.version`` at the highest level every registration supports
(if that is at least the lowest level some registration requires), and says so in one note.  Only the cluster-level
rows are read -- each Spark bucket has the same ones, so every bucket infers the same level.  A log whose
registrations list no range keeps level 0, with a warning.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.image import METADATA_VERSION, MV_NAMES

# the feature a Confluent Server controller finalizes instead of Apache Kafka's metadata.version
CONFLUENT_MV = "confluent.metadata.version"
_MV_NAME = {level: name for name, level in MV_NAMES.items()}


@dataclass(frozen=True)
class Inferred:
    """The Apache metadata.version read for a log that finalizes :data:`CONFLUENT_MV` only."""

    level: int | None  # None: no registration lists a metadata.version range (or the ranges do not meet)
    confluent_level: int | None  # the Confluent feature's first recorded level
    registrations: int  # RegisterBrokerRecords listing a metadata.version range

    def note(self) -> str:
        said = f"{CONFLUENT_MV} {self.confluent_level}" if self.confluent_level is not None else CONFLUENT_MV
        if self.level is None:
            return (f"warning: the log's metadata version is {said} (a Confluent Server controller's), it has no "
                    f"{METADATA_VERSION} record and no broker registration bounds one: it is replayed with the rules "
                    "of a log without one (an Apache Kafka controller before 3.3), so divergences and findings may be "
                    "the two controllers' differences")
        name = _MV_NAME.get(self.level)
        shown = f"{self.level} ({name})" if name else str(self.level)
        return (f"note: the log's metadata version is {said} (a Confluent Server controller's) with no "
                f"{METADATA_VERSION} record: replayed as {METADATA_VERSION} {shown}, the highest level all "
                f"{self.registrations} broker registrations support (inferred, not recorded)")


def infer(records: pa.Table) -> Inferred | None:
    """The :class:`Inferred` level of a log whose feature records name :data:`CONFLUENT_MV` and never
    ``metadata.version``; None for any other log (read off the few rows naming a feature: a cheap test)."""
    if "feature_name" not in records.column_names:
        return None
    names = records.column("feature_name")
    if names.null_count == len(names):
        return None
    found = set(pc.unique(names.drop_null()).to_pylist())
    if CONFLUENT_MV not in found or METADATA_VERSION in found:
        return None
    is_confluent = pc.fill_null(pc.equal(names, CONFLUENT_MV), False)
    levels = records.column("feature_level").filter(is_confluent).drop_null()
    first = levels[0].as_py() if len(levels) else None
    return _bounded(_registrations(records), first)


def _registrations(records: pa.Table) -> list[dict]:
    """The data of every RegisterBrokerRecord row (a handful per broker restart)."""
    from controller_core.codec.bronze import by_type

    rows = np.flatnonzero(by_type(records, {"REGISTER_BROKER_RECORD": True}, False, np.bool_))
    if not len(rows):
        return []
    texts = records.column("data_json").take(pa.array(rows, pa.int64())).to_pylist()
    return [json.loads(t) for t in texts if t]


def _bounded(registrations: list[dict], confluent_level: int | None) -> Inferred:
    """The highest level every registration's ``metadata.version`` range holds (None when none lists one or the
    ranges do not meet)."""
    lows, highs = [], []
    for d in registrations:
        for f in d.get("features") or ():
            if f.get("name") == METADATA_VERSION:
                lows.append(int(f.get("minSupportedVersion", 0)))
                highs.append(int(f.get("maxSupportedVersion", 0)))
    level = min(highs) if highs and min(highs) >= max(lows) and min(highs) > 0 else None
    return Inferred(level, confluent_level, len(highs))


def as_apache(records: pa.Table) -> tuple[pa.Table, list[str]]:
    """``records`` with each :data:`CONFLUENT_MV` FeatureLevelRecord read as ``metadata.version`` at the
    :func:`infer`-red level (typed columns and ``data_json`` alike: the compiled passes read the former, the image the
    latter), and the note saying so; unchanged, with no note, for any other log (unchanged with a warning when no
    level can be inferred)."""
    got = infer(records)
    if got is None:
        return records, []
    if got.level is None:
        return records, [got.note()]
    is_confluent = pc.fill_null(pc.equal(records.column("feature_name"), CONFLUENT_MV), False)
    text = json.dumps({"name": METADATA_VERSION, "featureLevel": got.level}, separators=(",", ":"))
    swapped = {"feature_name": pa.scalar(METADATA_VERSION, pa.string()),
               "feature_level": pa.scalar(got.level, records.schema.field("feature_level").type),
               "data_json": pa.scalar(text, records.schema.field("data_json").type)}
    for name, value in swapped.items():
        i = records.schema.get_field_index(name)
        column = pc.if_else(is_confluent, value, records.column(i))
        records = records.set_column(i, records.schema.field(i), column)
    return records, [got.note()]


def as_apache_recs(recs: list) -> tuple[list, list[str]]:
    """:func:`as_apache` of records as :class:`controller_core.replay.Rec` (the Spark driver's cluster-level
    records): the same inference from the same rows, the same rewrite of the feature records' data."""
    import dataclasses

    names = {r.data.get("name") for r in recs if r.type == "FEATURE_LEVEL_RECORD"}
    if CONFLUENT_MV not in names or METADATA_VERSION in names:
        return recs, []
    first = next(r.data.get("featureLevel") for r in recs
                 if r.type == "FEATURE_LEVEL_RECORD" and r.data.get("name") == CONFLUENT_MV)
    got = _bounded([r.data for r in recs if r.type == "REGISTER_BROKER_RECORD"], first)
    if got.level is None:
        return recs, [got.note()]
    data = {"name": METADATA_VERSION, "featureLevel": got.level}
    return [dataclasses.replace(r, data=dict(data))
            if r.type == "FEATURE_LEVEL_RECORD" and r.data.get("name") == CONFLUENT_MV else r for r in recs], \
        [got.note()]
