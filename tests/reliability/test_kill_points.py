"""Crash safety: a job killed at any commit point and run again ends with exactly the tables of a run that
was never interrupted (README "Crash safety and concurrency").

Every commit of a job is a numbered commit point (lake/delta.py).  A SIGKILL right after commit k leaves
the lake exactly as it is at that moment, so one uninterrupted run per job copies the lake at each of its
commit points (``delta.on_commit``): each copy is the lake a job killed there leaves.  Each copy is then
run again and every table compared, sorted, with the uninterrupted run's: ingest, a full replay and an
incremental replay (the issue's case: killed after the history write, before the checkpoint), and the ingest
of a second node's copy of the log that holds more of it (only its tail is added: bronze is keyed by the log).  Two real
SIGKILLs through the test hook (``KRAFT_AUDIT_CRASH_AFTER``, subprocesses) check that the hook kills
and that the next run takes over the dead job's lock and removes its staging folder.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller_core.codec.batch import iter_batches_scalar
from jobs import cli
from jobs.ingest import ingest
from jobs.replay import replay
from lake import catalog, delta
from lake.delta import Lake
from job_conf import write_small_job_conf
from realdata_facts import CLUSTERS, REALDATA

SPLIT = 64 << 20
SEG0 = "00000000000000000000.log"
SEG1 = "00000000000000005151.log"
BUCKETS = 3
BRONZE = (catalog.METADATA_RECORDS.name, catalog.QUARANTINE.name)
SILVER = tuple(t.name for t in (catalog.PARTITION_STATE_HISTORY, catalog.PARTITION_STATE, catalog.BROKER_STATE_HISTORY,
                                catalog.TOPIC_CONFIG_HISTORY, catalog.QUORUM_HISTORY, catalog.DIVERGENCES,
                                catalog.INVARIANT_BREACHES, catalog.REPLAY_CHECKPOINTS))
# a checkpoint row's run-specific columns: when it ran, and the versions of the commits it made
RUN_SPECIFIC = {catalog.REPLAY_CHECKPOINTS.name: ("replayed_at", "table_versions")}
# the commit points of each job on this log: a new commit must be added to the sweep knowingly
POINTS = {"ingest": 2, "full": 8, "incremental": 9, "copy": 1}


def _half(path: Path) -> bytes:
    buf = path.read_bytes()
    cut = 0
    for h, _ in iter_batches_scalar(buf):
        if h.position > len(buf) // 2:
            break
        cut = h.position + h.size
    return buf[:cut]


def tables(root: Path, names) -> dict:
    """Every row of each table, run-specific columns left out, sorted."""
    lake = Lake(root, None, backend="delta-rs")
    out = {}
    for name in names:
        t = lake.read_arrow(name)
        t = t.drop_columns([c for c in RUN_SPECIFIC.get(name, ()) if c in t.column_names])
        out[name] = sorted(json.dumps(r, default=str, sort_keys=True) for r in t.to_pylist())
    return out


def _snapshots(folder: Path, lake_root: Path, run, events: list) -> list[Path]:
    """Run ``run()`` once, copying the lake at each of its commit points; the copies, in commit order.
    ``events`` gets every (commit number, stage, table)."""
    copies = []

    def hook(n, stage, table):
        events.append((n, stage, table))
        if stage == "committed":
            dst = folder / f"after-{n:02d}-{table.replace('/', '_')}"
            shutil.copytree(lake_root, dst)
            copies.append(dst)

    start = delta.commits()
    delta.on_commit(lambda n, stage, table: hook(n - start, stage, table))
    try:
        run()
    finally:
        delta.clear_hooks()
    return copies


@pytest.fixture(scope="module")
def sweep(spark, tmp_path_factory):
    """The uninterrupted runs (ingest of segment 0, a full replay; ingest of half of segment 1, an
    incremental replay), the lake at every commit point of each, and the lake before each job."""
    src = REALDATA / CLUSTERS["arthurarutunyan04"]
    root = tmp_path_factory.mktemp("kill")
    data = root / "kafka-data"
    meta = data / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    shutil.copy(src / "bootstrap.checkpoint", data)
    shutil.copy(src / "__cluster_metadata-0" / SEG0, meta)
    lake_root = root / "lake"
    lake = Lake(lake_root, spark)
    snaps, before, want, events = {}, {}, {}, {}

    def phase(name, run, names):
        before[name] = root / f"before-{name}"
        shutil.copytree(lake_root, before[name]) if lake_root.exists() else before[name].mkdir()
        folder = root / name
        folder.mkdir()
        events[name] = []
        snaps[name] = _snapshots(folder, lake_root, run, events[name])
        want[name] = tables(lake_root, names)

    phase("ingest", lambda: ingest(spark, lake, "c", str(data), SPLIT), BRONZE)
    phase("full", lambda: replay(spark, lake, "c", BUCKETS), SILVER)
    grown = root / "kafka-data-grown"  # the log grows: segment 1 half written
    shutil.copytree(data, grown)
    (grown / "__cluster_metadata-0" / SEG1).write_bytes(_half(src / "__cluster_metadata-0" / SEG1))
    ingest(spark, lake, "c", str(grown), SPLIT)
    phase("incremental", lambda: replay(spark, lake, "c", BUCKETS), SILVER)
    copy = root / "kafka-2-data"  # another node's copy: segment 1 whole
    shutil.copytree(data, copy)
    shutil.copy(src / "__cluster_metadata-0" / SEG1, copy / "__cluster_metadata-0")
    phase("copy", lambda: ingest(spark, lake, "c", str(copy), SPLIT), BRONZE)
    assert {k: len(v) for k, v in snaps.items()} == POINTS
    return dict(root=root, data={"ingest": data, "copy": copy}, snaps=snaps, before=before, want=want, events=events)


def _rerun(spark, job: str, lake_root: Path, data: dict, last: bool) -> None:
    lake = Lake(lake_root, spark)
    if job in ("ingest", "copy"):
        ingest(spark, lake, "c", str(data[job]), SPLIT)
    else:
        assert replay(spark, lake, "c", BUCKETS)["mode"] == ("up-to-date" if last else job)


@pytest.mark.parametrize("job,point", [(j, k) for j, n in POINTS.items() for k in range(1, n + 1)])
def test_a_run_killed_after_any_commit_then_run_again_equals_an_uninterrupted_run(spark, sweep, job, point, tmp_path):
    lake_root = tmp_path / "lake"
    shutil.copytree(sweep["snaps"][job][point - 1], lake_root)  # the lake a kill after commit `point` leaves
    names = BRONZE if job in ("ingest", "copy") else SILVER
    _rerun(spark, job, lake_root, sweep["data"], last=point == POINTS[job])
    got = tables(lake_root, names)
    for name in names:
        assert got[name] == sweep["want"][job][name], f"{name} after a kill after commit {point} of {job}"


H, S_, B, T_ = (catalog.PARTITION_STATE_HISTORY.name, catalog.PARTITION_STATE.name, catalog.BROKER_STATE_HISTORY.name,
                catalog.TOPIC_CONFIG_HISTORY.name)
D, I, C = catalog.DIVERGENCES.name, catalog.INVARIANT_BREACHES.name, catalog.REPLAY_CHECKPOINTS.name
Q = catalog.QUORUM_HISTORY.name


def test_the_commit_points_swept(sweep):
    """What each commit point of each job is (the table it commits to), the checkpoint last."""
    got = {job: [p.name.split("-", 2)[2] for p in paths] for job, paths in sweep["snaps"].items()}
    assert got == {"ingest": list(BRONZE), "full": [B, T_, Q, H, S_, D, I, C],
                   "incremental": [B, T_, Q, H, H, S_, D, I, C],  # valid-tos closed, then the new history rows
                   "copy": [BRONZE[0]]}  # the copy's tail; nothing new to quarantine: no commit
    # the Spark writes stage their output first (KRAFT_AUDIT_CRASH_AFTER=staged:<n>): the Spark tasks' files are
    # written and checked, not committed -- the merge too (its rewrite of the files holding a closed valid-to
    # is written by the tasks); the checkpoint (Arrow) does not
    staged = {job: [(n, t) for n, stage, t in ev if stage == "staged"] for job, ev in sweep["events"].items()}
    assert staged == {"ingest": [(1, BRONZE[0]), (2, BRONZE[1])],
                      "full": [(1, B), (2, T_), (3, Q), (4, H), (5, S_), (6, D), (7, I)],
                      "incremental": [(1, B), (2, T_), (3, Q), (4, H), (5, H), (6, S_), (7, D), (8, I)],
                      "copy": [(1, BRONZE[0])]}


def test_the_incremental_replay_killed_after_its_history_write_left_the_issues_state(sweep):
    """Commit 5 of the incremental replay, the issue's point: the new history rows are in, the checkpoint
    is still the full replay's -- what a re-run must replace, not append a second time."""
    at = tables(sweep["snaps"]["incremental"][4], [H, C])
    assert len(at[C]) == 1 and len(sweep["want"]["full"][H]) < len(at[H]) == len(sweep["want"]["incremental"][H])


