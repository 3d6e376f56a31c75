"""Reading the silver tables and writing the gold ones for ``kraft-audit audit`` / ``plan``.

The audit reads a cluster's silver rows straight from Delta with delta-rs (``Lake.read_arrow``): it
computes on Arrow/NumPy in one process, so it needs no SparkSession and starts in a second.  Gold
tables are written the same way.  The same audit runs on a log directory (``--log-dir``) through
:func:`audit.local.silver_tables`, with no lake at all.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit import loginfo
from audit import local
from audit.frames import take_rows
from controller_core import pipeline
from controller_core.codec.arrowutil import repeat_str
from controller_core.codes import SEVERITIES
from lake import catalog

SILVER_INPUTS = tuple(t.name for t in (catalog.PARTITION_STATE_HISTORY, catalog.BROKER_STATE_HISTORY,
                                        catalog.TOPIC_CONFIG_HISTORY, catalog.INVARIANT_BREACHES))


class GoldError(RuntimeError):
    pass


def _drop_cluster(t: pa.Table) -> pa.Table:
    return t.drop_columns(["cluster"]) if "cluster" in t.column_names else t


def last_replay(lake, cluster: str) -> dict | None:
    """The checkpoint row of the cluster's last replay (None: never replayed)."""
    if not lake.exists(catalog.REPLAY_CHECKPOINTS.name):
        return None
    marks = lake.read_arrow(catalog.REPLAY_CHECKPOINTS.name, filters=[("cluster", "=", cluster)])
    if not marks.num_rows:
        return None
    return marks.sort_by([("last_offset", "descending"), ("replayed_at", "descending")]).slice(0, 1).to_pylist()[0]


def replayed_versions(mark: dict | None) -> dict[str, int]:
    """{table: Delta version} the replay of checkpoint row ``mark`` committed (and the bronze version it read):
    the versions a reader reads together, whatever a replay running meanwhile commits.  Empty for a
    checkpoint written before versions were recorded (the latest versions are read then)."""
    text = (mark or {}).get("table_versions")
    return {k: int(v) for k, v in json.loads(text).items()} if text else {}


def silver_from_lake(lake, cluster: str, history_columns=None) -> tuple[dict[str, pa.Table], int, object]:
    """(tables, end offset, end time) of a cluster's last replay: every table at the version that replay
    recorded, its history rows checked against the count it recorded; ``history_columns``: only those of the
    history (default all)."""
    missing = [t for t in (*SILVER_INPUTS, catalog.REPLAY_CHECKPOINTS.name) if not lake.exists(t)]
    if missing:
        raise GoldError(f"no {', '.join(missing)} table in {lake.root}: run kraft-audit replay --cluster {cluster} first")
    flt = [("cluster", "=", cluster)]
    last = last_replay(lake, cluster)
    if last is None:
        raise GoldError(f"cluster {cluster!r} was never replayed into {lake.root}: run kraft-audit replay first")
    versions = replayed_versions(last)
    history = catalog.PARTITION_STATE_HISTORY.name
    cols = {history: list(history_columns) + [catalog.CLUSTER]} if history_columns else {}
    tables = {name: _drop_cluster(lake.read_arrow(name, version=versions.get(name), filters=flt,
                                                  columns=cols.get(name)))
              for name in SILVER_INPUTS}
    if versions and last["records"] is not None and tables[history].num_rows != last["records"]:
        raise GoldError(f"{history} of cluster {cluster!r} holds {tables[history].num_rows} rows at version "
                        f"{versions.get(history)} but its replay recorded {last['records']}: run kraft-audit replay "
                        "--full")
    tables["record_times"] = lake.read_arrow(catalog.METADATA_RECORDS.name, columns=list(pipeline.RECORD_TIME_COLUMNS),
                                             version=versions.get(catalog.METADATA_RECORDS.name),
                                             filters=flt + [("source_kind", "=", "segment")])
    return tables, int(last["last_offset"]), last["last_timestamp"]


