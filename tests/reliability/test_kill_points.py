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

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from growth_sweep import BRONZE, BUCKETS, SILVER, SPLIT, tables
from job_conf import write_small_job_conf
from jobs import cli
from jobs.ingest import ingest
from jobs.replay import replay
from lake import catalog, delta
from lake.delta import Lake

# the commit points of each job on this log: a new commit must be added to the sweep knowingly
POINTS = {"ingest": 2, "full": 8, "incremental": 9, "copy": 1}


@pytest.fixture(scope="module")
def sweep(growth):
    """The uninterrupted runs (ingest of segment 0, a full replay; ingest of half of segment 1, an
    incremental replay; another node's copy), the lake at every commit point of each, and the lake before
    each job: conftest's ``growth`` (tests/growth_sweep.py)."""
    assert {k: len(v) for k, v in growth["snaps"].items()} == POINTS
    return growth


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
    # is written by the tasks); the timelines, a full replay's few findings and the checkpoint (rows the driver
    # commits through delta-rs, Lake.overwrite_rows) do not
    staged = {job: [(n, t) for n, stage, t in ev if stage == "staged"] for job, ev in sweep["events"].items()}
    assert staged == {"ingest": [(1, BRONZE[0]), (2, BRONZE[1])],
                      "full": [(4, H), (5, S_)],
                      "incremental": [(4, H), (5, H), (6, S_), (7, D), (8, I)],
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
