"""kraft-audit timeline: a partition's and a broker's history, one line per change, on a simulated cluster:
the rows are exactly the partition's records (as decode prints them) folded in order, each with its trigger."""
from __future__ import annotations

import json

import pytest

from jobs import cli


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    d = tmp_path_factory.mktemp("timeline") / "log"
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(d), "--seed", "7"]) == 0
    return d


def _decoded(d, capsys) -> list[dict]:
    capsys.readouterr()
    assert cli.main(["decode", str(d)]) == 0
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def _timeline(capsys, *argv) -> list[dict]:
    capsys.readouterr()
    assert cli.main(["timeline", *argv, "--json"]) == 0
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_a_partitions_timeline_is_its_records_folded(log, capsys):
    recs = [r for r in _decoded(log, capsys) if r["file"].endswith(".log")]
    tid = next(r["data"]["topicId"] for r in recs if r["type"] == "TOPIC_RECORD" and r["data"]["name"] == "payments")
    want, state = [], {}
    for r in recs:
        if r["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD") and r["data"]["topicId"] == tid and \
                r["data"]["partitionId"] == 0:
            state.update(r["data"])
            want.append((r["offset"], state["leader"], state["isr"], state.get("leaderEpoch")))
    rows = _timeline(capsys, "--log-dir", str(log), "--topic", "payments", "--partition", "0")
    got = [(r["offset"], r["leader"], r["isr"]) for r in rows]
    assert got == [w[:3] for w in want]
    # the triggers name what made the controller write each change: the fences of the KIP-966 story, broker 3's
    # return, the followers' AlterPartition
    broker_events = {r["offset"]: r for r in recs if r["type"] == "BROKER_REGISTRATION_CHANGE_RECORD"}
    for r in rows[1:]:
        trig = r["trigger"]
        if trig.startswith("fence("):
            b = int(trig[6:-1])
            assert any(e["data"]["brokerId"] == b and e["data"].get("fenced") == 1 for e in broker_events.values())
    assert [r["trigger"] for r in rows][:4] == [None, "fence(1)", "fence(2)", "fence(3)"]
    # a window in time: only the changes inside it
    t1, t2 = rows[1]["valid_from_timestamp"], rows[3]["valid_from_timestamp"]
    inside = _timeline(capsys, "--log-dir", str(log), "--topic", "payments", "--from", t1, "--to", t2)
    assert [r["offset"] for r in inside] == [r["offset"] for r in rows[1:4]]
    capsys.readouterr()
    assert cli.main(["timeline", "--log-dir", str(log), "--topic", "payments", "--partition", "0"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("payments-0 (topic id") and len(text) == 2 + len(rows)
    assert "fence(3)" in text[5] and text[5].split()[3] == "-1"  # offline: no leader


def test_a_brokers_timeline_and_unknown_names(log, capsys):
    regs = [r for r in _decoded(log, capsys) if r["file"].endswith(".log") and r["type"] in (
        "REGISTER_BROKER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD") and r["data"]["brokerId"] == 3]
    rows = _timeline(capsys, "--log-dir", str(log), "--broker", "3")
    assert [r["offset"] for r in rows] == [r["offset"] for r in regs]
    assert [r["fenced"] for r in rows] == [True, False, True, True, False]  # up, crash, re-registered, back
    assert rows[3]["incarnation_id"] != rows[0]["incarnation_id"]  # the unclean restart is a new incarnation
    for argv, flag in ((["--topic", "nope"], "--topic"), (["--topic", "payments", "--partition", "9"], "--partition"),
                       (["--broker", "42"], "--broker")):
        capsys.readouterr()
        assert cli.main(["timeline", "--log-dir", str(log), *argv]) == 2
        assert flag in capsys.readouterr().err


def test_a_topic_is_also_named_by_its_id(log, capsys):
    """Findings name a topic by its id when its TopicRecord was not read; timeline takes the id as it takes the name."""
    recs = _decoded(log, capsys)
    tid = next(r["data"]["topicId"] for r in recs if r["type"] == "TOPIC_RECORD" and r["data"]["name"] == "payments")
    by_name = _timeline(capsys, "--log-dir", str(log), "--topic", "payments")
    by_id = _timeline(capsys, "--log-dir", str(log), "--topic", tid)
    assert by_id == by_name and len(by_name) > 1
    assert {r["topic_id"] for r in by_id} == {tid}