def silver_from_log_dir(log_dir: str, invariants: bool = True) -> tuple[dict[str, pa.Table], int, object]:
    tables = local.silver_tables(log_dir, invariants=invariants)
    end_offset, end_time = local.log_end(tables)
    return tables, end_offset, end_time


def load_sources(config: dict, cluster: str | None, log_dir: str | None, log_info_paths, warn,
                 history_columns=None) -> tuple:
    """What ``audit`` and ``plan`` start from: (silver tables, end offset, end time, log info newest first,
    the Lake or None) of a cluster in the lake or of a log directory.  ``log_info_paths`` (files or
    folders) replace the lake's log info; each bad file or entry is passed to ``warn`` as one line.
    ``history_columns``: the history columns read from the lake (default all)."""
    lake = None
    if log_dir:
        tables, end_offset, end_time = silver_from_log_dir(log_dir)
        for note in tables.get("replay_notes") or []:  # where Kafka would start the log from (one line each)
            warn(note)
        info = loginfo.LOG_INFO_SCHEMA.empty_table()
    else:
        from lake.delta import Lake

        lake = Lake(config["lake"], None, backend="delta-rs")
        tables, end_offset, end_time = silver_from_lake(lake, cluster, history_columns)
        info = log_info_from_lake(lake, cluster)
    if log_info_paths:
        rows, bad = loginfo.read_log_info(log_info_files(log_info_paths))
        for q in bad.to_pylist():
            warn(f"ignored {q['source_file']} {q['json_path']}: {q['reason']}")
        info = rows
    return tables, end_offset, end_time, newest_first(info), lake


def log_info_files(paths) -> list[str]:
    """JSON files named directly, or every *.json in the directories named."""
    out = []
    for p in paths or []:
        p = Path(p)
        if p.is_dir():
            out += sorted(str(f) for f in p.glob("*.json"))
        elif p.exists():
            out.append(str(p))
        else:
            raise FileNotFoundError(f"log info file or directory not found: {p}")
    return out


def newest_first(info: pa.Table) -> pa.Table:
    """Replies ordered newest capture first: recovery counts a broker's first reply per partition."""
    if not info.num_rows:
        return info
    keyed = info.append_column("_o", pc.fill_null(info.column("collected_at_offset"), -1))
    keyed = keyed.sort_by([("_o", "descending"), ("collected_at", "descending"), ("source_file", "ascending")])
    return keyed.drop_columns(["_o"])


def ingest_log_info(lake, cluster: str, paths) -> tuple[int, pa.Table]:
    """Bronze ``replica_log_info`` from GetReplicaLogInfo-shaped files (one per broker), bad files and
    entries to ``replica_log_info_quarantine``.  Each file replaces its own earlier rows: re-ingesting
    the same files changes nothing."""
    files = log_info_files(paths)
    if not files:
        return 0, loginfo.LOG_INFO_QUARANTINE_SCHEMA.empty_table()
    rows, bad = loginfo.read_log_info(files)
    where = {"cluster": cluster, "source_file": files}
    for table, data in ((catalog.REPLICA_LOG_INFO, rows), (catalog.REPLICA_LOG_INFO_QUARANTINE, bad)):
        data = data.append_column("cluster", pa.array([cluster] * data.num_rows, pa.string()))
        lake.overwrite_arrow(table.name, data, partition_by=table.partition_by, where=where)  # one commit for all files
    return rows.num_rows, bad


def log_info_from_lake(lake, cluster: str) -> pa.Table:
    if not lake.exists(catalog.REPLICA_LOG_INFO.name):
        return loginfo.LOG_INFO_SCHEMA.empty_table()
    t = _drop_cluster(lake.read_arrow(catalog.REPLICA_LOG_INFO.name, filters=[("cluster", "=", cluster)]))
    return t.select(loginfo.LOG_INFO_SCHEMA.names).cast(loginfo.LOG_INFO_SCHEMA)


