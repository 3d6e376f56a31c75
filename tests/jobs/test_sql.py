"""kraft-audit sql: SQL over the lake without Spark, on a simulated cluster ingested, replayed and audited;
each answer checked against the raw records as `kraft-audit decode` prints them or the audit's own output."""
from __future__ import annotations

import csv
import io
import json

import pytest

from jobs import cli
from lake import catalog


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("sql")
    d, lake = root / "log", str(root / "lake")
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(d), "--seed", "7"]) == 0
    assert cli.main(["ingest", "--cluster", "lrs", "--log-dir", str(d), "--lake", lake]) == 0
    assert cli.main(["replay", "--cluster", "lrs", "--lake", lake]) == 0
    return d, lake


def _sql(lake, query, capsys, fmt="json") -> list[dict]:
    capsys.readouterr()
    assert cli.main(["sql", "--lake", lake, query, "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(out)))
    return [json.loads(line) for line in out.splitlines()]


def _decoded(d, capsys) -> list[dict]:
    capsys.readouterr()
    assert cli.main(["decode", str(d)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_isr_history_of_a_partition(lake, capsys):
    d, root = lake
    recs = _decoded(d, capsys)
    tid = next(r["data"]["topicId"] for r in recs if r["type"] == "TOPIC_RECORD" and r["data"]["name"] == "payments")
    want, state = [], {}
    for r in recs:  # the partition's records folded by hand: a change writes only the fields it changes
        if r["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD") and r["file"].endswith(".log") and \
                r["data"]["topicId"] == tid and r["data"]["partitionId"] == 0:
            state.update({k: r["data"][k] for k in ("isr", "leader") if k in r["data"]})
            want.append((r["offset"], state["isr"], state["leader"]))
    rows = _sql(root, 'SELECT h."offset", h.isr, h.leader FROM partition_state_history h JOIN topic_config_history t '
                      "ON h.topic_id = t.topic_id AND t.topic_name = 'payments' WHERE h.partition_id = 0 "
                      'GROUP BY h."offset", h.isr, h.leader ORDER BY h."offset"', capsys)
    assert [(r["offset"], r["isr"], r["leader"]) for r in rows] == want
    leaders = [w[2] for w in want]  # the KIP-966 story: broker 3 leads, crashes (no leader), leads again
    assert leaders[0] == 3 and -1 in leaders and leaders[-1] == 3
    # "the ISR of payments-0 at offset 40": the last change at or before it
    [at] = _sql(root, 'SELECT h.isr, h.leader FROM partition_state_history h WHERE h.partition_id = 0 AND h."offset" '
                      '<= 40 ORDER BY h."offset" DESC LIMIT 1', capsys)
    assert (at["isr"], at["leader"]) == max((w for w in want if w[0] <= 40), key=lambda w: w[0])[1:]


def test_fences_per_broker_and_the_audit_findings(lake, capsys):
    d, root = lake
    fenced = {}
    for r in _decoded(d, capsys):
        data = r["data"] or {}
        if (r["type"] == "BROKER_REGISTRATION_CHANGE_RECORD" and data.get("fenced") == 1) or r["type"] == \
                "FENCE_BROKER_RECORD":
            b = data.get("brokerId", data.get("id"))
            fenced[b] = fenced.get(b, 0) + 1
    rows = _sql(root, "SELECT broker_id, count(*) AS fences FROM broker_state_history WHERE fenced AND event <> "
                      "'REGISTER_BROKER_RECORD' GROUP BY broker_id ORDER BY broker_id", capsys, fmt="csv")
    assert {int(r["broker_id"]): int(r["fences"]) for r in rows} == fenced and fenced
    capsys.readouterr()
    assert cli.main(["audit", "--cluster", "lrs", "--lake", root, "--json", "--all"]) == 1
    doc = json.loads(capsys.readouterr().out)
    rows = _sql(root, "SELECT code, severity, first_offset, incident_id FROM violations WHERE run_id = "
                      f"'{doc['runId']}' ORDER BY first_offset, code", capsys)
    assert sorted((r["code"], r["severity"], r["first_offset"], r["incident_id"]) for r in rows) == sorted(
        (f["code"], f["severity"], f["first_offset"], f["incident_id"]) for f in doc["findings"])
    lost = _sql(root, "SELECT v.partition, i.cause FROM violations v JOIN incidents i ON v.incident_id = i.incident_id "
                      "AND v.run_id = i.run_id WHERE v.code = 'DATA_LOSS_LIKELY'", capsys)
    assert lost == [{"partition": 0, "cause": "UNCLEAN_ELECTION"}]


def test_a_bad_query_is_one_line_naming_the_tables(lake, capsys):
    _, root = lake
    capsys.readouterr()
    assert cli.main(["sql", "--lake", root, "SELECT nope FROM violations"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and catalog.PARTITION_STATE_HISTORY.name in err[0]
    assert cli.main(["sql", "--lake", root + "-missing", "SELECT 1"]) == 2
    capsys.readouterr()
    assert cli.main(["sql", "--lake", root, "SELECT count(*) AS n FROM partition_state_history",
                     "--format", "table"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].strip() == "n" and text.rstrip().endswith("(1 row)")


def test_timeline_from_the_lake_equals_the_log_dir(lake, capsys):
    d, root = lake
    outs = []
    for src in (["--cluster", "lrs", "--lake", root], ["--log-dir", str(d)]):
        capsys.readouterr()
        assert cli.main(["timeline", *src, "--topic", "payments", "--json"]) == 0
        outs.append([{k: v for k, v in json.loads(x).items() if k != "cluster"}
                     for x in capsys.readouterr().out.splitlines()])
    assert outs[0] == outs[1] and len(outs[0]) >= 5


def test_the_quorum_from_the_lake_equals_the_log_dir(lake, capsys):
    """The replay's silver quorum_history answers describe --quorum --cluster as the log itself does."""
    d, root = lake
    docs = []
    for src in (["--cluster", "lrs", "--lake", root], ["--log-dir", str(d)]):
        capsys.readouterr()
        assert cli.main(["describe", "--quorum", "--json", *src]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    lake_doc, log_doc = docs
    for key in ("leaderId", "epoch", "leaderSince", "voters", "controllers", "elections", "stalls"):
        assert lake_doc[key] == log_doc[key], key
    assert log_doc["elections"] and "dataDirectory" not in lake_doc  # the lake has no meta.properties to check
    rows = _sql(root, f"SELECT event, count(*) AS n FROM {catalog.QUORUM_HISTORY.name} GROUP BY event", capsys)
    assert {r["event"]: r["n"] for r in rows}["LEADER_CHANGE"] == len(log_doc["elections"])


def test_the_report_shows_the_latest_quality_run(lake, tmp_path, capsys):
    """The report of a cluster carries its latest data-quality results; a log directory's says how to get them."""
    from html.parser import HTMLParser

    d, root = lake
    capsys.readouterr()
    code = cli.main(["quality", "--cluster", "lrs", "--lake", root, "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and rows
    met = sum(1 for r in rows if r["success"])
    assert cli.main(["report", "--cluster", "lrs", "--lake", root, "-o", str(tmp_path / "r.html")]) == 0
    assert cli.main(["report", "--log-dir", str(d), "-o", str(tmp_path / "d.html")]) == 0

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.ids, self.cur = {}, None

        def handle_starttag(self, tag, attrs):
            self.cur = dict(attrs).get("id") or self.cur

        def handle_data(self, data):
            if self.cur:
                self.ids[self.cur] = self.ids.get(self.cur, "") + data

    page, plain = Text(), Text()
    page.feed((tmp_path / "r.html").read_text())
    plain.feed((tmp_path / "d.html").read_text())
    assert page.ids["quality-summary"].startswith(f"{met} of {len(rows)} expectations met")
    assert "kraft-audit quality --cluster" in plain.ids["quality-none"]
