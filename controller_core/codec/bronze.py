"""The bronze rows of decoded records: framing, typed columns for replay and audit, full JSON.

Pure Arrow (runs inside Spark executors and in Spark-free CLIs).  Typed column names are Kafka's
field names in snake case; values are as recorded (e.g. a PartitionChangeRecord's ``leader`` = -2 and
``isr`` = null mean "unchanged"), except the broker state flags, which are normalised across the
three record types that set them (see ``fenced``).
"""
from __future__ import annotations

import json
import sys
import threading
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec.arrowutil import (NUMPY_TYPES, STRING_CODES, column_ints, from_numpy, nulls, plain,
                                              repeat_str, strings)
from controller_core.codec.jsonwrite import chunk_json
from controller_core.codec.logfile import COMPILED_MIN_RECORDS, TYPE_NAMES, DecodedChunk, Quarantine, distinct
from controller_core.codec.wordcopy import spelled
from controller_core.records import UNKNOWN_RECORD_TYPE as UNKNOWN_RECORD

INT_LIST = pa.list_(pa.int32())
STR_LIST = pa.list_(pa.string())
TS = pa.timestamp("ms", tz="UTC")

FRAMING = [
    pa.field("cluster", pa.string(), nullable=False),
    pa.field("source_file", pa.string(), nullable=False),  # relative to the data directory
    pa.field("source_kind", pa.string(), nullable=False),  # segment | snapshot | bootstrap
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),  # byte position of the record in the file
    pa.field("batch_position", pa.int64(), nullable=False),
    pa.field("batch_base_offset", pa.int64(), nullable=False),
    pa.field("batch_timestamp", TS, nullable=False),
    pa.field("timestamp", TS, nullable=False),
    pa.field("batch_leader_epoch", pa.int32(), nullable=False),
    pa.field("is_control", pa.bool_(), nullable=False),
    pa.field("record_type", pa.string(), nullable=False),  # kafka-dump-log's "type"
    pa.field("record_version", pa.int16(), nullable=False),
]
TYPED = [
    pa.field("topic_id", pa.string()),
    pa.field("topic_name", pa.string()),
    pa.field("partition_id", pa.int32()),
    pa.field("replicas", INT_LIST),
    pa.field("isr", INT_LIST),
    pa.field("removing_replicas", INT_LIST),
    pa.field("adding_replicas", INT_LIST),
    pa.field("leader", pa.int32()),
    pa.field("leader_epoch", pa.int32()),
    pa.field("partition_epoch", pa.int32()),
    pa.field("leader_recovery_state", pa.int8()),
    pa.field("directories", STR_LIST),
    pa.field("eligible_leader_replicas", INT_LIST),
    pa.field("last_known_elr", INT_LIST),
    pa.field("broker_id", pa.int32()),
    pa.field("broker_epoch", pa.int64()),
    pa.field("incarnation_id", pa.string()),
    pa.field("fenced", pa.bool_()),  # state after the record; null = unchanged
    pa.field("in_controlled_shutdown", pa.bool_()),  # state after the record; null = unchanged
    pa.field("log_dirs", STR_LIST),  # null = unchanged
    pa.field("rack", pa.string()),
    pa.field("controller_id", pa.int32()),  # RegisterControllerRecord
    pa.field("leader_id", pa.int32()),  # LeaderChange: the Raft leader (active controller)
    pa.field("config_resource_type", pa.int8()),
    pa.field("config_resource_name", pa.string()),
    pa.field("config_name", pa.string()),
    pa.field("config_value", pa.string()),
    pa.field("feature_name", pa.string()),
    pa.field("feature_level", pa.int16()),
    pa.field("record_type_id", pa.int32()),  # the apiKey (metadata record) or control type (control record)
    # tagged fields of the record's body its declaration does not have (a newer Kafka's): JSON
    # [{"tag": n, "data": base64}, ...] in tag order; null when there are none (README "Newer Kafka")
    pa.field("unknown_tagged_fields", pa.string()),
    pa.field("data_json", pa.string(), nullable=False),  # the record's "data" exactly as kafka-dump-log prints it
]
SCHEMA = pa.schema(FRAMING + TYPED)