# ------------------------------------------------------------------------------------------ audit runs
FINDING_KEY = ("code", "topic_id", "partition", "first_offset")  # the same finding in two runs


@dataclass(frozen=True)
class AuditRun:
    """One audit of one cluster: what it audited and with which settings.  The id is derived from them, so
    auditing the same point with the same settings again replaces that run (re-runs are idempotent)."""

    cluster: str
    at_offset: int
    at_time: object
    end_offset: int
    at_end: bool  # the end of the replayed log (a scheduled audit), not a past point
    fail_on: str
    strategy: str
    config: str  # the audit section of the config and the log info inputs, JSON

    @property
    def run_id(self) -> str:
        text = json.dumps([self.cluster, self.at_offset, self.end_offset, self.at_end, self.fail_on, self.strategy,
                           self.config])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runs(lake, cluster: str) -> pa.Table:
    if not lake.exists(catalog.AUDIT_RUNS.name):
        return catalog.AUDIT_RUN_SCHEMA.empty_table()
    return lake.read_arrow(catalog.AUDIT_RUNS.name, filters=[("cluster", "=", cluster)])


def previous_run(lake, cluster: str) -> dict | None:
    """The latest recorded audit of the end of the log (what "new since the last audit" compares with)."""
    runs = _runs(lake, cluster)
    runs = runs.filter(pc.fill_null(runs.column("at_end"), False))
    if not runs.num_rows:
        return None
    return runs.sort_by([("audited_at", "descending")]).slice(0, 1).to_pylist()[0]


def run_incidents(lake, cluster: str, run_id: str) -> pa.Array:
    """The incident ids of one recorded run (none for a run recorded before incidents existed)."""
    if not lake.exists(catalog.INCIDENTS.name):
        return pa.array([], pa.string())
    t = lake.read_arrow(catalog.INCIDENTS.name, columns=["incident_id"],
                        filters=[("cluster", "=", cluster), (catalog.RUN_ID, "=", run_id)])
    return t.column("incident_id").combine_chunks()


def new_incidents(incidents: pa.Table, seen: pa.Array | None) -> pa.Table:
    """The incidents whose id the previous run did not have (None: nothing seen), in their order."""
    if seen is None or not len(seen) or not incidents.num_rows:
        return incidents
    return incidents.filter(pc.invert(pc.is_in(incidents.column("incident_id"), value_set=seen)))


def run_findings(lake, cluster: str, run_id: str) -> pa.Table:
    """The finding keys (:data:`FINDING_KEY` columns) of one recorded run."""
    return lake.read_arrow(catalog.VIOLATIONS.name, columns=list(FINDING_KEY),
                           filters=[("cluster", "=", cluster), (catalog.RUN_ID, "=", run_id)])


def _joinable(t: pa.Table) -> pa.Table:
    """The finding keys with nulls made comparable (a join never matches nulls): topic-level and
    cluster-level findings have no partition or topic."""
    return pa.table({"_code": t.column("code"), "_topic": pc.fill_null(t.column("topic_id"), ""),
                     "_part": pc.fill_null(t.column("partition"), -1), "_first": t.column("first_offset")})


# what the news of a run shows of a finding (jobs/audit.py): the sorted copy of the new findings holds only these,
# not their evidence (at 1 M partitions a full copy of 4.5 M findings was gigabytes)
NEWS_COLUMNS = ("severity", "code", "topic", "topic_id", "partition", "first_offset", "explanation")


