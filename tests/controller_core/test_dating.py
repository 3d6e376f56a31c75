"""Dating the history (``pipeline.date_history``): each row's valid-from / valid-to time is the timestamp of the
segment record at its ``offset`` / ``valid_to_offset`` (null for a snapshot's state), its trigger the label
``explain`` gave its change record.

The replay dates its own history with the compiled fold's row arrays (each history row's input row, the row
that ends it, the change rows): no search by offset.  Here the result is held to the search, on the embedded
scenarios, every real cluster and a simulated log whose replay starts from a snapshot (its first segments
deleted), where the snapshot's rows have no time and the segment records after it do.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from controller_core import pipeline
from controller_core.kernels import fold_pass, layout
from controller_core.replay import read_log_dir
from jobs import cli
from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parents[2]
LOG_DIRS = {"default-cluster": ROOT / "data" / "default-cluster",
            "last-replica-standing-elr-off": ROOT / "data" / "last-replica-standing-elr-off",
            **{name: REALDATA / rel for name, rel in CLUSTERS.items()}}
DATED = ["valid_from_timestamp", "valid_to_timestamp", "trigger"]


@pytest.fixture(scope="module")
def from_snapshot(tmp_path_factory) -> Path:
    """az-outage with small segments and frequent snapshots, its first two segments deleted: the replay starts
    from the snapshot that covers them."""
    root = tmp_path_factory.mktemp("dating")
    sc = yaml.safe_load((ROOT / "conf/scenarios/az-outage.yaml").read_text())
    sc.update(segment_bytes=4000, snapshot_every=60)
    (root / "sc.yaml").write_text(yaml.safe_dump(sc))
    assert cli.main(["simulate", str(root / "sc.yaml"), "-o", str(root / "az")]) == 0
    meta = root / "az" / "__cluster_metadata-0"
    segments = sorted(meta.glob("*.log"))
    assert len(segments) >= 3
    for seg in segments[:2]:
        seg.unlink()
    return root / "az"


def _by_search(rep: pipeline.Replay, records: pa.Table) -> pa.Table:
    """The replay's history dated again by the search (no fold arrays), from its own trigger column."""
    base = rep.history.drop_columns(DATED)
    labelled = rep.history.filter(pc.is_valid(rep.history.column("trigger")))
    triggers = labelled.select(["offset", "topic_id", "partition_id", "trigger"])
    return pipeline.date_history(base, records, triggers)


def _check(log_dir: Path) -> tuple[pipeline.Replay, pa.Table]:
    records, _ = read_log_dir(log_dir, partition_json=False)
    folded = fold_pass.fold(records, layout.build(records, cluster=False))
    assert folded.rows is not None and folded.successor is not None  # the replay dates with the fold's arrays
    rep = pipeline.run(records)
    searched = _by_search(rep, records)
    for name in searched.column_names:
        assert searched.column(name).equals(rep.history.column(name)), name
    return rep, records


@pytest.mark.parametrize("name", sorted(LOG_DIRS))
def test_dating_by_the_folds_rows_equals_the_search(name):
    rep, _ = _check(LOG_DIRS[name])
    assert rep.history.column("valid_from_timestamp").null_count == 0  # every replay here starts at offset 0
    assert pc.count(rep.history.column("valid_to_timestamp")).as_py() > 0


def test_dating_a_replay_that_starts_from_a_snapshot(from_snapshot):
    rep, records = _check(from_snapshot)
    snap = pc.equal(records.column("source_kind"), pipeline.SNAPSHOT)
    snap_offsets = pc.unique(records.column("offset").filter(snap))
    from_snap = pc.is_in(rep.history.column("offset"), snap_offsets)
    assert 0 < pc.sum(from_snap).as_py() < rep.history.num_rows
    # the snapshot's rows have no time, the rows of the segment records after it have theirs; a snapshot row's
    # valid-to is the time of the change that ended it
    assert rep.history.column("valid_from_timestamp").filter(from_snap).null_count == pc.sum(from_snap).as_py()
    assert rep.history.column("valid_from_timestamp").filter(pc.invert(from_snap)).null_count == 0
    assert pc.count(rep.history.column("valid_to_timestamp").filter(from_snap)).as_py() > 0


def test_dating_by_rows_declines_segment_offsets_out_of_order():
    """Two segment records with one offset, or offsets out of order: the search decides, as before."""
    records, _ = read_log_dir(LOG_DIRS["default-cluster"], partition_json=False)
    folded = fold_pass.fold(records, layout.build(records, cluster=False))
    seg = pc.equal(records.column("source_kind"), pipeline.SEGMENT).to_numpy()
    backwards = records.take(pa.array(range(records.num_rows - 1, -1, -1)))
    seg_back = pc.equal(backwards.column("source_kind"), pipeline.SEGMENT).to_numpy()
    assert pipeline._date_by_rows(folded.history, records, seg, folded.rows, folded.successor) is not None
    assert pipeline._date_by_rows(folded.history, backwards, seg_back, folded.rows, folded.successor) is None


@pytest.mark.parametrize("unit", ["s", "us", "ns"])
def test_dating_by_rows_reads_any_timestamp_unit(unit, from_snapshot):
    """The records' times in another unit (a lake read back through Spark has microseconds): the dates are the
    ones the decoder's milliseconds give (whole seconds for "s": the times truncated first), snapshot rows included."""
    records, _ = read_log_dir(from_snapshot, partition_json=False)
    i = records.schema.get_field_index("timestamp")
    ms = records.column(i)
    if unit == "s":  # whole seconds, so that the unit holds each time exactly
        ms = pc.multiply(pc.divide(ms.cast(pa.int64()), 1000), 1000).cast(ms.type)
        records = records.set_column(i, records.schema.field(i), ms)
    other = records.set_column(i, records.schema.field(i).with_type(pa.timestamp(unit, tz="UTC")),
                               ms.cast(pa.timestamp(unit, tz="UTC")))
    want, got = pipeline.run(records).history, pipeline.run(other).history
    for name in ("valid_from_timestamp", "valid_to_timestamp"):
        assert got.column(name).equals(want.column(name)), name
    assert 0 < want.column("valid_from_timestamp").null_count < want.num_rows  # the snapshot's rows have no time
