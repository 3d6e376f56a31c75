"""``kraft-audit quality --cluster NAME``: Great Expectations checks on a cluster's bronze and silver
tables -- the data-quality gate a scheduler runs before trusting (or publishing) an audit.

Each table gets a suite of expectations that hold for any metadata log Kafka wrote and any replay this
tool made: keys unique, offsets and epochs in range, validity intervals well ordered, record types
known, rule ids and severities known to the code registry, no divergence, no ERROR invariant breach,
nothing quarantined.  A failed expectation is a row of the gold ``data_quality`` table with its
severity; the exit code is 1 when an ERROR-severity expectation fails.

GX runs its pandas engine on the columns each suite needs, read with delta-rs (no SparkSession), in an
ephemeral context: nothing is written outside the lake, and no network is used.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
from dataclasses import dataclass

import pyarrow as pa

from controller_core import codes
from lake import catalog
from lake.config import load_config
from lake.files import return_freed_memory
from lake.lock import GOLD, holding

PROG = "kraft-audit quality"
QUALITY = catalog.DATA_QUALITY
QUALITY_SCHEMA = QUALITY.schema


@dataclass(frozen=True)
class Check:
    table: str
    expectation: str  # the GX class name in great_expectations.expectations
    kwargs: dict
    severity: str = "ERROR"


def _known_types() -> list[str]:
    from controller_core.records import BY_TYPE_NAME

    return sorted(BY_TYPE_NAME)


def checks() -> list[Check]:
    """The expectations, table by table."""
    c = []
    b = catalog.METADATA_RECORDS.name
    # an empty bronze is no clean bill of health: nothing was ingested, or an ingest committed nothing
    c += [Check(b, "ExpectTableRowCountToBeBetween", {"min_value": 1}),
          Check(b, "ExpectColumnValuesToNotBeNull", {"column": "offset"}),
          Check(b, "ExpectColumnValuesToBeBetween", {"column": "offset", "min_value": 0}),
          Check(b, "ExpectCompoundColumnsToBeUnique", {"column_list": catalog.METADATA_RECORDS.key_in_partition}),
          Check(b, "ExpectColumnValuesToBeInSet", {"column": "record_type", "value_set": _known_types()}),
          Check(b, "ExpectColumnValuesToBeInSet", {"column": "source_kind",
                                                   "value_set": ["segment", "snapshot", "bootstrap"]}),
          Check(b, "ExpectColumnValuesToBeBetween", {"column": "record_version", "min_value": 0}),
          Check(b, "ExpectColumnValuesToNotBeNull", {"column": "timestamp"}),
          Check(b, "ExpectColumnValuesToBeBetween", {"column": "partition_id", "min_value": 0}),
          Check(b, "ExpectColumnValuesToBeBetween", {"column": "broker_id", "min_value": 0})]
    c += [Check(catalog.QUARANTINE.name, "ExpectTableRowCountToEqual", {"value": 0}, "WARN")]
    h = catalog.PARTITION_STATE_HISTORY.name
    c += [Check(h, "ExpectCompoundColumnsToBeUnique",
                {"column_list": catalog.PARTITION_STATE_HISTORY.key_in_partition}),
          Check(h, "ExpectColumnValuesToBeBetween", {"column": "leader", "min_value": -1}),
          Check(h, "ExpectColumnValuesToBeBetween", {"column": "leader_epoch", "min_value": 0}),
          Check(h, "ExpectColumnValuesToBeBetween", {"column": "partition_epoch", "min_value": 0}),
          Check(h, "ExpectColumnValuesToBeInSet", {"column": "leader_recovery_state", "value_set": [0, 1]}),
          Check(h, "ExpectColumnPairValuesAToBeGreaterThanB",
                {"column_A": "valid_to_offset", "column_B": "offset", "ignore_row_if": "either_value_is_missing"}),
          Check(h, "ExpectColumnPairValuesAToBeGreaterThanB",
                {"column_A": "valid_to_timestamp", "column_B": "valid_from_timestamp", "or_equal": True,
                 "ignore_row_if": "either_value_is_missing"}),
          Check(h, "ExpectColumnValuesToNotBeNull", {"column": "valid_from_timestamp", "mostly": 0.5}, "WARN")]
    s = catalog.PARTITION_STATE.name
    c += [Check(s, "ExpectCompoundColumnsToBeUnique", {"column_list": catalog.PARTITION_STATE.key_in_partition}),
          Check(s, "ExpectColumnValuesToBeNull", {"column": "valid_to_offset"})]
    br, tc = catalog.BROKER_STATE_HISTORY.name, catalog.TOPIC_CONFIG_HISTORY.name
    c += [Check(br, "ExpectColumnValuesToBeBetween", {"column": "broker_id", "min_value": 0}),
          Check(br, "ExpectColumnValuesToBeBetween", {"column": "broker_epoch", "min_value": 0}),
          Check(tc, "ExpectColumnValuesToBeBetween",
                {"column": "effective_min_isr", "min_value": 1}),
          Check(tc, "ExpectColumnValuesToNotBeNull", {"column": "topic_name"})]
    c += [Check(catalog.DIVERGENCES.name, "ExpectTableRowCountToEqual", {"value": 0}),
          Check(catalog.INVARIANT_BREACHES.name, "ExpectColumnValuesToNotBeInSet",
                {"column": "severity", "value_set": ["ERROR"]})]
    # rule ids and severities the registry declares (controller_core/codes.py): a row with any other is
    # one the audit cannot grade or explain
    sinks = ((catalog.INVARIANT_BREACHES.name, codes.INVARIANT_BREACHES), (catalog.DIVERGENCES.name, codes.DIVERGENCES))
    c += [Check(t, "ExpectColumnValuesToBeInSet", {"column": "rule", "value_set": list(codes.written_to(sink))})
          for t, sink in sinks]
    c += [Check(t, "ExpectColumnValuesToBeInSet", {"column": "severity", "value_set": list(codes.SEVERITIES)})
          for t, _ in sinks]
    return c


def _columns(checks_of_table: list[Check]) -> list[str]:
    cols: list[str] = []
    for ch in checks_of_table:
        k = ch.kwargs
        for c in [k.get("column"), k.get("column_A"), k.get("column_B"), *(k.get("column_list") or [])]:
            if c and c not in cols:
                cols.append(c)
    return cols


def validate(tables: dict[str, "object"], cluster: str) -> pa.Table:
    """Run every check on ``tables`` ({name: pandas DataFrame}); one QUALITY_SCHEMA row per check.
    A table that is absent fails its checks with severity ERROR (except row-count-zero checks)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.execution_engine import pandas_execution_engine

    # GX fingerprints every batch frame under HASH_THRESHOLD bytes (an md5 over a hash of every row): the
    # per-column frames below are under it, and the fingerprint (batch metadata nobody here reads) cost
    # 27 s of 69 at 1 M partitions.  0: never (the pinned GX reads this module attribute for each batch).
    pandas_execution_engine.HASH_THRESHOLD = 0

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_pandas(name="lake")
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    by_table: dict[str, list[Check]] = {}
    for ch in checks():
        by_table.setdefault(ch.table, []).append(ch)
    for name, mine in by_table.items():
        df = tables.get(name)
        if df is None:
            for ch in mine:
                empty_ok = ch.expectation == "ExpectTableRowCountToEqual"
                rows.append(dict(cluster=cluster, checked_at=now, table=name, expectation=ch.expectation,
                                 kwargs=json.dumps(ch.kwargs), severity=ch.severity, success=empty_ok,
                                 element_count=0, unexpected_count=0,
                                 unexpected_sample=None if empty_ok else "table missing"))
            continue
        batch = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe(name)
        results = []
        # one suite per set of columns, validated on those columns alone: GX's pandas engine copies the whole
        # frame it is given for every metric it computes (a third of the run at 1 M partitions was copies)
        by_columns: dict[tuple, list[int]] = {}
        for i, ch in enumerate(mine):
            by_columns.setdefault(tuple(_columns([ch])), []).append(i)
        for k, (cols, which) in enumerate(by_columns.items()):
            suite = ctx.suites.add(gx.ExpectationSuite(name=f"{name}_suite_{k}"))
            for i in which:
                suite.add_expectation(getattr(gxe, mine[i].expectation)(**mine[i].kwargs, meta={"check": i}))
            frame = df[list(cols)] if cols else df
            results += batch.get_batch(batch_parameters={"dataframe": frame}).validate(
                suite, result_format="SUMMARY").results
        # GX does not return results in the suite's order: match them through the meta tag
        for r in sorted(results, key=lambda r: r.expectation_config.meta["check"]):
            ch = mine[r.expectation_config.meta["check"]]
            got = r.result or {}
            sample = got.get("partial_unexpected_list") or (
                [got.get("observed_value")] if not r.success and "observed_value" in got else None)
            rows.append(dict(cluster=cluster, checked_at=now, table=name, expectation=ch.expectation,
                             kwargs=json.dumps(ch.kwargs), severity=ch.severity, success=bool(r.success),
                             element_count=got.get("element_count", len(df)),
                             unexpected_count=got.get("unexpected_count", 0 if r.success else None),
                             unexpected_sample=json.dumps(sample[:5], default=str) if sample else None))
    return pa.Table.from_pylist(rows, schema=QUALITY_SCHEMA)


