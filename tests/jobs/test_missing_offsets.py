"""Offsets no file holds (``replay.Gap``) and the snapshot a replay bridges them with (``replay.bridging``).

A KRaft metadata log holds a record at every offset, so a run of offsets that no segment holds was lost (a segment
emptied, deleted or cut; real data directories of both shapes were found among public ones: an emptied first
segment, an emptied segment between the snapshot a replay starts from and the next one).  Every replay of a log
directory says so in one warning line per gap, ``verify`` exits 1 and lists them in ``--json``; where a snapshot ends
inside a gap the replay starts from the newest such snapshot (it holds the state whatever records before it were
lost), so only what lies between it and the next record is missing; a point inside a gap has no state (exit 2, one
line), a point before it is read off the segments as in the whole log.

The log: a simulated cluster's, with five segments (bases 0, 29, 77, 119, 162) and snapshots ending at 42, 86, 126.
"""
from __future__ import annotations

import html
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from controller_core import point
from controller_core.logdir import SEGMENT, SNAPSHOT, discover
from controller_core.replay import read_log_dir
from jobs import cli
from lake import catalog
from realdata_facts import CLUSTERS, REALDATA
from snapshotted_log import partitions_at, snapshotted_log



@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    log = snapshotted_log(tmp_path_factory.mktemp("gaps"), segment_bytes=3000) / "__cluster_metadata-0"
    files = discover(log)
    assert [f.offset for f in files if f.kind == SEGMENT] == [0, 29, 77, 119, 162]  # what the cases below cut
    assert [f.offset for f in files if f.kind == SNAPSHOT] == [42, 86, 126]
    return log


def _damaged(whole: Path, dest: Path, emptied=(), deleted=()) -> Path:
    log = dest / "__cluster_metadata-0"
    shutil.copytree(whole.parent, dest)
    for base in emptied:
        (log / f"{base:020d}.log").write_bytes(b"")
    for base in deleted:
        (log / f"{base:020d}.log").unlink()
    return log


def _verify(log: Path, capsys) -> tuple[int, dict, list[str]]:
    code = cli.main(["verify", "--log-dir", str(log), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err.splitlines()


def test_healthy_logs_have_no_gap(whole):
    for d in [whole] + [REALDATA / rel for rel in CLUSTERS.values()]:
        gaps, notes = [], []
        read_log_dir(d, [], notes=notes, gaps=gaps)
        assert gaps == [] and notes == [], d


def test_a_deleted_segment_is_bridged_by_the_snapshot_inside_its_gap(whole, tmp_path, capsys):
    log = _damaged(whole, tmp_path / "d", deleted=[77])  # offsets 77..118 gone; the snapshot at 86 lies inside
    gaps, notes = [], []
    _, start = read_log_dir(log, [], notes=notes, gaps=gaps)
    assert start == 86 and [(g.first, g.last) for g in gaps] == [(86, 118)]
    assert gaps[0].file.endswith(f"{119:020d}.log") and "00000000000000000086-" in gaps[0].after
    assert notes[0].startswith("note: replaying from snapshot __cluster_metadata-0/00000000000000000086-")
    assert notes[1] == gaps[0].message and "offsets 86..118 are missing (33 records)" in notes[1]
    code, doc, err = _verify(log, capsys)
    assert code == 1 and doc["missingOffsets"] == [{"first": 86, "last": 118, "after": gaps[0].after,
                                                     "before": gaps[0].file}]
    assert [line for line in err if "missing" in line] == [f"kraft-audit verify: {gaps[0].message}"]
    # a point before the gap: the segments' state, as in the whole log; inside it: none; from the snapshot: its state
    assert partitions_at(log, 60) == partitions_at(whole, 60) and partitions_at(log, 60)
    with pytest.raises(point.PointError, match=r"offset 100 is among offsets no file holds \(86\.\.118, before "):
        point.image_at(log, 100, err=io.StringIO())
    assert partitions_at(log, 85) == partitions_at(whole, 85)
    # describe and audit at the end warn once
    assert cli.main(["describe", "--log-dir", str(log)]) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "missing" in line] == \
           [f"kraft-audit describe: {gaps[0].message}"]
    assert cli.main(["audit", "--log-dir", str(log)]) in (0, 1)
    assert [line for line in capsys.readouterr().err.splitlines() if "missing" in line] == \
           [f"kraft-audit audit: {gaps[0].message}"]
    # a scheduler reading audit --json sees the gap as verify --json lists it
    assert cli.main(["audit", "--log-dir", str(log), "--json", "--all"]) in (0, 1)
    audited = json.loads(capsys.readouterr().out)
    assert audited["missingOffsets"] == doc["missingOffsets"]
    # the findings from the gap on (replayed without 86..118) are counted and marked; those before it are not
    after = [f for f in audited["findings"] if f["first_offset"] > 118]
    assert 0 < len(after) < audited["findingsTotal"] == len(audited["findings"])
    assert audited["findingsAfterMissingOffsets"] == len(after)
    assert all(f.get("afterMissingOffsets", False) == (f["first_offset"] > 118) for f in audited["findings"])
    assert cli.main(["audit", "--log-dir", str(log)]) in (0, 1)
    assert f"{len(after)} of the findings follow offsets no file holds (86..118)" in capsys.readouterr().out
    # the HTML report says how the log was read, as the commands say it on stderr
    page = tmp_path / "report.html"
    assert cli.main(["report", "--log-dir", str(log), "-o", str(page)]) == 0
    listed = re.search(r'<ul id="replay-notes">(.*?)</ul>', page.read_text(encoding="utf-8")).group(1)
    assert re.findall(r"<li>(.*?)</li>", listed) == [html.escape(n) for n in notes]
    assert cli.main(["report", "--log-dir", str(whole), "-o", str(page)]) == 0
    assert 'id="replay-notes"' not in page.read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["audit", "--log-dir", str(whole), "--json"]) in (0, 1)
    assert "missingOffsets" not in json.loads(capsys.readouterr().out)


