"""The table catalog (lake/catalog.py) is the one place a table is declared: its name is spelled
nowhere else, the README lists the same tables, and what the jobs write -- ingest, replay, audit,
quality, log info -- has the catalog's schemas, partitioning and unique keys."""
from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from jobs import cli
from jobs.ingest import ingest
from lake import catalog
from lake.delta import delta_types
from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parents[2]
CATALOG = Path(catalog.__file__).resolve().relative_to(ROOT).as_posix()
SKIP_DIRS = {".venv", "venv", ".git", "__pycache__", ".tox", "build", "dist"}

# String literals equal to a table name that do not name the table, with why; exact counts.
NOT_TABLE_NAMES = {
    # the report of `kraft-audit verify --json` (same shape as the Java reference) has a
    # "divergences" list: a JSON key, read back by the replay test
    ("controller_core/rules/verify.py", catalog.DIVERGENCES.name): 1,
    ("tests/jobs/test_replay.py", catalog.DIVERGENCES.name): 1,
    ("jobs/verify.py", catalog.DIVERGENCES.name): 1,
    ("tests/jobs/test_one_engine.py", catalog.DIVERGENCES.name): 1,
    ("tests/reliability/test_verify_exit_codes.py", catalog.DIVERGENCES.name): 1,
    ("scripts/sweep_logs.py", catalog.DIVERGENCES.name): 1,
    # the "incidents" lists of `audit --json` (the gold table's rows) and of a scenario's ground_truth.json (the
    # incidents the simulator planted): JSON keys, written and read back
    ("audit/run.py", catalog.INCIDENTS.name): 1,
    ("simulator/engine.py", catalog.INCIDENTS.name): 2,
    ("tests/audit/test_codes_emitted.py", catalog.INCIDENTS.name): 1,
    ("tests/jobs/test_audit.py", catalog.INCIDENTS.name): 3,
    ("tests/jobs/test_replay.py", catalog.INCIDENTS.name): 2,
    ("tests/jobs/test_report.py", catalog.INCIDENTS.name): 1,
    ("tests/jobs/test_scenarios.py", catalog.INCIDENTS.name): 8,
    ("tests/simulator/test_cluster_events.py", catalog.INCIDENTS.name): 1,
    ("tests/simulator/test_simulator.py", catalog.INCIDENTS.name): 3,
    ("tests/reliability/test_names_cluster.py", catalog.INCIDENTS.name): 1,
}


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py")
                  if not any(part in SKIP_DIRS for part in p.relative_to(root).parts[:-1]))


