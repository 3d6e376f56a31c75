"""`kraft-audit replay`: bronze -> silver on real logs, compared with the log-directory replay."""
from __future__ import annotations

import io
import json

import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from jobs import cli
from jobs.replay import SILVER, replay
from lake import catalog
from realdata_facts import CLUSTERS, REALDATA


def _json_rows(table):
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in table.to_pylist())


def _rows(lake, table, cluster):
    return lake.read(table).where(F.col("cluster") == cluster).collect()


def test_elr_partition_history_with_triggers_and_times(silver):
    lake, _ = silver
    hist = sorted(_rows(lake, catalog.PARTITION_STATE_HISTORY.name, "induswargods"), key=lambda r: r.offset)
    last = [(r.offset, r.isr, r.leader, r.leader_epoch, r.partition_epoch, sorted(r.eligible_leader_replicas),
             r.last_known_elr, r.leader_recovery_state, r.valid_to_offset, r.trigger) for r in hist[-4:]]
    assert last == [
        (3517, [1], 1, 0, 0, [], [], 0, 3594, None),
        (3594, [], -1, 1, 1, [1], [1], 0, 3599, "fence(1)"),
        (3599, [], -1, 1, 2, [], [1], 0, 3602, "unclean_shutdown(1)"),
        (3602, [1], 1, 2, 3, [], [], 1, None, "unfence(1)"),
    ]
    assert all(r.valid_from_timestamp is not None for r in hist[-4:])
    assert hist[-2].valid_to_timestamp == hist[-1].valid_from_timestamp


def test_partition_state_equals_describe_at_the_end_of_the_log(silver, capsys):
    lake, _ = silver
    for cluster in ("induswargods", "vasifvortex"):
        assert cli.main(["describe", "--log-dir", str(REALDATA / CLUSTERS[cluster]), "--json"]) == 0
        want = {(p["topicId"], p["partition"]): (p["replicas"], p["isr"], p["leader"], p["leaderEpoch"],
                                                 p["partitionEpoch"]) for p in json.loads(capsys.readouterr().out)}
        got = {(r.topic_id, r.partition_id): (r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch)
               for r in _rows(lake, catalog.PARTITION_STATE.name, cluster)}
        assert got == want


def test_partition_state_is_the_historys_latest_rows_whole(silver):
    """A full replay's core tasks write partition_state themselves (each bucket's latest states): every
    column equals what Spark chooses from the committed history (transforms.silver.latest_state)."""
    from transforms.silver import latest_state

    lake, _ = silver
    live = {}
    for cluster in ("induswargods", "vasifvortex"):
        want = lake.read(catalog.PARTITION_STATE_HISTORY.name).where(F.col("cluster") == cluster) \
            .transform(latest_state).collect()
        got = _rows(lake, catalog.PARTITION_STATE.name, cluster)
        assert not any(r.deleted or r.valid_to_offset is not None for r in got)
        assert sorted(map(tuple, got)) == sorted(map(tuple, want))
        live[cluster] = len(got)
    assert live["induswargods"] == 1 and live["vasifvortex"] > 10  # its deleted topics' partitions are not


def test_findings_equal_verify_on_the_log_directory(silver):
    lake, counts = silver
    for cluster in ("induswargods", "vasifvortex"):
        out = io.StringIO()
        from jobs import verify

        verify.run(str(REALDATA / CLUSTERS[cluster]), as_json=True, out=out)
        want = json.loads(out.getvalue())
        got = {(r.offset, r.rule, r.severity) for r in _rows(lake, catalog.INVARIANT_BREACHES.name, cluster)}
        assert got == {(b["offset"], b["rule"], b["severity"]) for b in want["invariantBreaches"]}
        assert _rows(lake, catalog.DIVERGENCES.name, cluster) == [] == want["divergences"]
    assert counts["induswargods"][catalog.INVARIANT_BREACHES.name] == 4  # + unclean election, its config


