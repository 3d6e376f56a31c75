"""One engine: ``verify``, ``describe``, ``audit --log-dir`` and the Spark replay give the same partition
histories, divergences and invariant breaches, on every real log and on simulated clusters, because they
all replay through :mod:`controller_core.pipeline`.  The Spark side runs with several buckets, so each
executor call sees only part of the partitions (partition 0 of every topic travels as context)."""
from __future__ import annotations

import io
import json

import pytest

from audit.local import silver_tables
from jobs import cli, verify
from jobs.ingest import ingest
from jobs.replay import replay
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load
from lake import catalog

SPLIT = 64 << 20


def _sources(tmp_path_factory) -> dict[str, str]:
    out = {name: str(REALDATA / path) for name, path in CLUSTERS.items()}
    for scenario, params in (("az-outage", {}), ("fleet-large", {"partitions": 400, "events": 4})):
        d = tmp_path_factory.mktemp(scenario)
        simulate(load(scenario, params=params), d, seed=3)
        out[scenario] = str(d)
    return out


@pytest.fixture(scope="module")
def lake_and_logs(spark, real_bronze, tmp_path_factory):
    """conftest's lake of every real cluster's bronze with the simulated clusters ingested beside them,
    each cluster replayed in three buckets."""
    logs = _sources(tmp_path_factory)
    lake, _ = real_bronze
    for name, path in logs.items():
        if name not in CLUSTERS:
            ingest(spark, lake, name, path, SPLIT)
        replay(spark, lake, name, buckets=3)
    return lake, logs


def _rows(table, drop=("cluster",)) -> list[dict]:
    rows = [{k: v for k, v in r.items() if k not in drop} for r in table.to_pylist()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _lake(lake, table, cluster, drop=("cluster",)):
    return _rows(lake.read_arrow(table, filters=[("cluster", "=", cluster)]), drop)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS) + ["az-outage", "fleet-large"])
def test_spark_replay_equals_the_log_directory_replay(lake_and_logs, cluster):
    lake, logs = lake_and_logs
    local = silver_tables(logs[cluster])
    hist = _lake(lake, catalog.PARTITION_STATE_HISTORY.name, cluster)
    assert hist and hist == _rows(local[catalog.PARTITION_STATE_HISTORY.name])
    assert _lake(lake, catalog.INVARIANT_BREACHES.name, cluster) == _rows(local[catalog.INVARIANT_BREACHES.name])
    for name in (catalog.BROKER_STATE_HISTORY.name, catalog.TOPIC_CONFIG_HISTORY.name):
        assert _lake(lake, name, cluster) == _rows(local[name])


@pytest.mark.parametrize("cluster", sorted(CLUSTERS) + ["az-outage", "fleet-large"])
def test_verify_reports_what_the_spark_replay_wrote(lake_and_logs, cluster):
    lake, logs = lake_and_logs
    out = io.StringIO()
    verify.run(logs[cluster], as_json=True, out=out)
    got = json.loads(out.getvalue())
    breaches = [(b["offset"], b["rule"], b["severity"], b["topic"], b["partition"], b["message"])
                for b in got["invariantBreaches"]]
    assert sorted(breaches, key=repr) == sorted(
        ((r["offset"], r["rule"], r["severity"], r["topic"], r["partition"], r["message"])
         for r in _lake(lake, catalog.INVARIANT_BREACHES.name, cluster)), key=repr)
    divergences = [(d["offset"], d["field"], d["trigger"]) for d in got["divergences"]]
    assert sorted(divergences) == sorted((r["offset"], r["field"], r["trigger"])
                                         for r in _lake(lake, catalog.DIVERGENCES.name, cluster))


@pytest.mark.parametrize("cluster", sorted(CLUSTERS) + ["az-outage"])
def test_describe_at_the_end_equals_the_latest_spark_state(lake_and_logs, cluster, capsys):
    lake, logs = lake_and_logs
    assert cli.main(["describe", "--log-dir", logs[cluster], "--json"]) == 0
    want = {(p["topicId"], p["partition"]): (p["replicas"], p["isr"], p["eligibleLeaderReplicas"], p["lastKnownElr"],
                                             p["leader"], p["leaderEpoch"], p["partitionEpoch"])
            for p in json.loads(capsys.readouterr().out)}
    got = {(r["topic_id"], r["partition_id"]): (r["replicas"], r["isr"], r["eligible_leader_replicas"] or [],
                                                r["last_known_elr"] or [], r["leader"], r["leader_epoch"],
                                                r["partition_epoch"])
           for r in _lake(lake, catalog.PARTITION_STATE.name, cluster)}
    assert want and got == want
