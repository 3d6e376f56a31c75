"""One real log growing, replayed at every step, with the lake copied at every commit point: what the crash
tests (tests/reliability/test_kill_points.py) and the incremental-replay tests (tests/jobs/test_replay_incremental.py)
both start from, built once per session (conftest ``growth``).

arthurarutunyan04's log: segment 0 ingested and replayed (full), half of segment 1 ingested and replayed
(incremental), then another node's copy holding segment 1 whole ingested (only its tail is added: bronze is keyed
by the log).  Each of those jobs runs once, uninterrupted, with a hook that copies the lake at each of its commit
points (``delta.on_commit``): each copy is the lake a SIGKILL right after that commit leaves."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from controller_core.codec.batch import iter_batches_scalar
from jobs.ingest import ingest
from jobs.replay import replay
from lake import catalog, delta
from lake.delta import Lake
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


def half_at_batch_boundary(path: Path) -> bytes:
    """The first batches of a segment, cut at a batch boundary near the middle (a growing segment)."""
    buf = path.read_bytes()
    cut = 0
    for h, _ in iter_batches_scalar(buf):
        if h.position > len(buf) // 2:
            break
        cut = h.position + h.size
    assert 0 < cut < len(buf)
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


def _snapshots(folder: Path, lake_root: Path, run, events: list):
    """Run ``run()`` once, copying the lake at each of its commit points: (its result, the copies in commit
    order).  ``events`` gets every (commit number, stage, table)."""
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
        result = run()
    finally:
        delta.clear_hooks()
    return result, copies


def build(spark, root: Path) -> dict:
    """The growth above in ``root``: {lake: the lake after it all, data: {ingest: segment 0's data directory,
    copy: the other node's}, snaps / before / want / events / results: per job (ingest, full, incremental,
    copy) the lake at each commit point, the lake before the job, its tables after it, its commit events and
    what the job returned}."""
    src = REALDATA / CLUSTERS["arthurarutunyan04"]
    data = root / "kafka-data"
    meta = data / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    shutil.copy(src / "bootstrap.checkpoint", data)
    shutil.copy(src / "__cluster_metadata-0" / SEG0, meta)
    lake_root = root / "lake"
    lake = Lake(lake_root, spark)
    snaps, before, want, events, results = {}, {}, {}, {}, {}

    def phase(name, run, names):
        before[name] = root / f"before-{name}"
        shutil.copytree(lake_root, before[name]) if lake_root.exists() else before[name].mkdir()
        folder = root / name
        folder.mkdir()
        events[name] = []
        results[name], snaps[name] = _snapshots(folder, lake_root, run, events[name])
        want[name] = tables(lake_root, names)

    phase("ingest", lambda: ingest(spark, lake, "c", str(data), SPLIT), BRONZE)
    phase("full", lambda: replay(spark, lake, "c", BUCKETS), SILVER)
    grown = root / "kafka-data-grown"  # the log grows: segment 1 half written
    shutil.copytree(data, grown)
    (grown / "__cluster_metadata-0" / SEG1).write_bytes(half_at_batch_boundary(src / "__cluster_metadata-0" / SEG1))
    ingest(spark, lake, "c", str(grown), SPLIT)
    phase("incremental", lambda: replay(spark, lake, "c", BUCKETS), SILVER)
    copy = root / "kafka-2-data"  # another node's copy: segment 1 whole
    shutil.copytree(data, copy)
    shutil.copy(src / "__cluster_metadata-0" / SEG1, copy / "__cluster_metadata-0")
    phase("copy", lambda: ingest(spark, lake, "c", str(copy), SPLIT), BRONZE)
    return dict(lake=lake_root, data={"ingest": data, "copy": copy}, snaps=snaps, before=before, want=want,
                events=events, results=results)
