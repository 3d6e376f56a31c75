"""The audit checked against facts: every built-in simulator scenario plants incidents whose findings
are listed in its ground_truth.json, and the audit must report exactly those (nothing missing, nothing
unexpected above INFO).  Then the recovery story of KIP-966 on the last-replica-standing scenario, and
the whole pipeline (simulate -> ingest -> replay -> audit) through the lake."""
from __future__ import annotations

import json

import pytest

from jobs import cli
from lake import catalog
from simulator.scenario import builtin_names

SMALL = {"fleet-large": ["--param", "partitions=300", "--param", "events=8"]}


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenarios")
    out = {}
    for name in builtin_names():
        d = root / name
        assert cli.main(["simulate", name, "-o", str(d), "--seed", "7", *SMALL.get(name, [])]) == 0
        out[name] = d
    return out


def _truth(d):
    doc = json.loads((d / "ground_truth.json").read_text())
    return {(f["severity"], f["code"], f["topic"], f["partition"])
            for i in doc["incidents"] for f in i["expectedFindings"]}


def _audit(argv, capsys):
    code = cli.main(["audit", *argv, "--json", "--all"])
    return code, json.loads(capsys.readouterr().out)


def test_every_builtin_scenario_is_exercised():
    assert set(builtin_names()) == {"last-replica-standing-elr-off", "last-replica-standing-elr-on", "az-outage",
                                    "rolling-restart", "unclean-election", "long-under-min-isr", "fleet-large",
                                    "default-cluster", "cluster-restart", "metadata-gap"}


@pytest.mark.parametrize("name", sorted(builtin_names()))
def test_audit_findings_match_the_ground_truth(scenarios, name, capsys):
    d = scenarios[name]
    code, doc = _audit(["--log-dir", str(d)], capsys)
    got = {(f["severity"], f["code"], f["topic"], f["partition"]) for f in doc["findings"]}
    want = _truth(d)
    above_info = {x for x in want if x[0] != "INFO"}
    assert {x for x in got if x[0] != "INFO"} == above_info
    assert {x for x in want if x[0] == "INFO"} <= got  # INFO findings the truth lists are found too
    assert code == (1 if any(x[0] == "ERROR" for x in above_info) else 0)
    if name == "rolling-restart":
        assert not above_info  # a rolling restart done right: nothing above INFO
    if name in ("last-replica-standing-elr-off", "unclean-election", "long-under-min-isr", "az-outage"):
        assert above_info  # the planted incident is there to be found
    if name == "long-under-min-isr":  # its diskless topic: said once, judged by no ISR rule
        assert {(s, p) for s, c, t, p in got if c == "DISKLESS_TOPIC"} == {("INFO", None)}
        assert {c for s, c, t, p in got if t == "events" and s != "INFO"} <= {"INV-UNDER-MINISR"}
        assert ("ERROR", "UNDER_MIN_ISR", "ledger", 0) in got