def load_tables(lake, cluster: str) -> dict:
    """The columns the checks read, of every table the cluster has, as pandas frames: the silver tables at
    the versions the cluster's last replay recorded (one consistent replay, even while another runs), the
    others at their latest version."""
    from lake import bronze, gold

    versions = gold.replayed_versions(gold.last_replay(lake, cluster))
    by_table: dict[str, list[Check]] = {}
    for ch in checks():
        by_table.setdefault(ch.table, []).append(ch)
    out = {}
    for name, mine in by_table.items():
        if not lake.exists(name):
            continue
        cols = _columns(mine)
        silver = catalog.table(name).layer == catalog.SILVER
        legacy = name == catalog.METADATA_RECORDS.name and bronze.needs_migration(lake)
        if legacy:  # keyed by file (written before bronze was keyed by the log): its key derived as a migration would
            cols = list(dict.fromkeys([c for c in cols if c != catalog.LOG_PART] + ["source_kind", "source_file"]))
        t = lake.read_arrow(name, version=versions.get(name) if silver else None, columns=cols or ["cluster"],
                            filters=[("cluster", "=", cluster)])
        out[name] = _wide_ints(bronze.with_log_part(t) if legacy else t).to_pandas(strings_to_categorical=True)
    return out


def _wide_ints(t: pa.Table) -> pa.Table:
    """Integer columns as int64: GX's pandas engine compares a column between bounds with NumPy only when its
    dtype is int64 or float64, and calls a Python function per value otherwise -- an int32 column such as a
    partition id or an epoch took 26 s of the 57 s quality run at 1 M partitions.  Same values, same checks."""
    for i, f in enumerate(t.schema):
        if pa.types.is_integer(f.type) and f.type != pa.int64():
            t = t.set_column(i, pa.field(f.name, pa.int64(), f.nullable), t.column(i).cast(pa.int64()))
    return t


