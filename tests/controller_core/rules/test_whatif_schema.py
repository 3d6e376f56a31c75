"""whatif's input is a documented JSON Schema (conf/whatif.schema.json, shipped with the package): every image
the program itself builds for whatif (plan's checks, on every real log and scenario) and every event kind
validates; a wrong document is exit 2 naming the first wrong place; the schema, whatif's code and the README
list the same event kinds."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from audit.image_at import whatif_spec
from controller_core.rules import whatif as W
from jobs import cli
from jobs.whatif import schema, validate
from lake import gold
from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parents[3]

EVENTS = [
    {"kind": "fence_broker", "broker": 1}, {"kind": "unfence_broker", "broker": 1},
    {"kind": "controlled_shutdown", "broker": 1}, {"kind": "unregister_broker", "broker": 1},
    {"kind": "unclean_shutdown", "broker": 1, "logDirs": ["AAAAAAAAAAAAAAAAAAAAAQ"]},
    {"kind": "register_broker", "broker": 9, "newIncarnation": True, "brokerEpoch": 99},
    {"kind": "alter_partition", "topic": "t", "partition": 0, "isr": [1, {"brokerId": 2, "brokerEpoch": 5}],
     "version": 3},
    {"kind": "elect_leaders", "electionType": "preferred", "partitions": [{"topic": "t", "partition": 0}]},
    {"kind": "reassign", "topic": "t", "partition": 0, "replicas": [1, 2, 3]},
    {"kind": "cancel_reassignment", "topic": "t", "partition": 0},
    {"kind": "create_partition", "topic": "t", "partition": 3, "replicas": [1, 2]},
    {"kind": "delete_topic", "topic": "t"},
    {"kind": "set_config", "resource": "topic", "name": "t", "configs": {"min.insync.replicas": 2}},
]


def test_the_schema_knows_every_event_kind_and_so_does_the_readme():
    kinds = set(schema()["$defs"]["event"]["properties"]["kind"]["enum"])
    assert kinds == W._KINDS
    assert {e["kind"] for e in EVENTS} | {"sequence"} == kinds
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `kraft-audit whatif"))
    assert set(re.findall(r"`([a-z_]+)`", row)) >= kinds


@pytest.mark.parametrize("event", EVENTS + [{"kind": "sequence", "events": EVENTS[:3]}], ids=lambda e: e["kind"])
def test_every_event_kind_validates(event):
    validate({"metadataVersion": "3.9-IV0", "event": event})


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_the_images_plan_checks_with_validate(name):
    tables, _, _ = gold.silver_from_log_dir(str(REALDATA / CLUSTERS[name]))
    spec = whatif_spec(tables)
    validate({**spec, "event": {"kind": "elect_leaders", "electionType": "PREFERRED"}})
    assert spec["partitions"]


@pytest.mark.parametrize("doc, where", [
    ({"event": {"kind": "reassign", "topic": "t", "partition": 0, "replicas": [1, "x"]}}, "event.replicas[1]"),
    ({"event": {"kind": "fence_broker"}}, "event"),
    ({"event": {"kind": "fence_broker", "broker": 1, "brokr": 2}}, "event"),
    ({"metadataVersion": "3.9", "event": {"kind": "fence_broker", "broker": 1}}, "metadataVersion"),
    ({"partitions": [{"topic": "t", "partition": 0}], "event": {"kind": "fence_broker", "broker": 1}},
     "partitions[0]"),
    ({"brokers": {"one": {}}, "event": {"kind": "fence_broker", "broker": 1}}, "brokers"),
    ({"event": {"kind": "fence_broker", "broker": 1}, "evnt": 1}, "the document"),
])
def test_a_wrong_document_is_exit_2_naming_the_place(monkeypatch, capsys, doc, where):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(doc)))
    assert cli.main(["whatif", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"kraft-audit whatif: -: {where}:"), err
