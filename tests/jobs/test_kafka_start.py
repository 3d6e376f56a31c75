"""Where Kafka starts a metadata log that holds a snapshot past its end (``replay.kafka_start``).

When Kafka opens its metadata log it truncates the whole log to its latest snapshot if that snapshot is of a later
leader epoch than the log's last batch, or of the same epoch and past the log's end offset (what a follower leaves
that stopped after fetching a snapshot from the leader and before truncating its own log; a real data directory of
that shape was found among public ones).  A replay then starts from that snapshot, as Kafka does, and says so once:

* a simulated cluster's log cut before its newest snapshot: every command that replays the directory (verify,
  describe, the pipeline, the lake's replay) starts from the snapshot, and the state equals the whole log's at the
  snapshot's end; a point before the cut is still read off the segments, equal to the whole log's there; a point
  between the cut and the snapshot has no state;
* a snapshot renamed to a later epoch than the log's last batch: the records after it are not replayed;
* the healthy logs -- every real log, the simulated one whole -- start where they did, with no note.
"""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from controller_core import pipeline, point
from controller_core.copies import read_copy
from controller_core.logdir import SNAPSHOT, discover
from controller_core.replay import kafka_start, last_segment_row, plan, read_log_dir, read_plan
from jobs import cli
from realdata_facts import CLUSTERS, REALDATA
from snapshotted_log import partitions_at, snapshotted_log


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    return snapshotted_log(tmp_path_factory.mktemp("kafka-start"), segment_bytes=8192)


def _log(d: Path) -> Path:
    return d / "__cluster_metadata-0"


def _snapshots(d: Path) -> list:
    return sorted((f for f in discover(_log(d)) if f.kind == SNAPSHOT), key=lambda f: f.offset)


def _cut_before(whole: Path, dest: Path, offset: int) -> int:
    """A copy of the data directory whose log ends with the last batch before ``offset`` (later segments removed, the
    one holding it truncated at that batch): its last offset."""
    shutil.copytree(whole, dest)
    c = read_copy(_log(dest))
    keep = c.base < offset
    last = int(c.last[keep][-1])
    cut = int(c.files[int(keep.sum())]) if not keep.all() else None
    for i, label in enumerate(c.segments):
        path = dest / label
        if cut is not None and i > cut:
            path.unlink()
        elif cut is not None and i == cut:
            at = int(c.position[int(keep.sum())])
            path.write_bytes(path.read_bytes()[:at])
    return last


def test_healthy_logs_start_where_they_did(whole):
    for d in [_log(whole)] + [REALDATA / rel for rel in CLUSTERS.values()]:
        p = plan(d)
        records = read_plan(p, [], partition_json=False)
        assert kafka_start(p, *last_segment_row(records)) is None, d
        notes: list = []
        _, start = read_log_dir(d, [], notes=notes)
        assert notes == [] and start == p.start_offset


def test_a_follower_stopped_after_fetching_a_snapshot(whole, tmp_path, capsys):
    snaps = _snapshots(whole)
    assert len(snaps) >= 3  # the scenario writes several
    latest = snaps[-1]
    cut = _cut_before(whole, tmp_path / "follower", snaps[-2].offset - 5)
    d = tmp_path / "follower"
    assert cut < latest.offset - 1

    notes: list = []
    records, start = read_log_dir(_log(d), [], notes=notes)
    assert start == latest.offset
    assert len(notes) == 1 and latest.label in notes[0] and f"past the end of the log (last offset {cut})" in notes[0]
    # the state is the snapshot's: the whole log's at the snapshot's end
    at_end = partitions_at(_log(whole), latest.offset - 1)
    assert partitions_at(_log(d)) == at_end and at_end
    assert partitions_at(_log(d), latest.offset - 1) == at_end
    rep, _ = pipeline.from_log_dir(_log(d), times=False)
    assert rep.notes == notes and rep.start_offset == latest.offset
    # a point the segments still hold: theirs, as in the whole log
    assert partitions_at(_log(d), cut - 3) == partitions_at(_log(whole), cut - 3)
    # between the segments' end and the snapshot: no state to show
    with pytest.raises(point.PointError, match=f"last offset {cut}"):
        point.image_at(_log(d), cut + 2, err=io.StringIO())
    # verify says where it started, once, and exits 0
    assert cli.main(["verify", "--log-dir", str(_log(d))]) == 0
    out, err = capsys.readouterr()
    assert f"from the snapshot at offset {latest.offset}" in out
    assert [line for line in err.splitlines() if "note:" in line] == [f"kraft-audit verify: {notes[0]}"]
    assert cli.main(["describe", "--log-dir", str(d), "--json"]) == 0
    out, err = capsys.readouterr()
    got = {(p["topicId"], p["partition"]): p for p in json.loads(out)}
    assert {k: (v["replicas"], v["isr"], v["leader"]) for k, v in got.items()} == \
           {k: v[:3] for k, v in at_end.items()}
    assert f"kraft-audit describe: {notes[0]}" in err.splitlines()
    # the audit of the directory says it too, once
    assert cli.main(["audit", "--log-dir", str(_log(d)), "--json"]) in (0, 1)
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "note:" in line] == [f"kraft-audit audit: {notes[0]}"]


