"""A simulated cluster whose log holds several segments and snapshots (one every 40 records), for the tests that
damage a copy of it -- cut before its newest snapshot, segments emptied or deleted -- and compare what a replay of
the copy starts from with the whole log's state."""
from __future__ import annotations

import io
from pathlib import Path

from controller_core import point
from simulator.engine import simulate
from simulator.scenario import load

SCENARIO = """\
metadata_version: 3.9-IV0
start_time: 2026-01-01T00:00:00Z
heartbeat_interval_ms: 5000
session_timeout_ms: 9000
segment_bytes: {segment_bytes}
snapshot_every: 40
brokers: [{{id: 1, rack: a}}, {{id: 2, rack: b}}, {{id: 3, rack: c}}, {{id: 4, rack: a}}]
topics:
  - {{name: orders, partitions: 8, replication_factor: 3, configs: {{min.insync.replicas: 2}}}}
  - {{name: logs, partitions: 4, replication_factor: 2}}
timeline:
  - {{at: 20, event: network_partition, brokers: [1, 2], duration_s: 60}}
  - {{at: 90, event: controlled_shutdown, broker: 3}}
  - {{at: 120, event: restart, broker: 3}}
  - {{at: 150, event: preferred_election}}
  - {{at: 170, event: reassignment, topic: logs, partition: 1, replicas: [3, 4]}}
  - {{at: 200, event: network_partition, brokers: [4], duration_s: 30}}
  - {{at: 260, event: preferred_election}}
"""


def snapshotted_log(d: Path, segment_bytes: int) -> Path:
    """The scenario simulated under ``d`` (seed 2), segments rolled every ``segment_bytes``: its data directory."""
    (d / "s.yaml").write_text(SCENARIO.format(segment_bytes=segment_bytes))
    simulate(load(str(d / "s.yaml")), d / "out", seed=2)
    return d / "out"


def partitions_at(log_dir: Path, at_offset=None) -> dict:
    """Each partition's (replicas, ISR, leader, leader epoch, partition epoch) in ``describe``'s replay to a point."""
    image, _ = point.image_at(log_dir, at_offset, err=io.StringIO())
    return {k: (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) for k, p in image.partitions.items()}
