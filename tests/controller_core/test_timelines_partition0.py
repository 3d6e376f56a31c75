"""The timelines read of partition 0's records only those that can change its assignment (``cluster_level_recs(...,
every_p0_record=False)``, what a replay passes when it lists no rejected record): the broker and topic timelines
equal those built from every partition-0 record -- on every real log and on a simulated cluster whose partition-0
reassignment lifts a topic's effective min ISR (replication factor 1 under min.insync.replicas 2, then 2
replicas) while fences and restarts churn the ISRs.  The rows left out are partition 0's ISR and leader changes."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core import pipeline, timelines
from controller_core.image import Cluster
from controller_core.replay import read_log_dir
from controller_core.vector.explain import cluster_level_recs
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load

SCENARIO = """\
metadata_version: 3.9-IV0
start_time: 2026-01-01T00:00:00Z
heartbeat_interval_ms: 5000
session_timeout_ms: 9000
brokers: [{id: 1, rack: a}, {id: 2, rack: b}, {id: 3, rack: c}]
topics:
  - {name: thin, partitions: 2, replication_factor: 1, configs: {min.insync.replicas: 2}}
  - {name: orders, partitions: 3, replication_factor: 3, configs: {min.insync.replicas: 2}}
timeline:
  - {at: 20, event: network_partition, brokers: [2], duration_s: 40}
  - {at: 80, event: reassignment, topic: thin, partition: 0, replicas: [1, 2]}
  - {at: 120, event: controlled_shutdown, broker: 3}
  - {at: 150, event: restart, broker: 3}
  - {at: 180, event: reassignment, topic: orders, partition: 0, replicas: [3, 2, 1]}
  - {at: 220, event: preferred_election}
"""


def _both(records: pa.Table) -> tuple[list, list, tuple, tuple]:
    every, assigning = cluster_level_recs(records), cluster_level_recs(records, every_p0_record=False)
    return every, assigning, timelines.build(every, Cluster()), timelines.build(assigning, Cluster())


def _same(a: tuple, b: tuple) -> None:
    assert a[0].equals(b[0]) and a[1].equals(b[1])


def _p0_types(recs: list) -> list:
    return [r.type for r in recs if r.type.startswith("PARTITION") and r.data.get("partitionId") == 0]


def test_a_partition0_reassignment_moves_the_topic_timeline_without_the_isr_changes(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    simulate(load(str(f)), tmp_path / "out", seed=1)
    records, _ = read_log_dir(tmp_path / "out", [])
    every, assigning, full, kept = _both(records)
    _same(full, kept)
    # what the test is for: the reassignment's records are kept, the ISR churn of partition 0 is not
    changes = [r for r in assigning if r.type == "PARTITION_CHANGE_RECORD"]
    assert changes and all({"replicas", "addingReplicas", "removingReplicas"} & set(r.data) for r in changes)
    assert _p0_types(every).count("PARTITION_CHANGE_RECORD") > len(changes)
    assert [r for r in every if not r.type.startswith("PARTITION")] == \
           [r for r in assigning if not r.type.startswith("PARTITION")]
    # and the assignment moved the topic's effective min ISR: capped at 1 replica, then 2
    thin = kept[1].filter(pc.equal(kept[1].column("topic_name"), "thin"))
    assert thin.column("effective_min_isr").to_pylist()[0] == 1 and 2 in thin.column("effective_min_isr").to_pylist()
    # the replay passes the short list; a caller listing rejected records gets every one (their reasons)
    rep = pipeline.run(records, invariants=False)
    _same((rep.brokers, rep.topics), kept)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_every_real_log(cluster):
    records, _ = read_log_dir(REALDATA / CLUSTERS[cluster], [])
    every, assigning, full, kept = _both(records)
    _same(full, kept)
    assert len(assigning) <= len(every)
    assert _p0_types(assigning).count("PARTITION_RECORD") == _p0_types(every).count("PARTITION_RECORD")


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_partition_records_without_their_json_give_the_same_timelines(cluster):
    """A log directory's replay reads partition records without their JSON (``partition_json=False``): the
    timelines rebuild partition 0's records from their typed columns, filtered in the same pass as the others, and
    read the same records, in the same order, to the same broker and topic timelines."""
    lean, _ = read_log_dir(REALDATA / CLUSTERS[cluster], [], partition_json=False)
    full, _ = read_log_dir(REALDATA / CLUSTERS[cluster], [])
    for every in (True, False):
        a, b = cluster_level_recs(lean, every), cluster_level_recs(full, every)
        assert [(r.offset, r.type) for r in a] == [(r.offset, r.type) for r in b]
        assert any(r.type == "PARTITION_RECORD" for r in a)
        _same(timelines.build(a, Cluster()), timelines.build(b, Cluster()))