def table_name_literals(path: Path, names) -> list[tuple[str, int]]:
    """(name, line) of every string literal in ``path`` that equals one of ``names``, f-string parts
    and dict keys included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_the_scan_sees_a_table_name_spelled_out(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('lake.read("partition_state")\n'
                       "print(f\"{tables['violations'].num_rows} rows\")\n"
                       'x = {"data_quality": 1, "not_a_table": 2}\n'
                       '"""a docstring naming partition_state is prose, not a literal name"""\n')
    assert sorted(table_name_literals(planted, set(catalog.BY_NAME))) == [
        (catalog.DATA_QUALITY.name, 3), (catalog.PARTITION_STATE.name, 1), (catalog.VIOLATIONS.name, 2)]


def test_every_table_name_is_spelled_out_once_in_the_catalog():
    names = set(catalog.BY_NAME)
    in_catalog: dict[str, int] = {}
    elsewhere: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], list[int]] = {}
    files = _python_files(ROOT)
    assert ROOT / CATALOG in files and len(files) > 100  # the scan covers the tree
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        for name, line in table_name_literals(path, names):
            if rel == CATALOG:
                in_catalog[name] = in_catalog.get(name, 0) + 1
            else:
                elsewhere[(rel, name)] = elsewhere.get((rel, name), 0) + 1
                where.setdefault((rel, name), []).append(line)
    assert in_catalog == {name: 1 for name in names}
    unexpected = {f"{rel}:{where[(rel, name)]}: {name!r}" for (rel, name), n in elsewhere.items()
                  if NOT_TABLE_NAMES.get((rel, name)) != n}
    assert not unexpected, "table names spelled out instead of taken from lake.catalog: " + ", ".join(
        sorted(unexpected))
    assert elsewhere == NOT_TABLE_NAMES


def test_catalog_declarations_are_well_formed():
    assert len(catalog.BY_NAME) == len(catalog.TABLES)  # no name declared twice
    for t in catalog.TABLES:
        assert t.layer in catalog.LAYERS and t.description
        assert t.partition_by == ("cluster",)  # several clusters share one lake
        assert set(t.key) <= set(t.schema.names) and set(t.partition_by) <= set(t.schema.names), t.name
        assert t.key[: len(t.partition_by)] == t.partition_by  # a key is unique within a cluster's rows
        assert not [f.name for f in t.schema if pa.types.is_timestamp(f.type) and f.type != catalog.TS]
    assert catalog.table(catalog.VIOLATIONS.name) is catalog.VIOLATIONS
    with pytest.raises(KeyError, match="no table 'nope'"):
        catalog.table("nope")


def _readme_tables() -> list[tuple[str, str, tuple[str, ...]]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Tables\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`([a-z_]+)`", cells[0]) if len(cells) == 4 else None
        if m:
            rows.append((m.group(1), cells[1], tuple(k.strip() for k in cells[3].strip("`").split(","))))
    return rows


def test_readme_lists_the_catalog_tables_with_their_layers_and_keys():
    assert sorted(_readme_tables()) == sorted((t.name, t.layer, t.key) for t in catalog.TABLES)


# ------------------------------------------------------------------------------ what the jobs write
SPLIT = 64 << 20
OGS = REALDATA / "ogs59-3broker-mv3.7"
# written by the fixture but empty: the real logs replay without a single divergence
EMPTY_HERE = {catalog.DIVERGENCES.name}


@pytest.fixture(scope="module")
def written(silver, spark, tmp_path_factory):
    """The replay tests' lake (two real clusters ingested and replayed) with what the other jobs add:
    each cluster audited (at offset 100 vasifvortex has 33 leaderless partitions: recovery candidates)
    and checked, a damaged copy of a log ingested (quarantine rows), three brokers' log info plus a bad
    file ingested."""
    from lake import gold

    lake, _ = silver
    for name, at in (("induswargods", []), ("vasifvortex", ["--at-offset", "100"])):
        assert cli.main(["audit", "--cluster", name, "--lake", str(lake.root), *at]) in (0, 1)
        assert cli.main(["quality", "--cluster", name, "--lake", str(lake.root)]) == 0

    tmp = tmp_path_factory.mktemp("catalog")
    damaged = tmp / "damaged" / "__cluster_metadata-0"
    shutil.copytree(REALDATA / CLUSTERS["vasifvortex"] / "__cluster_metadata-0", damaged)
    seg = sorted(damaged.glob("*.log"))[0]
    seg.write_bytes(seg.read_bytes() + b"\x07not a record batch" * 4)
    assert ingest(spark, lake, "damaged", str(damaged), SPLIT).quarantine_added > 0

    files = []
    for b in (1, 2, 3):
        f = tmp / f"broker-{b}.json"
        assert cli.main(["collect-log-info", "--broker-id", str(b), "--data-dir", str(OGS / f"kafka-{b}"),
                         "--at", "2025-09-22T14:31:30Z", "-o", str(f)]) == 0
        files.append(str(f))
    bad = tmp / "broker-9.json"
    bad.write_text('{"BrokerId": 9, "BrokerEpoch": 1, "TopicPartitionLogInfoList": [{"TopicId": "x", '
                   '"PartitionLogInfo": [{"Partition": "one"}]}]}')
    rows, quarantined = gold.ingest_log_info(lake, "ogs59", files + [str(bad)])
    assert rows == 3 and quarantined.num_rows == 1
    return lake


def test_the_jobs_write_exactly_the_catalog_tables(written):
    on_disk = {p.name for p in Path(written.root).iterdir() if (p / "_delta_log").is_dir()}
    assert on_disk == set(catalog.BY_NAME)


@pytest.mark.parametrize("table", catalog.TABLES, ids=lambda t: t.name)
def test_written_schema_and_partitioning_are_the_catalogs(written, table):
    dt = DeltaTable(written.path(table.name))
    stored = pa.schema(dt.schema().to_arrow())
    # Delta types: equal up to representation (list child names, string vs large_string); the
    # catalog already states timestamps as read back (us, UTC); columns are matched by name
    assert delta_types(stored) == delta_types(table.schema)
    assert list(dt.metadata().partition_columns) == list(table.partition_by)


@pytest.mark.parametrize("table", catalog.TABLES, ids=lambda t: t.name)
def test_catalog_key_is_unique_in_what_the_jobs_wrote(written, table):
    rows = written.read_arrow(table.name, columns=list(table.key))
    if table.name in EMPTY_HERE:
        assert rows.num_rows == 0
        return
    assert rows.num_rows > 0
    counts = rows.group_by(list(table.key)).aggregate([([], "count_all")])
    dupes = counts.filter(pc.greater(counts.column("count_all"), 1))
    assert dupes.num_rows == 0, f"{table.name}: key {table.key} repeats: {dupes.slice(0, 5).to_pylist()}"


def test_log_directory_tables_have_the_catalog_schemas():
    """The audit's no-lake path (audit.local) yields the replay's silver tables under the same names
    and with the same columns, minus ``cluster``."""
    from audit.local import silver_tables

    tables = silver_tables(REALDATA / CLUSTERS["vasifvortex"])
    for t in (catalog.PARTITION_STATE_HISTORY, catalog.BROKER_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY,
              catalog.INVARIANT_BREACHES):
        want = t.schema.remove(t.schema.get_field_index("cluster"))
        assert delta_types(tables[t.name].schema) == delta_types(want), t.name