# bronze rows as an in-process replay reads them (records_table(lean=True): replay.read_plan with
# partition_json=False): the record types as codes over their few names, as a Spark task's scan of bronze reads them
# (transforms/silver).  On a 1.15 M-record log: 28 MB of names not made (a command's first call pays for each fresh
# byte), and a test of the type is one comparison per distinct name.
# So are the cluster, the file and its kind, one value over a chunk: a code per row, all 0 (zero pages a first call
# never writes), instead of the file's name spelled on every row (66 MB of a 1.15 M-record log's 309 MB).
_REPLAY_CODES = frozenset(("record_type", "cluster", "source_file", "source_kind"))
REPLAY_SCHEMA = pa.schema([f.with_type(STRING_CODES) if f.name in _REPLAY_CODES else f for f in SCHEMA])

QUARANTINE_SCHEMA = pa.schema([
    pa.field("cluster", pa.string(), nullable=False),
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("source_kind", pa.string(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),
    pa.field("length", pa.int64(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("message", pa.string(), nullable=False),
])


class _Same:
    """A bronze column that is the decoded field ``key`` as it is (placed straight from where the compiled decoder
    found it, when it did: codec/placed.py)."""

    def __init__(self, key: str):
        self.key = key

    def __call__(self, cols):
        return cols.get(self.key)


_same = _Same


def _located(cols) -> bool:
    """A group's columns are the compiled decoder's (``flat.Located``): that module (and numba) is loaded only once
    it ran, which a small log's command never pays for."""
    flat = sys.modules.get("controller_core.codec.flat")
    return flat is not None and isinstance(cols, flat.Located)


# (Arrays, not Python scalars, are combined below: see jsonout._concat on why.)
def _fence_flag(cols):
    # BrokerRegistrationChangeRecord.fenced: 1 fence, -1 unfence, 0 no change
    v = cols["fenced"].to_numpy()
    return from_numpy(v == 1, valid=v != 0)


def _cs_flag(cols):
    # BrokerRegistrationChangeRecord.inControlledShutdown: 1 enter, 0 no change (nothing leaves it)
    v = cols.get("inControlledShutdown")
    if v is None:
        return None
    v = v.to_numpy()
    return from_numpy(v == 1, valid=v == 1)


def _nonempty(key):
    # an empty list means "unchanged" in BrokerRegistrationChangeRecord.logDirs
    def f(cols):
        v = cols.get(key)
        if v is None:
            return None
        keep = pc.list_value_length(v).to_numpy(zero_copy_only=False) > 0
        return pc.if_else(from_numpy(keep), v, pa.nulls(len(v), v.type))
    return f


def _const(value, typ):
    return lambda cols: from_numpy(np.full(len(next(iter(cols.values()))), value)).cast(typ) if cols else None


_PARTITION = {
    "topic_id": _same("topicId"), "partition_id": _same("partitionId"), "replicas": _same("replicas"),
    "isr": _same("isr"), "removing_replicas": _same("removingReplicas"), "adding_replicas": _same("addingReplicas"),
    "leader": _same("leader"), "leader_recovery_state": _same("leaderRecoveryState"),
    "directories": _same("directories"), "eligible_leader_replicas": _same("eligibleLeaderReplicas"),
    "last_known_elr": _same("lastKnownElr"),
}
# record type -> bronze column -> how to get it from the decoded columns
COLUMN_MAP = {
    "PARTITION_RECORD": {**_PARTITION, "leader_epoch": _same("leaderEpoch"), "partition_epoch": _same("partitionEpoch")},
    "PARTITION_CHANGE_RECORD": _PARTITION,
    "TOPIC_RECORD": {"topic_id": _same("topicId"), "topic_name": _same("name")},
    "REMOVE_TOPIC_RECORD": {"topic_id": _same("topicId")},
    "CLEAR_ELR_RECORD": {"topic_name": _same("topicName")},
    "REGISTER_BROKER_RECORD": {
        "broker_id": _same("brokerId"), "broker_epoch": _same("brokerEpoch"), "incarnation_id": _same("incarnationId"),
        "fenced": _same("fenced"), "in_controlled_shutdown": _same("inControlledShutdown"),
        "log_dirs": _same("logDirs"), "rack": _same("rack"),
    },
    "BROKER_REGISTRATION_CHANGE_RECORD": {
        "broker_id": _same("brokerId"), "broker_epoch": _same("brokerEpoch"), "fenced": _fence_flag,
        "in_controlled_shutdown": _cs_flag, "log_dirs": _nonempty("logDirs"),
    },
    "FENCE_BROKER_RECORD": {"broker_id": _same("id"), "broker_epoch": _same("epoch"), "fenced": _const(True, pa.bool_())},
    "UNFENCE_BROKER_RECORD": {"broker_id": _same("id"), "broker_epoch": _same("epoch"),
                              "fenced": _const(False, pa.bool_())},
    "UNREGISTER_BROKER_RECORD": {"broker_id": _same("brokerId"), "broker_epoch": _same("brokerEpoch")},
    "REGISTER_CONTROLLER_RECORD": {"controller_id": _same("controllerId"), "incarnation_id": _same("incarnationId")},
    "UNREGISTER_CONTROLLER_RECORD": {"controller_id": _same("controllerId")},
    "LEADER_CHANGE": {"leader_id": _same("leaderId")},
    "CONFIG_RECORD": {"config_resource_type": _same("resourceType"), "config_resource_name": _same("resourceName"),
                      "config_name": _same("name"), "config_value": _same("value")},
    "FEATURE_LEVEL_RECORD": {"feature_name": _same("name"), "feature_level": _same("featureLevel")},
}


def records_table(chunk: DecodedChunk, cluster: str, source_file: str, source_kind: str,
                  without_json: frozenset[str] = frozenset(), lean: bool = False) -> pa.Table:
    """Bronze rows for every decoded record of a chunk, in file order.  ``without_json``: record types whose
    ``data_json`` is left null (a replay reads partition records from their typed columns).  ``lean``: the rows as
    a replay reads them (:data:`REPLAY_SCHEMA`)."""
    n = len(chunk)
    schema = REPLAY_SCHEMA if lean else SCHEMA
    if n == 0:
        return schema.empty_table()
    typed: dict[str, list] = {f.name: [] for f in TYPED}
    order = []
    for g in chunk.groups:
        order.append(g.rows)
        mapping = COLUMN_MAP.get(g.rdef.type_name, {})
        for f in TYPED:
            if f.name == "data_json":
                continue  # written for the whole chunk in file order below
            if f.name == "unknown_tagged_fields":
                arr = g.unknown_tagged_fields
            elif f.name == "record_type_id":
                arr = from_numpy(chunk.type_id[g.rows].astype(np.int32))
            else:
                get = mapping.get(f.name)
                if isinstance(get, _Same) and _located(g.columns):  # placed from where it lies
                    typed[f.name].append((g.columns, get.key) if get.key in g.columns else None)
                    continue
                arr = get(g.columns) if get else None
            typed[f.name].append(None if arr is None else arr.cast(f.type))
    place = _Placement(order, n)
    present = distinct(chunk.type_code)
    type_names = strings([TYPE_NAMES[int(c)] for c in present])
    lookup = np.zeros(int(present[-1] - present[0]) + 1, np.int32)
    lookup[present - present[0]] = np.arange(len(present), dtype=np.int32)
    codes = lookup[chunk.type_code - present[0]]
    if lean:  # one value each, coded (REPLAY_SCHEMA): the three share one buffer of zeros
        zeros = from_numpy(np.zeros(n, np.int32))
        same = {name: pa.DictionaryArray.from_arrays(zeros, strings([value]))
                for name, value in (("cluster", cluster), ("source_file", source_file), ("source_kind", source_kind))}
    else:
        same = {"cluster": repeat_str(cluster, n), "source_file": repeat_str(source_file, n),
                "source_kind": repeat_str(source_kind, n)}
    columns = {
        **same,
        "offset": from_numpy(chunk.offset),
        "position": from_numpy(chunk.position),
        "batch_position": from_numpy(chunk.batch_position),
        "batch_base_offset": from_numpy(chunk.batch_base_offset),
        "batch_timestamp": from_numpy(chunk.batch_timestamp).cast(TS),
        "timestamp": from_numpy(chunk.timestamp).cast(TS),
        "batch_leader_epoch": from_numpy(chunk.batch_leader_epoch),
        "is_control": from_numpy(chunk.is_control),
        "record_type": (pa.DictionaryArray.from_arrays(from_numpy(codes), type_names) if lean
                        else _names(present, codes, type_names)),
        "record_version": from_numpy(chunk.version),
    }
    for f in TYPED:
        columns[f.name] = (chunk_json(chunk.groups, n, without_json) if f.name == "data_json"
                           else place(typed[f.name], f.type))
    return pa.Table.from_pydict(columns, schema=schema)


def _names(present: np.ndarray, codes: np.ndarray, type_names: pa.Array) -> pa.Array:
    """Each record's type name (``type_names[codes]``) as a string column, spelled in one compiled pass."""
    made = spelled([TYPE_NAMES[int(c)].encode() for c in present], codes)
    if made is None:
        return type_names.take(from_numpy(codes))
    return pa.StringArray.from_buffers(len(codes), pa.py_buffer(made[0]), pa.py_buffer(made[1]))


def by_type(records: pa.Table, values: dict, default, dtype) -> np.ndarray:
    """``values[record_type]`` (``default`` for a type not in it, or a null type) of every row of a bronze table, as
    ``dtype``.  From the type numbers (record_type_id, is_control) through a table indexed by them -- two integer
    columns -- when every row has them; from the type names otherwise (a lake written before record_type_id, a
    table that lacks it, the seed rows of an incremental replay): one dictionary of every row's string, 5 ms of a
    230 k-record replay.  The one place that reads a record's type off bronze rows as a number."""
    from controller_core.records import BY_API_KEY, BY_CONTROL_TYPE, BY_TYPE_NAME

    names = records.schema.names
    if ("record_type_id" in names and "is_control" in names and records.num_rows
            and not records.column("record_type_id").null_count and not records.column("is_control").null_count
            and not records.column("record_type").null_count
            and all(t in BY_TYPE_NAME or t == UNKNOWN_RECORD for t in values)):
        # a declared number always carries its type's name; any other (the decoder's UNKNOWN_RECORD) the last column
        width = max(max(BY_API_KEY), max(BY_CONTROL_TYPE)) + 2
        table = np.full((2, width), values.get(UNKNOWN_RECORD, default), dtype)
        for side, declared in enumerate((BY_API_KEY, BY_CONTROL_TYPE)):
            for number, r in declared.items():
                table[side, number] = values.get(r.type_name, default)
        return table.ravel()[_type_slots(records, width)]
    col = records.column("record_type")
    chunks = [c for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]) if len(c)]
    if not chunks:
        return np.zeros(0, dtype)
    enc = pa.chunked_array([c if pa.types.is_dictionary(c.type) else c.dictionary_encode()
                            for c in chunks]).unify_dictionaries()
    lut = np.array([values.get(t, default) for t in enc.chunk(0).dictionary.to_pylist()] + [default], dtype)
    return np.concatenate([lut[np.asarray(c.indices.fill_null(len(lut) - 1).to_numpy(zero_copy_only=False),
                                          np.int64)] for c in enc.chunks])


# the type slots of the last few tables read (a replay asks for its rows by type four times, 7 ms each on a
# 1.15 M-record log, from the same immutable table): id -> (weak reference, width, slots); an entry leaves with
# its table
_SLOTS: dict[int, tuple] = {}
_SLOTS_LOCK = threading.Lock()


def _type_slots(records: pa.Table, width: int) -> np.ndarray:
    """Each row's index into a (control?, type number) table of ``width`` columns flattened: ``is_control * width``
    plus the type number (``width - 1`` for a number outside the declared ones)."""
    got = _SLOTS.get(id(records))
    if got is not None and got[0]() is records and got[1] == width:
        return got[2]
    type_id = column_ints(records.column("record_type_id"))
    last = width - 1
    slots = np.where((type_id >= 0) & (type_id < last), type_id, last).astype(np.intp, copy=False)
    slots += column_ints(records.column("is_control"), 0, np.intp) * width
    key = id(records)
    with _SLOTS_LOCK:  # a replay asks from two threads at once (controller_core/threads.py)
        while len(_SLOTS) >= 4:
            _SLOTS.pop(next(iter(_SLOTS)))
        _SLOTS[key] = (weakref.ref(records, lambda _: _SLOTS.pop(key, None)), width, slots)  # gone with the table
    return slots


class _Placement:
    """Puts the per-group pieces of a column (``None``: the group has no such field) into file order.
    Most typed columns are held by no group or one group of a chunk (a broker field in a chunk of partition
    changes): those are one null array or one take of the group's values, not a concatenation with null
    pieces and a take of the whole."""

    def __init__(self, order: list, n: int):
        self.order, self.n = order, n
        # the compiled placement from as many rows as the decoder's compiled loops (loading it costs more below)
        self.compiled = n >= COMPILED_MIN_RECORDS
        self._inverse = None
        self._index: dict[int, pa.Array | None] = {}  # per group: where its rows go (None: all, in order)

    def __call__(self, pieces: list, typ: pa.DataType) -> pa.Array:
        held = [k for k, arr in enumerate(pieces) if arr is not None]
        if not held:
            return nulls(self.n, typ)
        located = [k for k in held if isinstance(pieces[k], tuple)]  # (Located, key): fields not decoded yet
        if located:
            if len(located) == len(held):
                from controller_core.codec import placed

                out = placed.place([(self.order[k], *pieces[k]) for k in held], self.n, typ)
                if out is not None:
                    return out
            pieces = list(pieces)
            for k in located:
                cols, key = pieces[k]
                pieces[k] = cols[key].cast(typ)
        if len(held) == 1:
            k = held[0]
            if k not in self._index:
                self._index[k] = self._group_index(np.asarray(self.order[k], np.int64))
            if self._index[k] is None:  # the only group, in file order: its column as it is
                return pieces[k]
        if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
            return self._scatter([(self.order[k], pieces[k]) for k in held], typ)
        if self.compiled:  # strings and integer lists: one compiled copy per group (codec/scatter.py)
            from controller_core.codec import scatter

            placed = scatter.place([(self.order[k], pieces[k]) for k in held], self.n, typ)
            if placed is not None:
                return placed
        if len(held) == 1:
            return pieces[held[0]].take(self._index[held[0]])
        if self._inverse is None:
            rows = np.concatenate(self.order)
            inverse = np.empty(self.n, np.int64)
            inverse[rows] = np.arange(self.n)
            self._inverse = from_numpy(inverse)
        return pa.concat_arrays([nulls(len(self.order[k]), typ) if arr is None else arr
                                 for k, arr in enumerate(pieces)]).take(self._inverse)

    def _scatter(self, held: list, typ: pa.DataType) -> pa.Array:
        """A fixed-width column: each group's values written at its rows of one NumPy array (an Arrow take
        with a null index costs several times as much); rows no group holds are null."""
        dtype = np.dtype(bool) if pa.types.is_boolean(typ) else NUMPY_TYPES[typ]
        out = np.zeros(self.n, dtype)
        valid = np.zeros(self.n, bool)
        for rows, arr in held:
            out[rows] = arr.to_numpy(zero_copy_only=False) if arr.null_count == 0 else \
                arr.fill_null(False if dtype == bool else 0).to_numpy(zero_copy_only=False)
            valid[rows] = True if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
        return from_numpy(out, valid)

    def _group_index(self, rows: np.ndarray) -> pa.Array | None:
        if len(rows) == self.n and (rows[1:] > rows[:-1]).all():
            return None  # the only group, in file order
        at = np.zeros(self.n, np.int64)
        valid = np.zeros(self.n, bool)
        at[rows] = np.arange(len(rows))
        valid[rows] = True
        return from_numpy(at, valid)  # a null index takes a null


def quarantine_table(entries: list[Quarantine], cluster: str, source_kind: str) -> pa.Table:
    return pa.Table.from_pylist(
        [{"cluster": cluster, "source_file": q.file, "source_kind": source_kind, "position": q.position,
          "length": q.length, "reason": q.reason, "message": q.message} for q in entries],
        schema=QUARANTINE_SCHEMA)


# ------------------------------------------------------------------------------------------ newer Kafka
def chunk_has_newer(chunk: DecodedChunk) -> bool:
    """Whether a decoded chunk holds anything a newer Kafka wrote (cheap: no row is looked at)."""
    from controller_core.codec.logfile import UNKNOWN_CODE

    return any(g.layout != g.version or g.unknown_tagged_fields is not None or g.rdef.type_name == UNKNOWN_RECORD
               for g in chunk.groups) or bool((chunk.type_code == UNKNOWN_CODE).any())


class NewerKafka:
    """What a newer Kafka wrote that this build reads only in part (README "Newer Kafka"), counted per
    (record type, type number, version) over bronze tables: records of an undeclared apiKey / control type
    (kept as UNKNOWN_RECORD), versions above the newest declared (read with the newest layout), tagged fields
    not declared (kept in ``unknown_tagged_fields``).  ``lines()``: one warning each, for stderr."""

    def __init__(self):
        self.groups: dict[tuple, dict] = {}

    def add(self, table: pa.Table) -> None:
        from controller_core.records import BY_TYPE_NAME

        if table is None or table.num_rows == 0 or not self._may_hold_newer(table):
            return
        cols = ["record_type", "record_type_id", "record_version", "is_control"]
        # the replay's rows code their record types and files per chunk (REPLAY_SCHEMA): grouping or comparing
        # dictionaries that differ from chunk to chunk is not something Arrow does, so these columns are read plain
        table = plain(table.select(cols + ["offset", "unknown_tagged_fields", "source_file"]))
        agg = table.group_by(cols).aggregate([("offset", "min"), ("offset", "count"),
                                              ("unknown_tagged_fields", "count")])
        for g in agg.to_pylist():
            rdef = BY_TYPE_NAME.get(g["record_type"])
            hi = rdef.valid_versions.hi if rdef is not None else None
            newer = rdef is not None and hi is not None and g["record_version"] > hi
            if not (g["record_type"] == UNKNOWN_RECORD or newer or g["unknown_tagged_fields_count"]):
                continue
            key = tuple(g[c] for c in cols)
            sel = table.filter(pc.and_(pc.equal(table.column("record_type"), g["record_type"]),
                                       pc.equal(table.column("record_version"), g["record_version"])))
            sel = sel.filter(pc.equal(sel.column("record_type_id"), g["record_type_id"]))
            first = sel.filter(pc.equal(sel.column("offset"), g["offset_min"])).slice(0, 1).to_pylist()[0]
            tags: set[int] = set()
            for text in sel.column("unknown_tagged_fields").drop_null().unique().to_pylist():
                tags.update(t["tag"] for t in json.loads(text))
            self._put(key, {"type": g["record_type"], "typeId": g["record_type_id"], "version": g["record_version"],
                            "control": g["is_control"], "layout": hi if newer else None, "count": g["offset_count"],
                            "firstOffset": g["offset_min"], "file": first["source_file"], "tags": tags})

    @staticmethod
    def _may_hold_newer(table: pa.Table) -> bool:
        """False when no row can be newer than this build (every type declared, no version above its newest, no
        unknown tag): a table gather per row, where grouping every row by type and version was most of this
        step's cost on the logs that hold nothing newer (nearly all)."""
        from controller_core.records import BY_TYPE_NAME

        names = table.schema.names
        if "unknown_tagged_fields" not in names or "record_version" not in names:
            return True
        if table.column("unknown_tagged_fields").null_count != table.num_rows:
            return True
        newest = {t: (r.valid_versions.hi if r.valid_versions.hi is not None else 2**31) for t, r in BY_TYPE_NAME.items()}
        hi = by_type(table, newest, -1, np.int64)  # an undeclared type: -1
        version = column_ints(table.column("record_version"), 2**31)
        return bool((hi < 0).any() or (version > hi).any())

    def _put(self, key: tuple, g: dict) -> None:
        have = self.groups.get(key)
        if have is None:
            self.groups[key] = g
            return
        have["count"] += g["count"]
        have["tags"] |= g["tags"]
        if g["firstOffset"] < have["firstOffset"]:
            have["firstOffset"], have["file"] = g["firstOffset"], g["file"]

    def state(self) -> list[dict]:
        """The counts so far as JSON-ready dicts (a Spark task's share, for :meth:`merge` in the driver)."""
        return [dict(g, key=list(k), tags=sorted(g["tags"])) for k, g in self.groups.items()]

    def merge(self, state: list[dict]) -> None:
        for g in state:
            self._put(tuple(g["key"]), {**{k: v for k, v in g.items() if k != "key"}, "tags": set(g["tags"])})

    def lines(self) -> list[str]:
        out = []
        for g in sorted(self.groups.values(), key=lambda g: g["firstOffset"]):
            where = f"first at offset {g['firstOffset']} in {g['file']}"
            n = f"{g['count']} record{'s' if g['count'] != 1 else ''}"
            if g["type"] == UNKNOWN_RECORD:
                what = "control type" if g["control"] else "apiKey"
                out.append(f"{n} of {what} {g['typeId']} (version {g['version']}) this build does not know, {where}: "
                           f"kept as {UNKNOWN_RECORD} (type number and value bytes), not replayed")
                continue
            read = f"read with the newest known layout (v{g['layout']})" if g["layout"] is not None else "read"
            tags = (f"; tagged fields this build does not know (tags {','.join(map(str, sorted(g['tags'])))}) kept "
                    "in unknown_tagged_fields") if g["tags"] else ""
            n = f"{g['count']} {g['type']} v{g['version']} record{'s' if g['count'] != 1 else ''}"
            out.append(f"{n} (newer than this build knows), {where}: {read}{tags}" if g["layout"] is not None else
                       f"{n}, {where}: {read}{tags}")
        return out
