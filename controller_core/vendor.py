"""Logs written by a controller that is not Apache Kafka's, read under Apache Kafka's rules.

A Confluent Server controller finalizes its own feature, ``confluent.metadata.version`` (level 119 on Confluent
Platform 7.7), and writes no ``metadata.version`` FeatureLevelRecord.  Every rule that depends on the metadata
version (controller-rules §6: the leader-epoch bump on an ISR shrink below 3.6-IV0, directories from 3.7-IV2, ELR
from 4.0-IV1, ...) would then read level 0 -- a controller older than 3.3 --, and a healthy log shows a divergence
and an INV-BUMP-ON-SHRINK-OLDMV error on every ISR shrink.

The Apache level such a cluster runs at is not in the log, but it is bounded there: every RegisterBrokerRecord lists
the ``metadata.version`` range its broker supports, and the controller only finalizes a level every registered
broker supports.  A cluster is formatted at the newest level of its release (``kafka-storage format``'s default),
and a new level is finalized once every broker runs a release supporting it, so the replay reads each Confluent
feature record as ``metadata.version`` at the highest level the registrations current there support (if that is at
least the lowest level one of them requires; for a record before any registration, as the bootstrap's, those that
follow it), and says so in one note.  Only the cluster-level rows are read -- each Spark bucket has the same ones, so
every bucket infers the same levels.  A log whose registrations list no range keeps level 0, with a warning.
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
    """The Apache metadata.version read for each :data:`CONFLUENT_MV` FeatureLevelRecord of a log that finalizes
    only that feature: ``records`` holds (offset, Apache level or None, Confluent level) of each, in log order."""

    records: tuple
    registrations: int  # RegisterBrokerRecords listing a metadata.version range

    @property
    def level(self) -> int | None:
        """The first record's level (None: no registration bounds it, and the log keeps level 0)."""
        return self.records[0][1] if self.records else None

    @property
    def confluent_level(self) -> int | None:
        return self.records[0][2] if self.records else None

    def note(self) -> str:
        said = f"{CONFLUENT_MV} {self.confluent_level}" if self.confluent_level is not None else CONFLUENT_MV
        if self.level is None:
            return (f"warning: the log's metadata version is {said} (a Confluent Server controller's), it has no "
                    f"{METADATA_VERSION} record and no broker registration bounds one: it is replayed with the rules "
                    "of a log without one (an Apache Kafka controller before 3.3), so divergences and findings may be "
                    "the two controllers' differences")
        steps, last = [], None
        for offset, level, _ in self.records:
            if level != last:
                steps.append((offset, level))
                last = level
        if len(steps) == 1:
            return (f"note: the log's metadata version is {said} (a Confluent Server controller's) with no "
                    f"{METADATA_VERSION} record: replayed as {METADATA_VERSION} {_shown(self.level)}, the highest "
                    f"level its brokers' registrations support ({self.registrations} list a range; inferred, not "
                    "recorded)")
        told = ", then ".join(f"{_shown(level)} from offset {offset}" for offset, level in steps)
        return (f"note: the log's metadata version is {CONFLUENT_MV} (a Confluent Server controller's) with no "
                f"{METADATA_VERSION} record: replayed as {METADATA_VERSION} {told}, at each of its records the highest "
                "level all broker registrations current there support (inferred, not recorded)")


def _shown(level: int) -> str:
    name = _MV_NAME.get(level)
    return f"{level} ({name})" if name else str(level)


def infer(records: pa.Table) -> Inferred | None:
    """The :class:`Inferred` levels of a log whose feature records name :data:`CONFLUENT_MV` and never
    ``metadata.version``; None for any other log (read off the few rows naming a feature: a cheap test)."""
    if "feature_name" not in records.column_names:
        return None
    names = records.column("feature_name")
    if names.null_count == len(names):
        return None
    found = set(pc.unique(names.drop_null()).to_pylist())
    if CONFLUENT_MV not in found or METADATA_VERSION in found:
        return None
    return _levels(_events(records))


def _events(records: pa.Table) -> list[tuple[int, int, object]]:
    """(offset, row, what) of each RegisterBrokerRecord (its data) and each :data:`CONFLUENT_MV` record (its level),
    in replay order; the rows read one by one (a handful; a take of a chunked table joins every chunk first)."""
    from controller_core.codec.bronze import by_type

    is_confluent = pc.fill_null(pc.equal(records.column("feature_name"), CONFLUENT_MV), False)
    feature_rows = np.flatnonzero(is_confluent.to_numpy(zero_copy_only=False))
    reg_rows = np.flatnonzero(by_type(records, {"REGISTER_BROKER_RECORD": True}, False, np.bool_))
    offsets, texts, levels = records.column("offset"), records.column("data_json"), records.column("feature_level")
    out = []
    for r in reg_rows:
        text = texts[int(r)].as_py()
        if text:
            out.append((offsets[int(r)].as_py(), int(r), json.loads(text)))
    out += [(offsets[int(r)].as_py(), int(r), levels[int(r)].as_py()) for r in feature_rows]
    return sorted(out, key=lambda e: e[1])  # (rows are in replay order)


