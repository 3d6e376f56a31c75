"""Issue 14 item 3 ("Newer Kafka") through the commands: ``decode``, ``verify`` and ``describe --brokers`` on the
acceptance log of tests/log_builder.newer_log -- every record printed as README "Newer Kafka" says, one warning
per type and version on stderr, nothing quarantined, exit codes unchanged."""
from __future__ import annotations

import base64
import json

from jobs import cli
from log_builder import DIRS, EXTRA_BYTES, EXTRA_TAG, newer_log


def test_decode_prints_every_record_and_warns(tmp_path, capsys):
    d, at = newer_log(tmp_path)
    assert cli.main(["decode", "--strict", str(d)]) == 0
    io = capsys.readouterr()
    lines = {r["offset"]: r for r in map(json.loads, io.out.splitlines())}
    assert sorted(lines) == list(range(at["no_change"] + 1))
    assert lines[at["api_key_99"]]["type"] == "UNKNOWN_RECORD"
    assert lines[at["api_key_99"]]["data"] == {"apiKey": 99, "value": base64.b64encode(b"\x00vendor").decode()}
    pcr = lines[at["pcr_v3"]]
    assert (pcr["type"], pcr["version"], pcr["data"]["isr"]) == ("PARTITION_CHANGE_RECORD", 3, [1, 2])
    assert pcr["unknownTaggedFields"] == [{"tag": EXTRA_TAG, "data": base64.b64encode(EXTRA_BYTES).decode()}]
    assert "unknownTaggedFields" not in lines[at["register_v4"]]
    assert lines[at["register_v4"]]["data"]["cordonedLogDirs"] == [DIRS[1]]
    assert lines[at["unregister_controller"]]["data"] == {"controllerId": 3}
    warnings = [x for x in io.err.splitlines() if x.startswith("kraft-audit decode: warning: ")]
    assert len(warnings) == 2 and io.err.count("\n") == 2, io.err  # nothing quarantined, nothing else said
    assert "apiKey 99" in warnings[1] and f"first at offset {at['api_key_99']}" in warnings[1]
    assert "PARTITION_CHANGE_RECORD v3" in warnings[0] and f"tags {EXTRA_TAG}" in warnings[0]


def test_decode_summary_counts_the_unknown_record(tmp_path, capsys):
    d, _ = newer_log(tmp_path)
    assert cli.main(["decode", "--summary", "--strict", str(d)]) == 0
    io = capsys.readouterr()
    seg = [s for s in map(json.loads, io.out.splitlines()) if s["file"].endswith(".log")]
    assert seg[0]["errors"] == [] and seg[0]["types"]["UNKNOWN_RECORD"] == 1
    assert seg[0]["types"]["UNREGISTER_CONTROLLER_RECORD"] == 1
    assert io.err.count("warning:") == 2


def test_verify_keeps_them_and_warns(tmp_path, capsys):
    d, _ = newer_log(tmp_path)
    assert cli.main(["verify", "--log-dir", str(d), "--json"]) == 0
    io = capsys.readouterr()
    doc = json.loads(io.out)
    assert "quarantined" not in doc and doc["records"] > 0  # exit 0: no divergence either
    assert [x.split(": warning: ")[1][:20] for x in io.err.splitlines()] == \
        ["1 PARTITION_CHANGE_R", "1 record of apiKey 9"]


def test_describe_brokers_shows_cordoned_dirs_where_a_record_carries_them(tmp_path, capsys):
    d, at = newer_log(tmp_path)
    assert cli.main(["describe", "--log-dir", str(d), "--brokers", "--at-offset", str(at["register_v4"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split("\t")[0] for x in lines] == ["Broker: 1", "Broker: 2", "Broker: 3", "Broker: 4"]
    assert not any("CordonedLogDirs" in x for x in lines[:3])  # their records (v1) never said
    assert lines[3].endswith(f"LogDirs: {','.join(DIRS)}\tCordonedLogDirs: {DIRS[1]}")
    assert cli.main(["describe", "--log-dir", str(d), "--brokers", "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert docs[3]["broker"] == 4 and docs[3]["cordonedLogDirs"] == [] and docs[3]["logDirs"] == DIRS
    assert "cordonedLogDirs" not in docs[0]


def test_describe_brokers_and_quorum_together_is_refused(tmp_path, capsys):
    d, _ = newer_log(tmp_path)
    assert cli.main(["describe", "--log-dir", str(d), "--brokers", "--quorum"]) == 2
    assert "either --quorum or --brokers" in capsys.readouterr().err


def test_ingest_keeps_them_in_bronze_and_warns(spark, tmp_path):
    from jobs.ingest import ingest
    from lake import catalog
    from lake.delta import Lake

    d, at = newer_log(tmp_path)
    lake = Lake(tmp_path / "lake", spark)
    res = ingest(spark, lake, "newer", str(d), 64 << 20)
    assert res.quarantined == []
    assert len(res.newer_kafka) == 2 and "apiKey 99" in res.newer_kafka[1]
    rows = {r["offset"]: r for r in lake.read_arrow(catalog.METADATA_RECORDS.name).to_pylist()
            if r["source_kind"] == "segment"}
    assert (rows[at["api_key_99"]]["record_type"], rows[at["api_key_99"]]["record_type_id"]) == ("UNKNOWN_RECORD", 99)
    assert json.loads(rows[at["pcr_v3"]]["unknown_tagged_fields"])[0]["tag"] == EXTRA_TAG


def test_describe_cluster_brokers_shows_the_cordoned_dirs_the_replay_kept(spark, tmp_path, capsys):
    """The same broker lines from the lake (silver broker_state_history.cordoned_log_dirs) as from the log."""
    from jobs.ingest import ingest
    from jobs.replay import replay
    from lake.delta import Lake

    d, _ = newer_log(tmp_path)
    lake = Lake(tmp_path / "lake", spark)
    ingest(spark, lake, "newer", str(d), 64 << 20)
    replay(spark, lake, "newer", 2)
    assert cli.main(["describe", "--log-dir", str(d), "--brokers"]) == 0
    from_log = capsys.readouterr().out
    assert cli.main(["describe", "--cluster", "newer", "--lake", str(lake.root), "--brokers"]) == 0
    from_lake = capsys.readouterr().out
    assert f"CordonedLogDirs: {DIRS[1]}" not in from_log  # at the end broker 4 cordons none any more
    last = from_lake.splitlines()[-1]
    assert last.startswith("Broker: 4") and last.endswith("\tCordonedLogDirs: ")  # a record said: none any more
    assert from_lake == from_log
