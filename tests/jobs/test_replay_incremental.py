"""Incremental `kraft-audit replay`: a log that grows (a new segment, a growing active segment) is
replayed piece by piece, and the silver tables end up equal to one full replay of the final log."""
from __future__ import annotations

import shutil

import pytest
from pyspark.sql import functions as F

from growth_sweep import BUCKETS, SPLIT
from jobs.ingest import ingest
from lake import catalog
from lake.delta import Lake
from jobs.replay import SILVER, replay

HISTORY = catalog.PARTITION_STATE_HISTORY.name


def _table(lake, name, cluster):
    df = lake.read(name).where(F.col("cluster") == cluster).drop("cluster")
    return sorted(tuple(r) for r in df.collect())


@pytest.fixture(scope="module")
def grown(spark, growth, tmp_path_factory):
    """Lake `inc`: replayed after segment 0 and after half of segment 1 (conftest's ``growth``: those replays'
    results), then after another node's copy brought the rest of segment 1, then once more with nothing new.
    Lake `full`: one replay of the final log."""
    root = tmp_path_factory.mktemp("grow")
    shutil.copytree(growth["lake"], root / "inc")  # conftest's lake stays as it was for the crash tests
    inc = Lake(root / "inc", spark)
    steps = [growth["results"]["full"], growth["results"]["incremental"]]
    steps.append(replay(spark, inc, "c", buckets=BUCKETS))  # segment 1 whole
    versions = {t: inc.version(t) for t in SILVER}
    steps.append(replay(spark, inc, "c", buckets=BUCKETS))  # nothing new
    after = {t: inc.version(t) for t in SILVER}

    full = Lake(root / "full", spark)
    ingest(spark, full, "c", str(growth["data"]["copy"]), SPLIT)
    whole = replay(spark, full, "c", buckets=2)
    return inc, full, steps, whole, versions, after


def test_each_growth_is_replayed_incrementally(grown):
    _, _, steps, whole, _, _ = grown
    assert [s["mode"] for s in steps] == ["full", "incremental", "incremental", "up-to-date"]
    assert steps[0]["last_offset"] < steps[1]["last_offset"] < steps[2]["last_offset"] == whole["last_offset"]
    # the second and third runs only folded what was new
    assert 0 < steps[1][f"{HISTORY}_new"] < whole[HISTORY]
    assert steps[1][f"{HISTORY}_new"] + steps[2][f"{HISTORY}_new"] \
        == whole[HISTORY] - steps[0][HISTORY]


@pytest.mark.parametrize("table", SILVER)
def test_incremental_equals_full_replay(grown, table):
    inc, full, _, _, _, _ = grown
    got, want = _table(inc, table, "c"), _table(full, table, "c")
    if table == HISTORY:
        assert len(want) > 400  # real history: 440 partition records over both segments
    if table == catalog.PARTITION_STATE.name:
        assert len(want) == 60  # the log's 60 partitions
    assert got == want


def test_history_chains_across_the_growth_points(grown):
    inc, _, steps, _, _, _ = grown
    hist = inc.read(HISTORY).where(F.col("cluster") == "c").collect()
    by = {}
    for r in hist:
        by.setdefault((r.topic_id, r.partition_id), []).append(r)
    crossing = 0
    for rows in by.values():
        rows.sort(key=lambda r: r.offset)
        assert [r.valid_to_offset for r in rows[:-1]] == [r.offset for r in rows[1:]]
        assert rows[-1].valid_to_offset is None
        crossing += sum(1 for r in rows[:-1] if r.offset <= steps[0]["last_offset"] < r.valid_to_offset)
    assert crossing > 0  # states written before the first run were closed by later runs


def test_rerun_with_nothing_new_writes_nothing(grown):
    inc, _, _, _, versions, after = grown
    assert after == versions
    marks = inc.read(catalog.REPLAY_CHECKPOINTS.name).where(F.col("cluster") == "c").orderBy("last_offset").collect()
    assert [m.mode for m in marks] == ["full", "incremental", "incremental"]


def test_full_flag_and_changed_start_replay_everything(spark, grown, tmp_path):
    inc, _, _, whole, _, _ = grown
    again = replay(spark, inc, "c", buckets=3, full=True)
    assert again["mode"] == "full"
    assert again[HISTORY] == whole[HISTORY]
