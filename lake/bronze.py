"""Bronze I/O besides the Spark ingest: bringing a ``metadata_records`` table written by an older version to the
catalog's key.

Before bronze was keyed by the log, ``metadata_records`` was keyed (cluster, source_file, offset): two nodes'
copies of one log ingested under different file names held every offset twice.  :func:`migrate_records` rewrites
such a table once (one commit, the whole table through delta-rs, in memory: run it when nothing else writes the
lake -- ``ingest`` calls it under the cluster's lock, first thing): every row gets its ``log_part``
(``catalog.log_part``) and a null ``batch_crc`` (the CRCs are in the log files, not in the lake: a copy compared
with these rows later is compared on offsets and epochs alone), and of the rows sharing a key the one of the
first file (by name) is kept.  Readers need no migration: the replay and the audit read the columns they always
did.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from lake import catalog
from lake.delta import open_table

RECORDS = catalog.METADATA_RECORDS


def needs_migration(lake) -> bool:
    """The lake's ``metadata_records`` lacks a column the catalog declares."""
    if not lake.exists(RECORDS.name):
        return False
    have = set(pa.schema(open_table(lake.path(RECORDS.name)).schema().to_arrow()).names)
    return not set(RECORDS.schema.names) <= have


def with_log_part(t: pa.Table) -> pa.Table:
    """``t`` (bronze rows with ``source_kind`` and ``source_file``) with its ``log_part`` column."""
    if catalog.LOG_PART in t.column_names:
        return t
    pairs = pa.Table.from_arrays([t.column("source_kind"), t.column("source_file")], ["k", "f"])
    distinct = pairs.group_by(["k", "f"]).aggregate([]).to_pylist()
    part = {(d["k"], d["f"]): catalog.log_part(d["k"], d["f"]) for d in distinct}
    keys = [f"{k}\x00{f}" for k, f in part]
    joined = pc.binary_join_element_wise(t.column("source_kind"), t.column("source_file"), "\x00")
    idx = pc.index_in(joined, value_set=pa.array(keys, pa.string()))
    return t.append_column(catalog.LOG_PART, pc.take(pa.array(list(part.values()), pa.string()), idx))


def migrate_records(lake) -> int | None:
    """Rewrite an older ``metadata_records`` to the catalog's columns and key; the number of duplicate rows
    dropped, or None when the table needed no migration."""
    if not needs_migration(lake):
        return None
    old = with_log_part(lake.read_arrow(RECORDS.name))
    for f in RECORDS.schema:  # batch_crc, and the columns later versions added (record_type_id ...): null
        if f.name not in old.column_names:
            old = old.append_column(f.name, pa.nulls(old.num_rows, f.type))
    key = list(RECORDS.key)
    old = old.sort_by([(k, "ascending") for k in key] + [("source_file", "ascending")])
    old = old.append_column("__row", pa.array(range(old.num_rows), pa.int64()))
    first = old.group_by(key).aggregate([("__row", "min")]).column("__row_min")
    kept = old.take(pc.take(first, pc.sort_indices(first))).drop_columns(["__row"])
    lake.replace_schema(RECORDS.name, kept.select(RECORDS.schema.names).cast(RECORDS.schema))
    return old.num_rows - kept.num_rows