@pytest.mark.parametrize("name", sorted(builtin_names()))
def test_audit_incidents_match_the_ground_truth(scenarios, name, capsys):
    """The ground truth names the incident each planted event makes (its cause); the audit groups its findings
    into the same incidents: the same causes above INFO, and each planted finding in an incident of its cause."""
    d = scenarios[name]
    _, doc = _audit(["--log-dir", str(d)], capsys)
    truth = json.loads((d / "ground_truth.json").read_text())["incidents"]
    got = {i["cause"] for i in doc["incidents"] if i["severity"] != "INFO"}
    want = {t["cause"] for t in truth if t["cause"] and any(f["severity"] != "INFO" for f in t["expectedFindings"])}
    assert got == want
    assert {t["cause"] for t in truth if t["cause"]} <= {i["cause"] for i in doc["incidents"]}
    cause_of = {i["incident_id"]: i["cause"] for i in doc["incidents"]}
    # a finding key (code, partition) the truth lists under one planted event only: the audit's rows of that key
    # are in an incident of the event's cause (a key under several events cannot say which row is whose)
    events_of: dict[tuple, int] = {}
    for t in truth:
        for f in t["expectedFindings"]:
            k = (f["severity"], f["code"], f["topic"], f["partition"])
            events_of[k] = events_of.get(k, 0) + 1
    for t in truth:
        if not t["cause"]:
            continue
        for f in t["expectedFindings"]:
            if f["severity"] == "INFO" or events_of[(f["severity"], f["code"], f["topic"], f["partition"])] > 1:
                continue
            held = {cause_of.get(x["incident_id"]) for x in doc["findings"]
                    if (x["severity"], x["code"], x["topic"], x["partition"]) == (f["severity"], f["code"], f["topic"],
                                                                                   f["partition"])}
            assert t["cause"] in held, (t["kind"], f, held)
    if name in ("cluster-restart", "metadata-gap"):  # the outage is one incident holding its gap
        [outage] = [i for i in doc["incidents"] if i["cause"] in ("CLUSTER_RESTART", "METADATA_GAP")]
        assert "METADATA_GAP" in outage["codes"] and outage["duration_ms"] >= 900_000
        windows = [f for f in doc["findings"] if f["incident_id"] == outage["incident_id"] and f["partition"] is not None]
        assert not [f for f in windows if f["severity"] == "ERROR"]


def test_elr_off_story_ends_in_likely_data_loss_and_elr_on_does_not(scenarios, capsys):
    _, off = _audit(["--log-dir", str(scenarios["last-replica-standing-elr-off"])], capsys)
    _, on = _audit(["--log-dir", str(scenarios["last-replica-standing-elr-on"])], capsys)
    codes_off = {f["code"] for f in off["findings"]}
    codes_on = {f["code"] for f in on["findings"]}
    assert {"LAST_REPLICA_STANDING", "DATA_LOSS_LIKELY"} <= codes_off
    assert not {"LAST_REPLICA_STANDING", "DATA_LOSS_LIKELY", "UNCLEAN_ELECTION"} & codes_on
    [loss] = [f for f in off["findings"] if f["code"] == "DATA_LOSS_LIKELY"]
    assert loss["brokers"] == [3] and loss["severity"] == "ERROR"


def _t3(d):
    """The offset of the GetReplicaLogInfo capture the scenario makes at T3 (followers back, leaderless)."""
    [f] = sorted((d / "log-info").glob("broker-1-at-*.json"))
    return int(f.stem.rsplit("-", 1)[1])


def test_recovery_at_t3_balanced_waits_and_aggressive_picks_the_longest_log(scenarios, capsys):
    d = scenarios["last-replica-standing-elr-off"]
    at = _t3(d)
    base = ["--log-dir", str(d), "--log-info", str(d / "log-info"), "--at-offset", str(at)]
    _, bal = _audit(base, capsys)
    cands = bal["recoveryCandidates"]
    assert {c["broker"] for c in cands} == {1, 2, 3} and not any(c["recommended"] for c in cands)
    assert "waiting for broker 3" in cands[0]["note"]  # the last ISR member has not replied (it is down)
    _, agg = _audit(base + ["--strategy", "aggressive"], capsys)
    [best] = [c for c in agg["recoveryCandidates"] if c["recommended"]]
    # brokers 1 and 2 both hold the 1000 records acknowledged before T1: the first in replica order wins
    assert (best["broker"], best["log_end_offset"], best["kind"]) == (1, 1000, "unclean_longest_log")
    assert best["estimated_records_lost"] == 0


def test_audit_json_is_bounded_unless_everything_is_asked_for(scenarios, capsys):
    """--json lists the --limit most severe findings (and the candidates of as many leaderless partitions);
    the counts stay complete and say how much was left out; --all lists everything."""
    base = ["--log-dir", str(scenarios["fleet-large"])]
    code_all, full = _audit(base, capsys)
    code = cli.main(["audit", *base, "--json", "--limit", "3"])
    short = json.loads(capsys.readouterr().out)
    assert code == code_all and short["counts"] == full["counts"] and short["failed"] == full["failed"]
    assert full["findingsTotal"] == full["findingsListed"] == len(full["findings"]) > 3
    assert short["findingsTotal"] == full["findingsTotal"] and short["findingsListed"] == 3
    assert short["findings"] == full["findings"][:3]  # the most severe first, the same order
    parts = {(c["topic_id"], c["partition"]) for c in short["recoveryCandidates"]}
    assert len(parts) == min(3, full["leaderlessPartitions"])
    assert short["leaderlessPartitions"] == full["leaderlessPartitions"]
    assert cli.main(["audit", *base, "--json", "--limit", "-1"]) == 2