def add_arguments(p) -> None:
    p.add_argument("--cluster", required=True)
    p.add_argument("--lake", help="lake root (default: conf lake, env KRAFT_AUDIT_LAKE)")
    p.add_argument("--conf", help="YAML file overriding conf/defaults.yaml")
    p.add_argument("--json", action="store_true", help="the result rows as a JSON array")


def run(args, out=None, err=None) -> int:
    from lake.delta import Lake

    out, err = out or sys.stdout, err or sys.stderr
    return_freed_memory()
    config = load_config(args.conf, {"lake": args.lake} if args.lake else None)
    lake = Lake(config["lake"], None, backend="delta-rs")
    if not lake.exists(catalog.METADATA_RECORDS.name):
        print(f"{PROG}: no {catalog.METADATA_RECORDS.name} table in {lake.root}: run kraft-audit ingest first",
              file=err)
        return 2
    tables = load_tables(lake, args.cluster)
    result = validate(tables, args.cluster)
    with holding(config, args.cluster, "quality", GOLD):  # its results replace the cluster's previous ones
        lake.overwrite_arrow(QUALITY.name, result, partition_by=QUALITY.partition_by, where={"cluster": args.cluster})
    failed = [r for r in result.to_pylist() if not r["success"]]
    if args.json:
        out.write(json.dumps(result.to_pylist(), default=str, indent=2) + "\n")
    else:
        out.write(f"{PROG}: cluster {args.cluster!r}: {result.num_rows} expectations, {len(failed)} failed\n")
        for r in failed:
            out.write(f"  [{r['severity']}] {r['table']}: {r['expectation']} {r['kwargs']}: "
                      f"{r['unexpected_count']} unexpected of {r['element_count']} {r['unexpected_sample'] or ''}\n")
    bronze = tables.get(catalog.METADATA_RECORDS.name)
    if bronze is None or not len(bronze):
        print(f"{PROG}: cluster {args.cluster!r} has no rows in {catalog.METADATA_RECORDS.name} ({lake.root}): an empty "
              "bronze passes no check; ingest its log first", file=err)
    return 1 if any(r["severity"] == "ERROR" for r in failed) else 0