def new_since(violations: pa.Table, seen: pa.Table | None) -> pa.Table:
    """The rows of ``violations`` whose finding is not among the ``seen`` keys (None: nothing seen), most
    severe first (then in log order), in :data:`NEWS_COLUMNS`."""
    rows = np.arange(violations.num_rows)
    if seen is not None and seen.num_rows and violations.num_rows:
        keys = _joinable(violations).append_column("_row", pa.array(rows))
        fresh = keys.join(_joinable(seen), ["_code", "_topic", "_part", "_first"], join_type="left anti")
        rows = np.sort(fresh.column("_row").to_numpy())
    # the order from two key columns, then one copy of the shown columns (not a copy per step)
    keys = take_rows(violations.select(["severity", "first_offset"]), rows)
    rank = pc.fill_null(pc.index_in(keys.column("severity"), pa.array(list(SEVERITIES))), len(SEVERITIES))
    order = pc.sort_indices(pa.table({"_rank": rank, "first_offset": keys.column("first_offset")}),
                            sort_keys=[("_rank", "ascending"), ("first_offset", "ascending")])
    return take_rows(violations.select(list(NEWS_COLUMNS)), rows[np.asarray(order, np.int64)])


LEGACY_RUN = "before-audit-runs"  # the run id given to gold rows written before runs were recorded


def _migrate(lake, table) -> None:
    """A gold table written by an earlier version gets the columns it lacks: run_id (rows: LEGACY_RUN,
    written before audit runs existed), the others null (e.g. violations' incident_id)."""
    if not lake.exists(table.name):
        return
    if not [f for f in table.schema if f.name not in lake.column_names(table.name)]:
        return  # the usual case, decided from the table's metadata: every run's rows are read only to migrate
    old = lake.read_arrow(table.name)
    missing = [f for f in table.schema if f.name not in old.column_names]
    for f in missing:
        fill = [LEGACY_RUN] * old.num_rows if f.name == catalog.RUN_ID else None
        old = old.append_column(f.name, pa.array(fill, f.type) if fill else pa.nulls(old.num_rows, f.type))
    lake.replace_schema(table.name, old.select(table.schema.names).cast(table.schema))


def write_gold(lake, run: AuditRun, result, previous: dict | None, new_findings: int) -> None:
    """The run's ``violations``, ``incidents`` and ``recovery_candidates`` and its ``audit_runs`` row.  Every
    run is kept; a run with the same id (same point, same settings) is replaced."""
    cluster, run_id = run.cluster, run.run_id
    where = {"cluster": cluster, catalog.RUN_ID: run_id}
    for table in (catalog.VIOLATIONS, catalog.RECOVERY_CANDIDATES):
        _migrate(lake, table)
    for table, t in ((catalog.VIOLATIONS, result.violations), (catalog.INCIDENTS, result.incidents)):
        t = (t.set_column(t.schema.get_field_index("cluster"), "cluster", repeat_str(cluster, t.num_rows))
             .append_column(catalog.RUN_ID, repeat_str(run_id, t.num_rows)))
        lake.overwrite_arrow(table.name, t, partition_by=table.partition_by, where=where)
    c = result.candidates
    c = (c.append_column("at_offset", pa.array([result.at_offset] * c.num_rows, pa.int64()))
         .append_column("cluster", pa.array([cluster] * c.num_rows, pa.string()))
         .append_column(catalog.RUN_ID, pa.array([run_id] * c.num_rows, pa.string())))
    lake.overwrite_arrow(catalog.RECOVERY_CANDIDATES.name, c, partition_by=catalog.RECOVERY_CANDIDATES.partition_by,
                         where=where)
    row = {catalog.RUN_ID: run_id, "audited_at": dt.datetime.now(dt.timezone.utc), "at_offset": run.at_offset,
           "at_time": run.at_time, "end_offset": run.end_offset, "at_end": run.at_end, "fail_on": run.fail_on,
           "strategy": run.strategy, "config": run.config, "findings": result.violations.num_rows,
           "worst_severity": result.worst(), "previous_run_id": previous[catalog.RUN_ID] if previous else None,
           "new_findings": new_findings, "cluster": cluster}
    lake.overwrite_arrow(catalog.AUDIT_RUNS.name, pa.Table.from_pylist([row], schema=catalog.AUDIT_RUN_SCHEMA),
                         partition_by=catalog.AUDIT_RUNS.partition_by, where=where)