def test_plan_for_the_recovery_reorders_replicas_then_elects(scenarios, tmp_path, capsys):
    d = scenarios["last-replica-standing-elr-off"]
    out = tmp_path / "plan"
    assert cli.main(["plan", "--log-dir", str(d), "--log-info", str(d / "log-info"), "--at-offset", str(_t3(d)),
                     "--election-type", "longest_log_aggressive", "-o", str(out)]) == 0
    capsys.readouterr()
    reassign = json.loads((out / "reassign.json").read_text())
    assert reassign == {"version": 1, "partitions": [{"topic": "payments", "partition": 0, "replicas": [1, 3, 2],
                                                      "log_dirs": ["any", "any", "any"]}]}
    assert json.loads((out / "election-unclean.json").read_text()) == {
        "partitions": [{"topic": "payments", "partition": 0}]}
    assert json.loads((out / "designation.json").read_text()) == {
        "partitions": [{"topic": "payments", "partition": 0, "desiredLeader": 1}]}
    plan = (out / "PLAN.md").read_text()
    assert plan.index("kafka-reassign-partitions.sh") < plan.index("kafka-leader-election.sh")


def test_the_pipeline_through_the_lake(spark, scenarios, tmp_path, capsys):
    d = scenarios["last-replica-standing-elr-off"]
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "lrs", "--log-dir", str(d), "--lake", lake,
                     "--log-info", str(d / "log-info")]) == 0
    assert cli.main(["replay", "--cluster", "lrs", "--lake", lake]) == 0
    capsys.readouterr()
    code, from_lake = _audit(["--cluster", "lrs", "--lake", lake], capsys)
    code2, from_log = _audit(["--log-dir", str(d), "--log-info", str(d / "log-info")], capsys)
    assert code == code2 == 1
    # the same findings; from the lake each names its cluster (a log directory's: none)
    assert {f["cluster"] for f in from_lake["findings"]} == {"lrs"}
    assert [dict(f, cluster=None) for f in from_lake["findings"]] == from_log["findings"]
    # the replica log info came from the bronze table: same candidates at T3 as from the files
    at = str(_t3(d))
    _, lake_t3 = _audit(["--cluster", "lrs", "--lake", lake, "--at-offset", at, "--strategy", "aggressive"], capsys)
    _, log_t3 = _audit(["--log-dir", str(d), "--log-info", str(d / "log-info"), "--at-offset", at,
                        "--strategy", "aggressive"], capsys)
    assert lake_t3["recoveryCandidates"] == log_t3["recoveryCandidates"]
    assert any(c["recommended"] for c in lake_t3["recoveryCandidates"])
    assert lake_t3["atTime"] == log_t3["atTime"]


def _first_batches(path, fraction: float) -> bytes:
    """The batches of a segment that start before ``fraction`` of it: the log as it was earlier."""
    from controller_core.codec.batch import iter_batches_scalar

    buf = path.read_bytes()
    cut = 0
    for h, _ in iter_batches_scalar(buf):
        if h.position > len(buf) * fraction:
            break
        cut = h.position + h.size
    return buf[:cut]


