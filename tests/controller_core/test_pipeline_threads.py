"""A replay on two cores (controller_core/threads.py): the invariant pass on a thread of its own beside the fold
and the recompute, the layout's list columns beside its kinds and partitions, and the files decoded by threads,
give what one thread gives -- breaches, divergences, the
dated history, the recomputed changes -- on simulated logs with and without breaches and on every real log."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core import pipeline, threads
from controller_core.replay import read_log_dir
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import test_fold_pass as fold_tests  # noqa: E402  (its simulator scenario: fences, ELR, reassignments, deletion)


@pytest.fixture(autouse=True)
def every_replay_on_threads(monkeypatch):
    monkeypatch.setattr(threads, "MIN_RECORDS", 0)


def _same(records: pa.Table) -> pipeline.Replay:
    one = pipeline.run(records, threads=1)
    two = pipeline.run(records, threads=2)
    for got, want in ((two.breaches, one.breaches), (two.divergences, one.divergences), (two.history, one.history),
                      (two.explained, one.explained), (two.brokers, one.brokers), (two.topics, one.topics)):
        assert got.equals(want)
    assert (two.scalar_partitions, two.trigger_counts) == (one.scalar_partitions, one.trigger_counts)
    return two


def test_a_simulated_cluster_with_fences_elr_reassignments_and_deletion(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(fold_tests.SCENARIO)
    simulate(load(str(f)), tmp_path / "out", seed=0)
    records, _ = read_log_dir(tmp_path / "out", threads=2)
    assert records.equals(read_log_dir(tmp_path / "out", threads=1)[0])
    got = _same(records)
    assert got.history.num_rows and got.explained.num_rows


def test_records_edited_to_break_the_rules(tmp_path):
    simulate(load("fleet-large", params={"partitions": 60, "events": 6}), tmp_path, seed=7)
    records, _ = read_log_dir(tmp_path)
    change = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_CHANGE_RECORD")))
    rows = set(np.random.default_rng(4).choice(change, 60, replace=False).tolist())
    isr = records.column("isr").to_pylist()
    leader = records.column("leader").to_pylist()
    for i in rows:
        isr[i] = (isr[i] or [1])[::-1] + [9]
        leader[i] = 9
    isr_type = records.schema.field("isr").type
    records = (records.set_column(records.schema.get_field_index("isr"), "isr", pa.array(isr, isr_type))
               .set_column(records.schema.get_field_index("leader"), "leader", pa.array(leader, pa.int32())))
    got = _same(records)
    assert got.breaches.num_rows > 0  # the edited records break §4 rules
    assert not pc.all(got.explained.column("matched")).as_py()  # and the builder could not reproduce them all


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_real_logs(folder):
    out = {}
    for n in (1, 2):
        out[n], _ = pipeline.from_log_dir(REALDATA / folder, threads=n)
    assert out[2].breaches.equals(out[1].breaches) and out[2].divergences.equals(out[1].divergences)
    assert out[2].history.equals(out[1].history) and out[1].history.num_rows