def test_an_emptied_segment_between_the_snapshots(whole, tmp_path, capsys):
    log = _damaged(whole, tmp_path / "d", emptied=[119])  # 119..161 gone; the snapshot at 126 inside
    gaps, notes = [], []
    _, start = read_log_dir(log, [], notes=notes, gaps=gaps)
    assert start == 126 and [(g.first, g.last) for g in gaps] == [(126, 161)]
    code, doc, err = _verify(log, capsys)
    assert code == 1 and doc["quarantined"][0]["reason"] == "EMPTY_FILE"
    assert [(g["first"], g["last"]) for g in doc["missingOffsets"]] == [(126, 161)]


def test_an_emptied_first_segment_is_a_log_starting_after_it(whole, tmp_path, capsys):
    """0..28 gone before every record read: the log's records start at 29, so the replay starts from the newest
    snapshot covering that start (126), as for a log whose first segment was deleted -- nothing left missing; the
    lake, which holds no row of the emptied file, plans the same."""
    log = _damaged(whole, tmp_path / "d", emptied=[0])
    gaps, notes = [], []
    _, start = read_log_dir(log, [], notes=notes, gaps=gaps)
    assert start == 126 and gaps == [] and notes == [
        "note: replaying from snapshot __cluster_metadata-0/00000000000000000126-0000000001.checkpoint: the records "
        "before it are not all there"]
    assert partitions_at(log) == partitions_at(whole)
    # a point before that snapshot, after the gap: the newest covering snapshot it reaches
    assert partitions_at(log, 85) == partitions_at(whole, 85)
    code, doc, _ = _verify(log, capsys)
    assert code == 1 and "missingOffsets" not in doc and doc["quarantined"][0]["reason"] == "EMPTY_FILE"