def test_a_snapshot_past_the_end_of_an_earlier_epoch_is_not_where_kafka_starts(whole, tmp_path):
    """Past the log's end but of an earlier leader epoch than its last batch: Kafka keeps the log (the rule asks for
    the same epoch), and so does the replay."""
    snaps = _snapshots(whole)
    d = tmp_path / "earlier"
    cut = _cut_before(whole, d, snaps[-2].offset - 5)
    _, epoch = last_segment_row(read_plan(plan(_log(d)), [], partition_json=False))
    assert epoch >= 1
    latest = [s for s in _snapshots(d) if s.offset == snaps[-1].offset][0]
    latest.path.rename(latest.path.with_name(f"{latest.offset:020d}-{epoch - 1:010d}.checkpoint"))
    notes: list = []
    records, start = read_log_dir(_log(d), [], notes=notes)
    assert notes == [] and start == 0 and records.column("offset")[-1].as_py() == cut


def test_a_snapshot_of_a_later_epoch(whole, tmp_path):
    """A snapshot of a later leader epoch than the log's last batch: Kafka truncates the log to it even where the
    log goes on past it, so the records after it are not replayed."""
    d = tmp_path / "epoch"
    shutil.copytree(whole, d)
    snaps = _snapshots(d)
    middle = snaps[-2]
    for s in snaps:
        if s.offset > middle.offset:
            s.path.unlink()
    later = middle.path.with_name(f"{middle.offset:020d}-{9:010d}.checkpoint")
    middle.path.rename(later)
    _, epoch = last_segment_row(read_plan(plan(_log(d)), [], partition_json=False))
    assert epoch < 9
    notes: list = []
    records, start = read_log_dir(_log(d), [], notes=notes)
    assert start == middle.offset and len(notes) == 1 and f"of leader epoch 9, later than the log's last batch " \
                                                          f"(epoch {epoch})" in notes[0]
    assert records.column("source_kind").to_pylist() == ["snapshot"] * records.num_rows
    assert partitions_at(_log(d)) == partitions_at(_log(whole), middle.offset - 1)


def test_the_lake_replay_starts_where_the_log_directory_replay_does(whole, tmp_path, spark, capsys):
    from lake import catalog

    snaps = _snapshots(whole)
    _cut_before(whole, tmp_path / "follower", snaps[-2].offset - 5)
    d = tmp_path / "follower"
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "f", "--log-dir", str(d), "--lake", lake]) == 0
    capsys.readouterr()
    assert cli.main(["replay", "--cluster", "f", "--lake", lake]) == 0
    out, err = capsys.readouterr()
    assert f"replay through offset {snaps[-1].offset - 1}" in out
    assert "kraft-audit replay: note: replaying from snapshot" in err and snaps[-1].label in err
    from lake.delta import Lake

    rows = Lake(lake, spark).read(catalog.PARTITION_STATE.name).collect()
    got = {(r.topic_id, r.partition_id): (list(r.replicas), list(r.isr), r.leader, r.leader_epoch, r.partition_epoch)
           for r in rows}
    assert got == partitions_at(_log(whole), snaps[-1].offset - 1)
