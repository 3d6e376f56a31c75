"""`plan` proposes only what Kafka accepts: every command of every plan, replayed through the what-if
controller on the cluster image rebuilt *from the log itself* (the scalar replay of `describe`, not the
silver tables the plan was made from), is answered without an error and gives the leader the plan names.

Over every built-in simulator scenario and every real log, at 25/50/75/100 % of the log, where partitions
are leaderless and where log info was captured, for every election type."""
from __future__ import annotations

import io
import json

import pyarrow.compute as pc
import pytest

from audit import loginfo, plans
from audit.planning import plan_at
from controller_core.rules.whatif import Run
from jobs import cli
from controller_core.point import image_at as replay
from lake import gold
from simulator.scenario import builtin_names
from tests.realdata_facts import CLUSTERS, REALDATA
from lake import catalog

SMALL = {"fleet-large": ["--param", "partitions=300", "--param", "events=8"]}
LOGS = [f"scenario:{n}" for n in sorted(builtin_names())] + [f"real:{n}" for n in sorted(CLUSTERS)]


@pytest.fixture(scope="module")
def log_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("accepted")
    out = {f"real:{n}": REALDATA / rel for n, rel in CLUSTERS.items()}
    for name in builtin_names():
        d = root / name
        assert cli.main(["simulate", name, "-o", str(d), "--seed", "7", *SMALL.get(name, [])]) == 0
        out[f"scenario:{name}"] = d
    return out


