"""Benchmark inputs, all written by the simulator (``simulator.fleet.simulate_fleet``, the ``fleet-large``
scenario) and cached under ``benchmarks/.cache/`` per (partitions, events, seed):

* :func:`fleet` - the data directory and the simulator's figures;
* :func:`segments` - its log segments (a change-heavy live log: after the topic creations nearly every record
  is a PartitionChangeRecord), :func:`snapshot` - its newest ``.checkpoint`` (the whole fleet's image: one
  PartitionRecord per partition);
* :func:`bronze` - its log decoded into bronze ``metadata_records`` rows (the input of the fold and replay
  benchmarks), :func:`topic_groups` - those rows split by topic into groups, each with every cluster-level
  record, as independent replay inputs.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CACHE = Path(__file__).resolve().parent / ".cache"


def fleet(partitions: int, events: int, seed: int = 0) -> tuple[Path, dict]:
    """(data directory, figures) of the simulated fleet; simulated once, then reused from the cache."""
    from simulator.fleet import simulate_fleet

    out = CACHE / f"fleet-{partitions}-{events}-{seed}"
    stats_file = out / "bench-stats.json"
    if stats_file.is_file():
        return out, json.loads(stats_file.read_text())
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    stats = simulate_fleet(out, partitions, events, seed)
    stats["seconds"] = time.perf_counter() - t0
    stats_file.write_text(json.dumps(stats))
    return out, stats


def _files(data: Path, kind: str):
    from controller_core.logdir import discover

    return [lf for lf in discover(data) if lf.kind == kind]


def segments(data: Path) -> list[Path]:
    return [lf.path for lf in _files(data, "segment")]


def snapshot(data: Path) -> Path:
    return max(_files(data, "snapshot"), key=lambda lf: lf.offset).path


def bronze(data: Path, cluster: str = "bench") -> pa.Table:
    """The log segments' records as bronze rows (the decoder and row builder the ingest job runs)."""
    from controller_core.codec.bronze import records_table
    from controller_core.codec.logfile import iter_chunks

    tables = []
    for lf in _files(data, "segment"):
        for chunk in iter_chunks(str(lf.path), lf.label, first_offset=lf.first_offset):
            assert not chunk.quarantine, chunk.quarantine[:1]
            if len(chunk):
                tables.append(records_table(chunk, cluster, lf.label, lf.kind))
    return pa.concat_tables(tables)


def topic_groups(table: pa.Table, groups: int) -> list[pa.Table]:
    """``groups`` tables: the rows of every ``groups``-th topic (by order of appearance) plus every row that
    belongs to no topic id (brokers, features, configs, raft and heartbeat records), in offset order."""
    topic = table.column("topic_id").combine_chunks()
    ordinal = pc.dictionary_encode(topic).indices.to_numpy(zero_copy_only=False)
    has_topic = topic.is_valid().to_numpy(zero_copy_only=False)
    group = np.where(has_topic, np.nan_to_num(ordinal, nan=0).astype(np.int64) % groups, -1)
    return [table.filter(pa.array((group == g) | (group == -1))) for g in range(groups)]