def _range(data: dict) -> tuple[int, int] | None:
    """(minSupportedVersion, maxSupportedVersion) of metadata.version in a registration, if it lists one."""
    for f in data.get("features") or ():
        if f.get("name") == METADATA_VERSION:
            return int(f.get("minSupportedVersion", 0)), int(f.get("maxSupportedVersion", 0))
    return None


def _levels(events: list[tuple[int, int, object]]) -> Inferred:
    """Each Confluent record's level: the highest every registration current at it supports (each broker's latest
    at or before its offset: after a rolling upgrade, the brokers the controller finalized the new level for), or
    -- for a record before any registration -- every registration up to the next one."""
    regs = [(o, d) for o, _, d in events if isinstance(d, dict)]
    confs = [(o, lvl) for o, _, lvl in events if not isinstance(lvl, dict)]
    out = []
    for k, (offset, confluent) in enumerate(confs):
        current: dict = {}
        for o, d in regs:
            if o <= offset:
                current[d.get("brokerId")] = d
        chosen = list(current.values())
        if not any(_range(d) for d in chosen):
            end = confs[k + 1][0] if k + 1 < len(confs) else None
            chosen = [d for o, d in regs if o >= offset and (end is None or o < end)]
        ranges = [r for r in map(_range, chosen) if r]
        level = min(hi for _, hi in ranges) if ranges else None
        if level is not None and (level < max(lo for lo, _ in ranges) or level <= 0):
            level = None
        out.append((offset, level, confluent))
    # a record no registration bounds keeps the level before it; those before the first bounded one (the bootstrap
    # checkpoint's and the segment's first, before any broker registers) take that one's
    known = [level for _, level, _ in out if level is not None]
    prev = known[0] if known else None
    for k, (offset, level, confluent) in enumerate(out):
        prev = prev if level is None else level
        out[k] = (offset, prev, confluent)
    return Inferred(tuple(out), sum(1 for _, d in regs if _range(d)))


def as_apache(records: pa.Table) -> tuple[pa.Table, list[str]]:
    """``records`` with each :data:`CONFLUENT_MV` FeatureLevelRecord read as ``metadata.version`` at its
    :func:`infer`-red level (typed columns and ``data_json`` alike: the compiled passes read the former, the image the
    latter), and the note saying so; unchanged, with no note, for any other log (unchanged with a warning when no
    level can be inferred)."""
    got = infer(records)
    if got is None:
        return records, []
    if got.level is None:
        return records, [got.note()]
    is_confluent = pc.fill_null(pc.equal(records.column("feature_name"), CONFLUENT_MV), False)
    levels = pa.array([level for _, level, _ in got.records], records.schema.field("feature_level").type)
    texts = pa.array([json.dumps({"name": METADATA_VERSION, "featureLevel": level}, separators=(",", ":"))
                      for _, level, _ in got.records], pa.string())
    swapped = {"feature_name": pa.array([METADATA_VERSION] * len(got.records), pa.string()), "feature_level": levels,
               "data_json": texts}
    mask = is_confluent.combine_chunks() if isinstance(is_confluent, pa.ChunkedArray) else is_confluent
    for name, values in swapped.items():
        i = records.schema.get_field_index(name)
        values = values.cast(records.schema.field(i).type)
        column = pc.replace_with_mask(records.column(i).combine_chunks(), mask, values)
        records = records.set_column(i, records.schema.field(i), column)
    return records, [got.note()]


def as_apache_recs(recs: list) -> tuple[list, list[str]]:
    """:func:`as_apache` of records as :class:`controller_core.replay.Rec` (the Spark driver's cluster-level
    records): the same inference from the same records, the same rewrite of the feature records' data."""
    import dataclasses

    names = {r.data.get("name") for r in recs if r.type == "FEATURE_LEVEL_RECORD"}
    if CONFLUENT_MV not in names or METADATA_VERSION in names:
        return recs, []
    events = [(r.offset, i, r.data if r.type == "REGISTER_BROKER_RECORD" else r.data.get("featureLevel"))
              for i, r in enumerate(recs) if r.type == "REGISTER_BROKER_RECORD"
              or (r.type == "FEATURE_LEVEL_RECORD" and r.data.get("name") == CONFLUENT_MV)]
    got = _levels(events)
    if got.level is None:
        return recs, [got.note()]
    levels = iter([level for _, level, _ in got.records])
    out = [dataclasses.replace(r, data={"name": METADATA_VERSION, "featureLevel": next(levels)})
           if r.type == "FEATURE_LEVEL_RECORD" and r.data.get("name") == CONFLUENT_MV else r for r in recs]
    return out, [got.note()]