# ------------------------------------------------------------------------------------------- real kills
def _conf(path: Path) -> Path:
    conf = path / "conf.yaml"
    return write_small_job_conf(conf, "replay:\n  buckets: 3\nlock:\n  timeout_s: 5\n")


def _killed(args: list[str], crash_after: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(cli.__file__).resolve().parents[1]),
               **{delta.CRASH_ENV: crash_after})
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def _leftovers(lake_root: Path):
    staging = lake_root / delta.STAGING_DIR
    return (sorted(p.name for p in staging.iterdir()) if staging.is_dir() else [],
            sorted(p.name for p in (lake_root / "_locks").glob("*.lock")))


@pytest.mark.parametrize("job,crash_after", [("incremental", "5")])
def test_sigkill_through_the_hook_then_the_next_run_cleans_up_and_converges(spark, sweep, tmp_path, capsys, job,
                                                                           crash_after):
    """The incremental replay killed right after writing the new history rows (commit 5), before the findings
    and the checkpoint: it leaves its staging folder and its lock.  (One real kill: each costs a JVM start;
    ``("ingest", "staged:1")`` kills an ingest with its records staged, not committed.)"""
    lake_root = tmp_path / "lake"
    shutil.copytree(sweep["before"][job], lake_root)
    conf = _conf(tmp_path)
    cmd = ([job, "--cluster", "c", "--log-dir", str(sweep["data"]["ingest"])] if job == "ingest"
           else ["replay", "--cluster", "c"])
    cmd += ["--lake", str(lake_root), "--conf", str(conf)]
    res = _killed(cmd, crash_after, tmp_path)
    assert res.returncode == -9, res.stderr[-2000:]
    staging, locks = _leftovers(lake_root)
    assert len(staging) == 1 and locks == ["c.lock"]  # what a killed job leaves behind

    assert cli.main(cmd) == 0  # in this process: same lake, same arguments, no hook
    err = capsys.readouterr().err
    assert "taking over the stale lock of" in err and "is gone" in err
    assert f"removed {lake_root / delta.STAGING_DIR / staging[0]}, left by a killed job" in err
    assert _leftovers(lake_root) == ([], [])
    names = BRONZE if job in ("ingest", "copy") else SILVER
    assert tables(lake_root, names) == sweep["want"][job]