def test_an_emptied_first_segment_and_no_snapshot(whole, tmp_path, capsys):
    log = _damaged(whole, tmp_path / "d", emptied=[0])  # 0..28 gone and nothing to start from after it
    for snap in log.glob("*.checkpoint"):
        snap.unlink()
    gaps, notes = [], []
    _, start = read_log_dir(log, [], notes=notes, gaps=gaps)
    assert start == 0 and [(g.first, g.last) for g in gaps] == [(0, 28)] and notes == [gaps[0].message]
    assert "between the log's start and __cluster_metadata-0/00000000000000000029.log" in gaps[0].message
    with pytest.raises(point.PointError, match=r"offset 10 is among offsets no file holds \(0\.\.28, .*\): the state "
                                               r"there cannot be rebuilt; offset 29 can$"):
        point.image_at(log, 10, err=io.StringIO())
    code, doc, _ = _verify(log, capsys)
    assert code == 1 and [(g["first"], g["last"]) for g in doc["missingOffsets"]] == [(0, 28)]
    # replayed without the topics and brokers 0..28 created, what follows breaks the rules: each finding says so
    found = doc["invariantBreaches"] + doc[catalog.DIVERGENCES.name]
    assert found and all(f["afterMissingOffsets"] for f in found)
    assert cli.main(["verify", "--log-dir", str(log)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert all(line.endswith(" (after missing offsets)") for line in out[:-1]) and len(out) == len(found) + 1
    assert out[-1].endswith(f", 29 offsets missing ({len(found)} of the divergences and findings after them)")


def test_records_starting_past_every_snapshot(whole, tmp_path, spark, capsys):
    """0..161 gone and every snapshot ends before the first record left (162): the replay starts from the newest
    snapshot (126), whose state stands whatever was lost before it, and warns of 126..161 -- whether the segments were
    emptied (the directory still lists them) or deleted (the plan stopped at exit 2 then), and in the lake, which holds
    no row of an emptied file (its replay stopped at exit 2 too)."""
    emptied = _damaged(whole, tmp_path / "e", emptied=[0, 29, 77, 119])
    deleted = _damaged(whole, tmp_path / "d", deleted=[0, 29, 77, 119])
    for log in (emptied, deleted):
        gaps, notes = [], []
        _, start = read_log_dir(log, [], notes=notes, gaps=gaps)
        assert start == 126 and [(g.first, g.last) for g in gaps] == [(126, 161)], log
        assert "00000000000000000126-" in gaps[0].after and gaps[0].message in notes
        assert partitions_at(log, 125) == partitions_at(whole, 125) and partitions_at(log, 125)
        with pytest.raises(point.PointError, match=r"offset 140 is among offsets no file holds \(126\.\.161, "):
            point.image_at(log, 140, err=io.StringIO())
        code, doc, _ = _verify(log, capsys)
        assert code == 1 and [(g["first"], g["last"]) for g in doc["missingOffsets"]] == [(126, 161)]
    assert partitions_at(emptied) == partitions_at(deleted)

    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "g", "--log-dir", str(emptied.parent), "--lake", lake]) == 0
    capsys.readouterr()
    assert cli.main(["replay", "--cluster", "g", "--lake", lake]) == 0
    err = capsys.readouterr().err
    assert "offsets 126..161 are missing" in err
    from lake.delta import Lake

    rows = Lake(lake, spark).read(catalog.PARTITION_STATE.name).collect()
    got = {(r.topic_id, r.partition_id): (list(r.replicas), list(r.isr), r.leader, r.leader_epoch, r.partition_epoch)
           for r in rows}
    assert got == partitions_at(emptied) and got


def test_two_segments_gone_the_newest_snapshot_inside_is_taken(whole, tmp_path):
    log = _damaged(whole, tmp_path / "d", deleted=[29, 77])  # 29..118 gone: the snapshots at 42 and 86 inside
    gaps, notes = [], []
    _, start = read_log_dir(log, [], notes=notes, gaps=gaps)
    assert start == 86 and [(g.first, g.last) for g in gaps] == [(86, 118)]
    # a point inside the gap before the newest snapshot: the older one inside, then the rest of the gap
    assert partitions_at(log, 41) == partitions_at(whole, 41)
    with pytest.raises(point.PointError, match=r"\(42\.\.118, "):
        point.image_at(log, 50, err=io.StringIO())


def test_the_lake_replay_bridges_the_same_gap(whole, tmp_path, spark, capsys):
    """The lake's replay knows the segments' offsets from its files' statistics (or through Spark on a lake it does
    not see): the same start, the same warnings, the same state as the directory's replay."""
    from jobs.replay import _log_end, plan_from_files, replay_plan
    from lake.delta import Lake

    log = _damaged(whole, tmp_path / "d", deleted=[77])
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "g", "--log-dir", str(log.parent), "--lake", lake]) == 0
    capsys.readouterr()
    assert cli.main(["replay", "--cluster", "g", "--lake", lake]) == 0
    out, err = capsys.readouterr()
    gaps, notes = [], []
    read_log_dir(log, [], notes=notes, gaps=gaps)
    assert [line for line in err.splitlines() if "note:" in line or "warning:" in line] == \
           [f"kraft-audit replay: {n}" for n in notes] and len(notes) == 2
    rows = Lake(lake, spark).read(catalog.PARTITION_STATE.name).collect()
    got = {(r.topic_id, r.partition_id): (list(r.replicas), list(r.isr), r.leader, r.leader_epoch, r.partition_epoch)
           for r in rows}
    assert got == partitions_at(log) and got
    # the plan from the files' statistics and the one through Spark agree
    lk = Lake(lake, spark)
    version = lk.version(catalog.METADATA_RECORDS.name)
    by_files, by_spark = [], []
    plan, end, _ = plan_from_files(lk.data_files(catalog.METADATA_RECORDS.name, version, {"cluster": "g"}), by_files)
    records = lk.read(catalog.METADATA_RECORDS.name, version=version)
    want, want_end, _ = _log_end(records, replay_plan(records), by_spark)
    assert (plan.start_offset, end, by_files) == (want.start_offset, want_end, by_spark) == (86, end, notes)