def test_broker_and_topic_timelines(silver):
    lake, _ = silver
    b = sorted(_rows(lake, catalog.BROKER_STATE_HISTORY.name, "vasifvortex"), key=lambda r: r.offset)
    fences = [(r.broker_id, r.offset, r.fenced) for r in b if r.event == "FENCE_BROKER_RECORD"]
    assert fences and all(f for _, _, f in fences)
    t = _rows(lake, catalog.TOPIC_CONFIG_HISTORY.name, "induswargods")
    assert sorted((r.offset, r.deleted) for r in t) == [(1169, False), (1504, True), (2837, False), (2874, True),
                                                       (3516, False)]


def test_replay_again_replaces_the_clusters_rows(spark, silver):
    lake, counts = silver
    before = {t.name: lake.read(t.name).count() for t in (catalog.PARTITION_STATE_HISTORY, catalog.BROKER_STATE_HISTORY)}
    breaches = sorted((r.offset, r.rule, r.topic, r.partition)
                      for r in _rows(lake, catalog.INVARIANT_BREACHES.name, "vasifvortex"))
    assert replay(spark, lake, "vasifvortex", buckets=5)["mode"] == "up-to-date"  # nothing new: no write
    again = replay(spark, lake, "vasifvortex", buckets=5, full=True)  # a different bucketing, the same rows
    assert again["mode"] == "full"
    assert {t: lake.read(t).count() for t in before} == before
    assert again[catalog.PARTITION_STATE_HISTORY.name] == counts["vasifvortex"][catalog.PARTITION_STATE_HISTORY.name]
    # John_Snow's min.insync.replicas=3 is capped by partition 0's single replica in every bucket, also
    # in buckets that do not own partition 0 (they get its records as context): no false INV-UNDER-MINISR
    assert sorted((r.offset, r.rule, r.topic, r.partition)
                  for r in _rows(lake, catalog.INVARIANT_BREACHES.name, "vasifvortex")) == breaches == []


@pytest.mark.parametrize("at", [[], ["--at-offset", "1500"], ["--at-offset", "3594"], ["--at-offset", "3600"]])
def test_describe_from_the_lake_equals_describe_from_the_log(silver, capsys, at):
    lake, _ = silver
    assert cli.main(["describe", "--lake", str(lake.root), "--cluster", "induswargods", "--json", *at]) == 0
    from_lake = json.loads(capsys.readouterr().out)
    assert cli.main(["describe", "--log-dir", str(REALDATA / CLUSTERS["induswargods"]), "--json", *at]) == 0
    assert from_lake == json.loads(capsys.readouterr().out)


def test_audit_from_the_lake_equals_the_audit_of_the_log_directory(silver, capsys):
    lake, _ = silver
    for cluster in ("induswargods", "vasifvortex"):
        code = cli.main(["audit", "--cluster", cluster, "--lake", str(lake.root), "--json", "--all"])
        from_lake = json.loads(capsys.readouterr().out)
        code2 = cli.main(["audit", "--log-dir", str(REALDATA / CLUSTERS[cluster]), "--json", "--all"])
        from_log = json.loads(capsys.readouterr().out)
        assert code == code2
        assert from_lake["counts"] == from_log["counts"] and from_lake["counts"]
        # the same findings; from the lake each names its cluster, as its gold row does (a log directory: none)
        assert {f["cluster"] for f in from_lake["findings"] + from_lake["incidents"]} == {cluster}
        assert {f["cluster"] for f in from_log["findings"] + from_log["incidents"]} == {None}
        assert [dict(f, cluster=None) for f in from_lake["findings"]] == from_log["findings"]
        # the gold table holds exactly the findings, under the run id the audit printed
        gold = [r for r in _rows(lake, catalog.VIOLATIONS.name, cluster) if r.run_id == from_lake["runId"]]
        assert sorted((r.code, r.first_offset, r.partition) for r in gold) == sorted(
            (f["code"], f["first_offset"], f["partition"]) for f in from_log["findings"])
    # re-running the same audit replaces its run: no row and no run more
    n = len(_rows(lake, catalog.VIOLATIONS.name, "induswargods"))
    runs = len(_rows(lake, catalog.AUDIT_RUNS.name, "induswargods"))
    cli.main(["audit", "--cluster", "induswargods", "--lake", str(lake.root)])
    capsys.readouterr()
    assert len(_rows(lake, catalog.VIOLATIONS.name, "induswargods")) == n
    assert len(_rows(lake, catalog.AUDIT_RUNS.name, "induswargods")) == runs