# ------------------------------------------------------------------------------------------ empty success
def test_a_commit_that_does_not_hold_what_was_decoded_fails_the_job(tmp_path):
    """ingest's check after its append: the cluster's rows must have grown by exactly the new rows."""
    import pyarrow as pa

    from jobs.ingest import _appended

    lake = Lake(tmp_path / "lake", None, backend="delta-rs")
    table = catalog.REPLAY_CHECKPOINTS  # any table partitioned by cluster
    mark = {f.name: None for f in table.schema} | {"cluster": "c", "last_offset": 1}
    lake.append_arrow(table.name, pa.Table.from_pylist([mark], table.schema), partition_by="cluster")
    _appended(lake, table, "c", None, 1)
    with pytest.raises(delta.CommitCheckError, match="3 new rows were decoded for cluster 'c' but the table went "
                                                     "from 0 to 1 rows"):
        _appended(lake, table, "c", None, 3)
    lake.append_arrow(table.name, pa.Table.from_pylist([mark | {"cluster": "other"}], table.schema))
    with pytest.raises(delta.CommitCheckError, match="went from 1 to 1 rows"):
        _appended(lake, table, "c", 0, 2)  # another cluster's rows do not count


def test_quality_fails_on_an_empty_bronze(tmp_path):
    import argparse
    import io

    from jobs import quality

    lake = Lake(tmp_path / "lake", None, backend="delta-rs")
    lake.append_arrow(catalog.METADATA_RECORDS.name, catalog.METADATA_RECORDS.schema.empty_table(),
                      partition_by="cluster")  # an ingest that committed an empty batch
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(conf=None, lake=str(lake.root), cluster="c", json=False)
    assert quality.run(args, out, err) == 1
    assert (f"kraft-audit quality: cluster 'c' has no rows in metadata_records ({lake.root}): an empty bronze passes "
            "no check; ingest its log first") in err.getvalue()
    assert '[ERROR] metadata_records: ExpectTableRowCountToBeBetween {"min_value": 1}:' in out.getvalue()