def test_a_scheduled_audit_pages_only_on_news(spark, scenarios, tmp_path, capsys):
    """audit, the log grows with a new incident, audit --fail-on-new: exit 1 listing only what is new; the same
    audit again: nothing new, exit 0.  Every run is kept; an --at-offset audit never becomes the latest."""
    import shutil

    import pyarrow.compute as pc

    from lake import catalog, gold
    from lake.delta import Lake

    src = scenarios["unclean-election"]
    data = tmp_path / "data"
    meta = data / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    shutil.copy(src / "bootstrap.checkpoint", data)
    [seg] = sorted((src / "__cluster_metadata-0").glob("*.log"))
    (meta / seg.name).write_bytes(_first_batches(seg, 0.3))
    lake = str(tmp_path / "lake")
    base = ["--cluster", "ue", "--lake", lake]

    def refresh():
        assert cli.main(["ingest", "--cluster", "ue", "--log-dir", str(data), "--lake", lake]) == 0
        assert cli.main(["replay", *base]) == 0
        capsys.readouterr()

    def audit(*extra):
        code = cli.main(["audit", *base, "--json", "--all", "--fail-on", "INFO", *extra])
        return code, json.loads(capsys.readouterr().out)

    refresh()
    _, first = audit()
    assert first["previousRunId"] is None and first["newFindingsTotal"] == first["findingsTotal"]
    _, past = audit("--at-offset", "10")  # a past point: recorded, never the one news are measured against
    shutil.copy(seg, meta / seg.name)  # the log grew
    refresh()
    code, second = audit("--fail-on-new")
    old = {(f["code"], f["topic_id"], f["partition"], f["first_offset"]) for f in first["findings"]}
    new = [f for f in second["findings"] if (f["code"], f["topic_id"], f["partition"], f["first_offset"]) not in old]
    assert new and code == 1
    assert second["previousRunId"] == first["runId"] != past["runId"]
    assert second["newFindingsTotal"] == len(new)
    assert sorted((f["code"], f["first_offset"]) for f in second["newFindings"]) == sorted(
        (f["code"], f["first_offset"]) for f in new)
    # the news is one incident: the brokers going down and the unclean elections it explains
    before = {i["incident_id"] for i in first["incidents"]}
    [incident] = [i for i in second["incidents"] if i["incident_id"] not in before]
    assert [i["incident_id"] for i in second["newIncidents"]] == [incident["incident_id"]]
    assert second["newIncidentsTotal"] == 1 and incident["severity"] == "ERROR"
    assert {f["incident_id"] for f in new if f["code"] == "UNCLEAN_ELECTION"} == {incident["incident_id"]}
    code, third = audit("--fail-on-new")
    assert code == 0 and third["newFindingsTotal"] == 0 and third["runId"] == second["runId"]
    assert third["newIncidentsTotal"] == 0
    kept = Lake(lake, None, backend="delta-rs").read_arrow(catalog.INCIDENTS.name)
    assert incident["incident_id"] in kept.filter(pc.equal(kept.column("run_id"), second["runId"])).column(
        "incident_id").to_pylist()
    runs = Lake(lake, None, backend="delta-rs").read_arrow(catalog.AUDIT_RUNS.name)
    assert sorted(runs.column("run_id").to_pylist()) == sorted({first["runId"], past["runId"], second["runId"]})
    assert gold.previous_run(Lake(lake, None, backend="delta-rs"), "ue")["run_id"] == second["runId"]
    assert cli.main(["audit", "--log-dir", str(data), "--fail-on-new"]) == 2  # nothing recorded to compare with


def test_audit_in_topic_chunks_equals_one_pass(scenarios):
    """audit.chunk_rows splits a big cluster's history by topic: the findings must not change."""
    from audit.run import audit
    from lake import gold
    from lake.config import load_config

    tables, end_offset, end_time = gold.silver_from_log_dir(str(scenarios["fleet-large"]))
    whole = audit(tables, load_config(overrides={"audit": {"chunk_rows": 0}}), end_offset, end_time).violations
    rows = tables[catalog.PARTITION_STATE_HISTORY.name].num_rows
    chunked = audit(tables, load_config(overrides={"audit": {"chunk_rows": rows // 7}}), end_offset,
                    end_time).violations
    assert chunked.num_rows == whole.num_rows > 100
    assert chunked.to_pylist() == whole.to_pylist()