def test_quality_checks_pass_on_real_replays_and_catch_a_broken_table(silver, capsys, tmp_path):
    from jobs import quality

    lake, _ = silver
    assert cli.main(["quality", "--cluster", "vasifvortex", "--lake", str(lake.root)]) == 0
    assert "0 failed" in capsys.readouterr().out
    rows = lake.read_arrow(catalog.DATA_QUALITY.name, filters=[("cluster", "=", "vasifvortex")])
    assert rows.num_rows == len(quality.checks()) and all(rows.column("success").to_pylist())
    # the same checks on tables with planted faults: a duplicated history row, a negative epoch, a
    # valid-to before its valid-from, a divergence
    tables = quality.load_tables(lake, "vasifvortex")
    # integer columns reach GX as int64, its NumPy path (it compared narrower ints one Python call per value)
    ints = [str(t) for df in tables.values() for t in df.dtypes if t.kind in "iu"]
    assert ints and set(ints) == {"int64"}, ints
    h = tables[catalog.PARTITION_STATE_HISTORY.name]
    bad = h.iloc[[0, 0, 1]].copy()
    bad.iloc[2, bad.columns.get_loc("leader_epoch")] = -5
    bad.iloc[1, bad.columns.get_loc("valid_to_offset")] = int(bad.iloc[1]["offset"]) - 1
    tables[catalog.PARTITION_STATE_HISTORY.name] = bad
    tables[catalog.DIVERGENCES.name] = tables[catalog.DIVERGENCES.name].reindex(range(1))
    got = quality.validate(tables, "x").to_pylist()
    failed = {(r["table"], r["expectation"], r["kwargs"]) for r in got if not r["success"]}
    assert (catalog.PARTITION_STATE_HISTORY.name, "ExpectCompoundColumnsToBeUnique",
            '{"column_list": ["topic_id", "partition_id", "offset"]}') in failed
    assert any(t == catalog.PARTITION_STATE_HISTORY.name and '"leader_epoch"' in k for t, _, k in failed)
    assert any(t == catalog.PARTITION_STATE_HISTORY.name and '"valid_to_offset"' in k for t, _, k in failed)
    assert (catalog.DIVERGENCES.name, "ExpectTableRowCountToEqual", '{"value": 0}') in failed
    assert len(failed) == 4


@pytest.mark.parametrize("cluster,at", [("vasifvortex", []), ("induswargods", []), ("induswargods", ["--at-offset", "1503"]),
                                        ("induswargods", ["--at-offset", "3594"])])
def test_describe_text_from_the_lake_equals_the_log_configs_and_directories_included(silver, capsys, cluster, at):
    # the Configs line (the topics' ConfigRecords) and, in --json, MIGRATING directories below MV 3.7 (§1.2-4, B10)
    lake, _ = silver
    outs = {}
    for src in (["--lake", str(lake.root), "--cluster", cluster], ["--log-dir", str(REALDATA / CLUSTERS[cluster])]):
        for fmt in ([], ["--json"]):
            assert cli.main(["describe", *src, *fmt, *at]) == 0
            outs[src[0], bool(fmt)] = capsys.readouterr().out
    assert outs["--lake", False] == outs["--log-dir", False]
    assert outs["--lake", True] == outs["--log-dir", True]
    if cluster == "vasifvortex":  # its topics carry overrides beyond min.insync.replicas
        assert ("Configs: cleanup.policy=delete,min.insync.replicas=3,retention.ms=604800000"
                in outs["--lake", False])
        rows = json.loads(outs["--lake", True])
        assert rows and all(r["directories"] == ["AAAAAAAAAAAAAAAAAAAAAA"] * len(r["replicas"]) for r in rows)


