"""pipeline.run(timings=...): the CPU seconds of each step of a replay (the profile ``benchmarks/bench_replay.py``
prints), on a real log -- every step a replay of that kind takes is there, in STEPS' order, and together they are
the replay's CPU time; a second replay adds to the same dict."""
from __future__ import annotations

import time

import pytest

from controller_core import pipeline
from controller_core.replay import read_log_dir
from realdata_facts import CLUSTERS, REALDATA


@pytest.fixture(scope="module")
def records():
    # the largest real log of the set (Kafka 4.2, ELR, six snapshots): the most CPU to account for
    table, _ = read_log_dir(REALDATA / CLUSTERS["induswargods"] / "__cluster_metadata-0", [], partition_json=False)
    return table


def _timed(records, **kw) -> tuple[dict, float]:
    steps: dict = {}
    pipeline.run(records, threads=1, **kw)  # (warm: the kernels loaded, the caches of a first call filled)
    t0 = time.process_time()
    pipeline.run(records, threads=1, timings=steps, **kw)
    return steps, time.process_time() - t0


def test_a_full_replay_times_every_step_and_the_steps_are_its_time(records):
    steps, cpu = _timed(records)
    assert list(steps) == list(pipeline.STEPS)  # every step, in order
    assert all(v >= 0 for v in steps.values())
    # (the steps run back to back from the replay's start to its return: their sum is its CPU time, less the call)
    assert 0.75 * cpu <= sum(steps.values()) <= cpu + 1e-3
    assert steps["fold"] > 0 and steps["recompute"] > 0 and steps["invariants"] > 0


def test_findings_only_and_state_only_replays_time_the_steps_they_take(records):
    verify, _ = _timed(records, history=False)
    assert list(verify) == list(pipeline.STEPS)  # (the judging pass: "fold" its plan, "recompute" the pass)
    state, _ = _timed(records, recompute=False, invariants=False)
    assert "recompute" not in state and "invariants" not in state and state["fold"] > 0
    assert [s for s in pipeline.STEPS if s in state] == list(state)


def test_timings_add_up_over_replays(records):
    steps: dict = {}
    pipeline.run(records, threads=1, timings=steps)
    once = dict(steps)
    pipeline.run(records, threads=1, timings=steps)
    assert all(steps[k] >= once[k] for k in once) and sum(steps.values()) > sum(once.values())