def _offsets(tables, end: int, info_files) -> list[int]:
    """25/50/75/100 % of the log, the first, middle and last offsets at which a partition turned
    leaderless, the first and last at which a broker entered controlled shutdown, and the log-info
    capture offsets."""
    h = tables[catalog.PARTITION_STATE_HISTORY.name]
    first = pc.min(h.column("offset")).as_py()
    at = {first + (end - first) * q // 4 for q in (1, 2, 3, 4)}
    gone = sorted(set(pc.filter(h.column("offset"), pc.equal(h.column("leader"), -1)).to_pylist()))
    if gone:
        at |= {gone[0], gone[len(gone) // 2], gone[-1]}
    b = tables[catalog.BROKER_STATE_HISTORY.name]
    draining = pc.and_(pc.fill_null(b.column("in_controlled_shutdown"), False),
                       pc.invert(pc.fill_null(b.column("fenced"), True)))
    cs = sorted(pc.filter(b.column("offset"), draining).to_pylist())  # a broker in controlled shutdown, unfenced
    if cs:
        at |= {cs[0], cs[-1]}
    at |= {int(f.stem.rsplit("-at-", 1)[1]) for f in info_files if "-at-" in f.stem}
    return sorted(o for o in at if first <= o <= end)


def _run_commands(plan: dict, run: Run) -> dict:
    """The plan's commands in their order, as the what-if controller answers them: {partition: error}."""
    errors = {}
    files = plan["files"]
    for cmd in plan["commands"]:
        if "--reassignment-json-file" in cmd and cmd.endswith("--execute"):
            events = [{"kind": "reassign", "topic": e["topic"], "partition": e["partition"], "replicas": e["replicas"]}
                      for e in files[plans.REASSIGN_FILE]["partitions"]]
        elif "--election-type" in cmd:
            kind = cmd.split("--election-type ", 1)[1].split()[0]
            name = cmd.rsplit("--path-to-json-file ", 1)[1]
            events = [{"kind": "elect_leaders", "electionType": kind.upper(), "partitions": files[name]["partitions"]}]
        else:
            continue  # --verify changes nothing
        for ev in events:
            run.errors = {}
            run.apply(ev)
            errors.update(run.errors)
    return errors


@pytest.mark.parametrize("which", LOGS)
def test_every_election_a_plan_proposes_is_accepted_by_the_whatif_controller(log_dirs, which):
    d = log_dirs[which]
    tables, end, _ = gold.silver_from_log_dir(str(d))
    info_files = sorted((d / "log-info").glob("*.json")) if (d / "log-info").is_dir() else []
    info = gold.newest_first(loginfo.read_log_info(info_files)[0]) if info_files else None
    proposed = refused = 0
    for at in _offsets(tables, end, info_files):
        image, _ = replay(str(d), at_offset=at, err=io.StringIO())
        for et in plans.ELECTION_TYPES:
            plan = plan_at(tables, end, info, et, at_offset=at)
            run = Run(__import__("copy").deepcopy(image))
            errors = _run_commands(plan, run)
            assert errors == {}, (which, at, et, errors, json.dumps(plan["files"]))
            for p in plan["partitions"]:  # and the commands give the leader the plan names
                tid = run.c.topic_ids[p["topic"]]
                assert run.c.partitions[(tid, p["partition"])].leader == p["newLeader"], (which, at, et, p)
            proposed += sum(len(f["partitions"]) for n, f in plan["files"].items() if n.startswith("election-"))
            proposed += len(plan["files"].get(plans.REASSIGN_FILE, {}).get("partitions", []))
            refused += sum(1 for x in plan["skipped"] if x.get("error"))
    if which in ("scenario:last-replica-standing-elr-off", "real:ogs59", "real:arthurarutunyan04"):
        assert proposed > 0  # logs with leaderless windows or moved leaders: the check is not vacuous
    if which == "real:ogs59":
        assert refused > 0  # ... and refusals are listed, not silently dropped


# ------------------------------------------------------------------------------------------------
# A partition whose replicas are all in controlled shutdown

T = "AAAAAAAAAAAAAAAAAAAAAQ"


def _draining_log(root):
    """orders-0 (replicas 1,2,3; unclean election off, ELR off at 3.9-IV0) while its three brokers shut down
    in a controlled way, one after the other, none of them fenced yet: each leaves the ISR in turn; the last
    one, leader and last ISR member, keeps its ISR place (ELR off) but gives up leadership.  Offsets:
    0-5 the cluster, 6-7 broker 3, 8-9 broker 2, 10-11 broker 1."""
    from controller_core.codec.batch import encode_batch

    def register(b):
        return ("REGISTER_BROKER_RECORD", 3, {"brokerId": b, "incarnationId": f"AAAAAAAAAAAAAAAAAAAA{'BCD'[b - 1]}A",
                                              "brokerEpoch": 10 + b, "endPoints": [], "features": [], "rack": None,
                                              "fenced": False, "inControlledShutdown": False, "logDirs": []})

    def drain(b):
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 1, {"brokerId": b, "brokerEpoch": 10 + b, "inControlledShutdown": 1})

    def change(**fields):
        return ("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": T, **fields})

    batches = [
        [("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 21})],
        [register(1), register(2), register(3)],
        [("TOPIC_RECORD", 0, {"name": "orders", "topicId": T}),
         ("PARTITION_RECORD", 0, {"partitionId": 0, "topicId": T, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                                  "removingReplicas": [], "addingReplicas": [], "leader": 3, "leaderEpoch": 0,
                                  "partitionEpoch": 0})],
        [drain(3), change(isr=[1, 2], leader=2)],
        [drain(2), change(isr=[1], leader=1)],
        [drain(1), change(leader=-1)],
    ]
    raw, offset = b"", 0
    for recs in batches:
        raw += encode_batch(offset, recs, timestamp=1_700_000_000_000 + offset)
        offset += len(recs)
    meta = root / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    (meta / "00000000000000000000.log").write_bytes(raw)
    return root


def test_preferred_plan_lists_a_partition_whose_replicas_are_all_in_controlled_shutdown_as_refused(tmp_path, capsys):
    d = _draining_log(tmp_path / "draining")
    out = tmp_path / "plan"
    assert cli.main(["plan", "--log-dir", str(d), "--election-type", "preferred", "-o", str(out)]) == 0
    capsys.readouterr()
    # broker 1 is the ISR, unfenced, and not the leader: counting a broker in controlled shutdown as
    # available would propose a preferred election, which Kafka answers with PREFERRED_LEADER_NOT_AVAILABLE
    assert sorted(f.name for f in out.iterdir()) == ["PLAN.md", "plan-manifest.json"]  # no election file
    text = (out / "PLAN.md").read_text()
    refused = text.split("## Refused by Kafka (not included)", 1)[1]
    assert "- orders-0: Kafka would refuse the preferred election with PREFERRED_LEADER_NOT_AVAILABLE: " in refused
    assert "replicas 1 in controlled shutdown (ISR); 2 in controlled shutdown; 3 in controlled shutdown" in refused
    assert "kafka-leader-election.sh" not in text


def test_controlled_shutdown_brokers_count_as_unavailable_in_every_form(tmp_path):
    """The same log seen by the audit (state_at -> active_broker_ids), the silver broker history, the
    scalar image and the plan's whatif image: nobody is available after offset 11."""
    from audit.image_at import whatif_spec
    from audit.run import state_at
    from controller_core.brokers import active_broker_ids
    from controller_core.brokers import active_at
    from controller_core.rules.whatif import load_cluster

    d = _draining_log(tmp_path / "draining")
    tables, end, _ = gold.silver_from_log_dir(str(d))
    assert end == 11
    assert active_broker_ids(state_at(tables)[1]) == set()
    assert active_at(tables[catalog.BROKER_STATE_HISTORY.name]) == set()
    assert active_at(tables[catalog.BROKER_STATE_HISTORY.name], 6) == {1, 2}  # broker 3 drains first
    image, _ = replay(str(d), err=io.StringIO())
    assert {b for b in image.brokers if image.active(b)} == set()
    spec_image = load_cluster(whatif_spec(tables))
    assert {b for b in spec_image.brokers if spec_image.active(b)} == set()