@pytest.mark.parametrize("cluster", ["induswargods", "vasifvortex"])
def test_plan_and_log_end_from_the_files_equal_the_spark_reads(silver, cluster):
    """A replay on a lake this machine sees reads its plan (the files' labels) and the last segment record from
    bronze's data files; the same as the Spark reads that a remote lake takes."""
    import datetime as dt

    from jobs.replay import _log_end, plan_from_files, replay_plan

    lake, _ = silver
    version = lake.version(catalog.METADATA_RECORDS.name)
    records = lake.read(catalog.METADATA_RECORDS.name, version=version).where(F.col("cluster") == cluster)
    want, want_end, want_ts = _log_end(records, replay_plan(records))
    plan, end, ts = plan_from_files(lake.data_files(catalog.METADATA_RECORDS.name, version, {"cluster": cluster}))
    assert [f.label for f in plan.files] == [f.label for f in want.files] and plan.files
    assert (plan.snapshot and plan.snapshot.label) == (want.snapshot and want.snapshot.label)
    assert plan.start_offset == want.start_offset
    assert end == want_end > 0
    assert ts == want_ts.replace(tzinfo=dt.timezone.utc)  # Spark's naive datetime is UTC (session time zone)


def test_the_plan_from_files_without_statistics_is_read_from_the_columns(silver, tmp_path):
    """The plan and the last segment record come from the row groups' statistics where the files keep them, from
    the columns where they do not (another writer's files): the same either way."""
    import pyarrow.parquet as pq

    from jobs.replay import plan_from_files
    from lake import files as LF

    lake, _ = silver
    version = lake.version(catalog.METADATA_RECORDS.name)
    files = lake.data_files(catalog.METADATA_RECORDS.name, version, {"cluster": "induswargods"})
    assert LF.row_group_bounds(files, ["source_file", "source_kind", "offset"])  # this lake's files tell
    bare = []
    for i, path in enumerate(files):
        bare.append(str(tmp_path / f"{i}.parquet"))
        pq.write_table(pq.read_table(path), bare[-1], write_statistics=False)
    assert LF.row_group_bounds(bare, ["source_file", "source_kind", "offset"]) is None
    (plan, end, ts), (bare_plan, bare_end, bare_ts) = plan_from_files(files), plan_from_files(bare)
    assert [f.label for f in bare_plan.files] == [f.label for f in plan.files] and plan.files
    assert (bare_plan.start_offset, bare_end, bare_ts) == (plan.start_offset, end, ts) and end > 0


def test_a_replay_whose_spark_writes_go_through_the_driver_equals_the_tasks_written_one(spark, silver, tmp_path):
    """``delta.spark_writes: driver`` replays through Spark frames (bronze read by Spark, the timelines and the
    quorum written from Spark frames); the default lets the core tasks read bronze and write silver's files and
    the driver commit the timelines itself.  Same tables: rows, column names and types."""
    from jobs.ingest import ingest
    from lake.delta import Lake

    lake, _ = silver
    other = Lake(tmp_path / "lake", spark, backend="delta-rs", spark_writes="driver")
    assert not other.tasks_write_files() and lake.tasks_write_files()
    ingest(spark, other, "vasifvortex", str(REALDATA / CLUSTERS["vasifvortex"]), 64 << 20)
    replay(spark, other, "vasifvortex", buckets=3)
    for name in SILVER:
        got, want = other.read_arrow(name), lake.read_arrow(name)
        want = want.filter(pc.equal(want.column("cluster"), "vasifvortex"))
        # names and types (a Spark frame's cluster literal is declared not null, the tasks' column nullable)
        assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in want.schema], name
        assert _json_rows(got) == _json_rows(want), name
    assert other.read_arrow(catalog.QUORUM_HISTORY.name).num_rows > 0


def test_a_full_replays_many_findings_are_written_by_spark_the_same(spark, silver, monkeypatch):
    """A full replay commits its few findings from the driver; past FEW_FINDINGS Spark's tasks write them: the
    same rows, and the counts the run checks its commits by agree."""
    from jobs import replay as R

    lake, counts = silver
    before = {t: _json_rows(lake.read_arrow(t).filter(pc.equal(lake.read_arrow(t).column("cluster"), "induswargods")))
              for t in (catalog.INVARIANT_BREACHES.name, catalog.DIVERGENCES.name)}
    assert len(before[catalog.INVARIANT_BREACHES.name]) == 4
    monkeypatch.setattr(R, "FEW_FINDINGS", 0)
    again = replay(spark, lake, "induswargods", buckets=3, full=True)
    assert again[catalog.INVARIANT_BREACHES.name] == 4 and again[f"{catalog.INVARIANT_BREACHES.name}_error"] \
        == counts["induswargods"][f"{catalog.INVARIANT_BREACHES.name}_error"]
    for t, rows in before.items():
        table = lake.read_arrow(t)
        assert _json_rows(table.filter(pc.equal(table.column("cluster"), "induswargods"))) == rows, t


def test_a_replay_that_tallies_no_finding_clears_what_an_earlier_one_left(spark, silver, monkeypatch):
    """The core's tasks tally their findings; a full replay whose tallies are all 0 runs no job to look for them and
    still replaces the cluster's rows: a breach an earlier replay committed is gone, other clusters' stay."""
    from jobs import replay as R

    lake, _ = silver
    t = catalog.INVARIANT_BREACHES.name
    table = lake.read_arrow(t)
    theirs = table.filter(pc.equal(table.column("cluster"), "induswargods"))
    stale = theirs.set_column(theirs.schema.get_field_index("cluster"), theirs.schema.field("cluster"),
                              pc.if_else(pc.is_valid(theirs.column("cluster")), "vasifvortex", None))
    lake.append_arrow(t, stale, partition_by=catalog.INVARIANT_BREACHES.partition_by)
    assert len(_rows(lake, t, "vasifvortex")) == theirs.num_rows == 4
    calls = []
    real = R._write_findings
    monkeypatch.setattr(R, "_write_findings", lambda *a, **k: calls.append(k) or real(*a, **k))
    again = replay(spark, lake, "vasifvortex", buckets=3, full=True)
    assert calls == [{"none_found": True}]
    assert again[t] == 0 and _rows(lake, t, "vasifvortex") == []
    assert len(_rows(lake, t, "induswargods")) == 4


def test_a_bronze_appended_from_arrow_replays_the_same(spark, silver, tmp_path):
    """Bronze written from Arrow (the decoder's rows appended through delta-rs, as bench_spark_replay.py and any
    Arrow writer do) declares its columns not null, where Spark's writes declare them nullable.  A full replay
    joins the rows it reads from the files with rows it makes (the quorum's records, every bucket's partition
    records with the cluster-level rows): same silver tables as the ingested lake's (it failed with "Schema at
    index 1 was different" before the reads made every column nullable)."""
    from controller_core.codec.bronze import SCHEMA
    from lake.delta import Lake

    lake, _ = silver
    bronze = lake.read_arrow(catalog.METADATA_RECORDS.name)
    bronze = bronze.filter(pc.equal(bronze.column("cluster"), "vasifvortex")).select(SCHEMA.names).cast(SCHEMA)
    assert pc.sum(pc.equal(bronze.column("record_type"), "LEADER_CHANGE")).as_py() > 0  # the quorum's reads
    assert not bronze.schema.field("offset").nullable
    other = Lake(tmp_path / "lake", spark, backend="delta-rs")
    other.append_arrow(catalog.METADATA_RECORDS.name, bronze, partition_by=catalog.METADATA_RECORDS.partition_by)
    replay(spark, other, "vasifvortex", buckets=3)
    for name in SILVER:
        got, want = other.read_arrow(name), lake.read_arrow(name)
        assert _json_rows(got) == _json_rows(want.filter(pc.equal(want.column("cluster"), "vasifvortex"))), name
    assert other.read_arrow(catalog.QUORUM_HISTORY.name).num_rows > 0
