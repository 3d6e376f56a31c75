"""The vectorized controller core end to end: bronze rows -> partition history (fold), cluster
timelines, primary triggers, vectorized recomputation; the scalar reference for whatever is left.

``explain(bronze, history, brokers, topics)`` labels every PartitionChangeRecord with its primary
trigger and whether the vectorized builder reproduces it.  ``verify_tables`` then runs the scalar
reference (:func:`controller_core.verify.verify_batches`) only over the partitions holding records
the fast path could not explain, with the cluster-level records they depend on, so its divergences
are the scalar reference's.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core import recompute as V
from controller_core.replay import Rec

PCR = "PARTITION_CHANGE_RECORD"
_TYPED = ("record_type", "topic_id", "partition_id", "replicas", "isr", "removing_replicas", "adding_replicas",
          "leader", "leader_epoch", "partition_epoch", "leader_recovery_state", "directories",
          "eligible_leader_replicas", "last_known_elr")
# broker events: (record type, data key, value) -> (trigger, the broker record comes after its changes?)
_AFTER, _BEFORE = 1, 0


def _np(col, dtype=None):
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    out = col.to_numpy(zero_copy_only=False)
    return out if dtype is None else out.astype(dtype)


def _broker_events(bronze: pa.Table, brokers: pa.Table):
    """(batch, offset, trigger, broker, side) of the broker records that trigger partition changes."""
    rtype = _np(bronze.column("record_type")).astype(object)
    data = bronze.column("data_json")
    off = _np(bronze.column("offset"), np.int64)
    batch = _np(bronze.column("batch_base_offset"), np.int64)
    idx = np.flatnonzero(np.isin(rtype, ["BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD",
                                         "UNFENCE_BROKER_RECORD", "UNREGISTER_BROKER_RECORD",
                                         "REGISTER_BROKER_RECORD"]))
    # previous incarnation of each broker, to tell a new incarnation (unclean shutdown) from an amend
    b_id = _np(brokers.column("broker_id"), np.int64)
    b_off = _np(brokers.column("offset"), np.int64)
    b_inc = _np(brokers.column("incarnation_id")).astype(object)
    order = np.lexsort((b_off, b_id))
    keys = b_id[order] * V.BIG + b_off[order]
    ev = []
    for i in idx.tolist():
        d = json.loads(data[i].as_py())
        t = rtype[i]
        if t == "BROKER_REGISTRATION_CHANGE_RECORD":
            b = d["brokerId"]
            if d.get("fenced", 0) == 1:
                ev.append((batch[i], off[i], V.FENCE, b, _AFTER))
            elif d.get("fenced", 0) == -1:
                ev.append((batch[i], off[i], V.UNFENCE, b, _BEFORE))
            if d.get("inControlledShutdown", 0) == 1:
                ev.append((batch[i], off[i], V.FENCE, b, _BEFORE))
        elif t == "FENCE_BROKER_RECORD":
            ev.append((batch[i], off[i], V.FENCE, d["id"], _AFTER))
        elif t == "UNFENCE_BROKER_RECORD":
            ev.append((batch[i], off[i], V.UNFENCE, d["id"], _BEFORE))
        elif t == "UNREGISTER_BROKER_RECORD":
            ev.append((batch[i], off[i], V.FENCE, d["brokerId"], _AFTER))
        else:
            b = d["brokerId"]
            j = np.searchsorted(keys, b * V.BIG + off[i], side="left") - 1
            prev = b_inc[order][j] if j >= 0 and b_id[order][j] == b else None
            if prev is not None and prev != d["incarnationId"]:
                ev.append((batch[i], off[i], V.UNCLEAN_SHUTDOWN, b, _AFTER))
    return ev


def explain(bronze: pa.Table, history: pa.Table, brokers: pa.Table, topics: pa.Table) -> pa.Table:
    """Per PartitionChangeRecord: offset, topic_id, partition_id, trigger, matched, modelled."""
    h_type = _np(history.column("record_type")).astype(object)
    h_orphan = _np(history.column("orphan"), bool)
    idx = np.flatnonzero((h_type == PCR) & ~h_orphan)
    n = len(idx)
    out_schema = pa.schema([("offset", pa.int64()), ("topic_id", pa.string()), ("partition_id", pa.int32()),
                            ("trigger", pa.string()), ("matched", pa.bool_()), ("modelled", pa.bool_())])
    if n == 0:
        return out_schema.empty_table()
    state_cols = ["replicas", "isr", "eligible_leader_replicas", "last_known_elr", "leader", "leader_recovery_state",
                  "adding_replicas", "removing_replicas"]
    prev = history.select(state_cols).take(pa.array(idx - 1))
    cur = history.select(["offset", "topic_id", "partition_id"]).take(pa.array(idx))
    offset = _np(cur.column("offset"), np.int64)

    # ---- the state before each record
    R, rl, _ = V.padded(prev.column("replicas"))
    w = R.shape[1]
    before = {"replicas": R, "replicas_len": rl, "leader": _np(prev.column("leader"), np.int64),
              "lrs": _np(prev.column("leader_recovery_state"), np.int64)}
    for key, col in (("isr", "isr"), ("elr", "eligible_leader_replicas"), ("lke", "last_known_elr")):
        mat, ln, _ = V.padded(prev.column(col))
        before[key], before[key + "_len"] = V._fit(mat, max(w, mat.shape[1])), ln
    before["adding_len"] = V.padded(prev.column("adding_replicas"))[1]
    before["removing_len"] = V.padded(prev.column("removing_replicas"))[1]

    # ---- the record as written (bronze row of the same offset)
    b_off = _np(bronze.column("offset"), np.int64)
    b_is_pcr = _np(pc.equal(bronze.column("record_type"), PCR), bool)
    pcr_rows = np.flatnonzero(b_is_pcr)
    pos = pcr_rows[np.searchsorted(b_off[pcr_rows], offset)]
    rows = bronze.select(["leader", "leader_recovery_state", "isr", "eligible_leader_replicas", "last_known_elr",
                          "replicas", "removing_replicas", "adding_replicas", "directories",
                          "batch_base_offset"]).take(pa.array(pos))
    rec = {"leader": _np(pc.fill_null(rows.column("leader"), -2), np.int64),
           "lrs": _np(pc.fill_null(rows.column("leader_recovery_state"), -1), np.int64)}
    for key, col in (("isr", "isr"), ("elr", "eligible_leader_replicas"), ("lke", "last_known_elr")):
        rec[key], rec[key + "_len"], rec[key + "_valid"] = V.padded(rows.column(col))
    other = np.zeros(n, bool)
    for col in ("replicas", "removing_replicas", "adding_replicas", "directories"):
        other |= _np(rows.column(col).is_valid(), bool)
    rec["other_written"] = other
    batch = _np(rows.column("batch_base_offset"), np.int64)

    # ---- primary trigger: the single broker event of the record's batch on the right side
    trig = np.full(n, V.ALTER)
    broker = np.full(n, -1, np.int64)
    events = _broker_events(bronze, brokers)
    if events:
        ev = np.array(events, dtype=np.int64)
        ev = ev[np.argsort(ev[:, 0], kind="stable")]
        lo = np.searchsorted(ev[:, 0], batch, side="left")
        hi = np.searchsorted(ev[:, 0], batch, side="right")
        in_isr_or_elr = lambda b: V.member(before["isr"], b) | V.member(before["elr"], b)  # noqa: E731
        chosen = np.zeros(n, bool)
        ambiguous = np.zeros(n, bool)
        for k in range(int((hi - lo).max(initial=0))):
            has = lo + k < hi
            e = ev[np.minimum(lo + k, len(ev) - 1)]
            side_ok = np.where(e[:, 4] == _AFTER, e[:, 1] > offset, e[:, 1] < offset)
            # an event concerns this partition: unfence (every leaderless partition) or its broker is in
            # the ISR / ELR the trigger removes it from
            relevant = has & side_ok & ((e[:, 2] == V.UNFENCE) | in_isr_or_elr(e[:, 3]))
            ambiguous |= relevant & chosen
            take = relevant & ~chosen
            trig = np.where(take, e[:, 2], trig)
            broker = np.where(take, e[:, 3], broker)
            chosen |= take
        trig = np.where(ambiguous, -1, trig)  # two events could explain it: the scalar reference decides
    # no broker event: an election if the leader moved without an ISR request, else AlterPartition
    plain = trig == V.ALTER
    leader_moved = rec["leader"] != -2
    unclean_shape = leader_moved & rec["isr_valid"] & (rec["isr_len"] == 1) & (rec["isr"][:, 0] == rec["leader"]) \
        & (rec["lrs"] == 1)
    trig = np.where(plain & unclean_shape, V.UNCLEAN_ELECTION,
                    np.where(plain & leader_moved & ~rec["isr_valid"], V.PREFERRED_ELECTION, trig))

    # ---- topic settings just before each record (topic ids as dictionary codes shared by both sides)
    ids = pc.dictionary_encode(pa.chunked_array(list(topics.column("topic_id").chunks) +
                                                list(cur.column("topic_id").chunks), pa.string()).combine_chunks())
    codes = _np(ids.indices, np.int64)
    t_code, r_code = codes[:topics.num_rows], codes[topics.num_rows:]
    t_off = _np(topics.column("offset"), np.int64)
    t_order = np.lexsort((t_off, t_code))
    t_keys = t_code[t_order] * V.BIG + t_off[t_order]
    j = V.lookup(t_keys, r_code * V.BIG + offset)
    found = (j >= 0) & (t_code[t_order][np.maximum(j, 0)] == r_code)
    tj = t_order[np.maximum(j, 0)]

    def tcol(name, default, dtype):
        vals = _np(pc.fill_null(topics.column(name), default), dtype)
        return np.where(found, vals[tj], default)

    mv = tcol("metadata_version", 0, np.int64)
    ctx_elr = tcol("elr_enabled", False, bool)
    m = tcol("effective_min_isr", 1, np.int64)

    # ---- brokers active just before each record, per replica position
    b_id = _np(brokers.column("broker_id"), np.int64)
    b_off2 = _np(brokers.column("offset"), np.int64)
    b_order = np.lexsort((b_off2, b_id))
    b_keys = b_id[b_order] * V.BIG + b_off2[b_order]
    alive = (_np(pc.fill_null(brokers.column("registered"), False), bool)
             & ~_np(pc.fill_null(brokers.column("fenced"), True), bool)
             & ~_np(pc.fill_null(brokers.column("in_controlled_shutdown"), False), bool))[b_order]
    q = np.where(R >= 0, R.astype(np.int64), 0) * V.BIG + offset[:, None]
    jb = V.lookup(b_keys, q.ravel()).reshape(q.shape)
    okb = (jb >= 0) & (b_id[b_order][np.maximum(jb, 0)] == R)
    active = okb & alive[np.maximum(jb, 0)] & (R >= 0)

    ctx = V.Context(trigger=np.maximum(trig, 0), broker=broker, mv=mv, elr_on=ctx_elr, min_isr=m,
                    check_lkl=mv >= 22, active=active)
    res = V.recompute(before, rec, ctx)
    matched = res.matched & (trig >= 0)
    # trigger labels such as "fence(3)": formatted once per distinct (trigger, broker)
    key = np.where(trig >= 0, trig, len(V.TRIGGER_NAMES)) * (1 << 32) + (broker + 1)
    uniq, inverse = np.unique(key, return_inverse=True)
    names = V.TRIGGER_NAMES + ["?"]
    texts = [names[k >> 32] + (f"({(k & 0xFFFFFFFF) - 1})" if (k & 0xFFFFFFFF) else "") for k in uniq.tolist()]
    label = pa.array(texts, pa.string()).take(pa.array(inverse.astype(np.int64)))
    return pa.table({"offset": offset, "topic_id": cur.column("topic_id"),
                     "partition_id": _np(cur.column("partition_id"), np.int32),
                     "trigger": label, "matched": matched, "modelled": res.modelled & (trig >= 0)},
                    schema=out_schema)


def record_data(row: dict) -> dict:
    """A PartitionRecord / PartitionChangeRecord's data (Kafka JSON form) from its typed bronze
    columns, for rows that travel without ``data_json``."""
    d = {"partitionId": row["partition_id"], "topicId": row["topic_id"]}
    if row["record_type"] == "PARTITION_RECORD":
        d.update(replicas=row["replicas"], isr=row["isr"], removingReplicas=row["removing_replicas"] or [],
                 addingReplicas=row["adding_replicas"] or [], leader=row["leader"], leaderEpoch=row["leader_epoch"],
                 partitionEpoch=row["partition_epoch"])
        if row["leader_recovery_state"]:
            d["leaderRecoveryState"] = row["leader_recovery_state"]
        for key, col in (("directories", "directories"), ("eligibleLeaderReplicas", "eligible_leader_replicas"),
                         ("lastKnownElr", "last_known_elr")):
            if row[col]:
                d[key] = row[col]
        return d
    for key, col in (("isr", "isr"), ("replicas", "replicas"), ("removingReplicas", "removing_replicas"),
                     ("addingReplicas", "adding_replicas"), ("directories", "directories"),
                     ("eligibleLeaderReplicas", "eligible_leader_replicas"), ("lastKnownElr", "last_known_elr")):
        if row[col] is not None:
            d[key] = row[col]
    if row["leader"] is not None and row["leader"] != -2:
        d["leader"] = row["leader"]
    if row["leader_recovery_state"] is not None and row["leader_recovery_state"] != -1:
        d["leaderRecoveryState"] = row["leader_recovery_state"]
    return d


def scalar_batches(bronze: pa.Table, partitions: set[tuple[str, int]] | None) -> list[list[Rec]]:
    """The replay batches the scalar reference needs for ``partitions`` (None: all): every
    cluster-level record and the partition records of those partitions, in log order."""
    pid = bronze.column("partition_id")
    tid = bronze.column("topic_id")
    rtype = bronze.column("record_type").to_pylist()
    keep = []
    for i, (t, p, r) in enumerate(zip(tid.to_pylist(), pid.to_pylist(), rtype)):
        if r in ("PARTITION_RECORD", PCR):
            if partitions is None or (t, p) in partitions:
                keep.append(i)
        elif r not in ("NO_OP_RECORD",):
            keep.append(i)
    rows = bronze.take(pa.array(keep, pa.int64()))
    cols = {c: rows.column(c).to_pylist() for c in ("offset", "timestamp", "batch_base_offset", "record_type",
                                                      "record_version", "data_json", "source_file")}
    typed = None
    batches: list[list[Rec]] = []
    key = None
    for i in range(rows.num_rows):
        k = (cols["source_file"][i], cols["batch_base_offset"][i])
        ts = cols["timestamp"][i]
        text = cols["data_json"][i]
        if text is None:  # a partition record sent without its JSON: rebuild it from the typed columns
            if typed is None:
                typed = {c: rows.column(c).to_pylist() for c in _TYPED}
            data = record_data({c: typed[c][i] for c in _TYPED})
        else:
            data = json.loads(text)
        r = Rec(cols["offset"][i], int(ts.timestamp() * 1000) if ts else 0, cols["batch_base_offset"][i],
                cols["record_type"][i], cols["record_version"][i], data, cols["source_file"][i])
        if batches and k == key:
            batches[-1].append(r)
        else:
            batches.append([r])
        key = k
    return batches


def replay_table(log_dir) -> tuple[pa.Table, frozenset[str]]:
    """The bronze rows a replay of a log directory reads, in replay order; rows of the starting
    snapshot are dated at the snapshot's end offset - 1 (the state they describe)."""
    from controller_core.bronze import records_table
    from controller_core.codec.logfile import iter_chunks
    from controller_core.logdir import SEGMENT, SNAPSHOT
    from controller_core.replay import plan

    p = plan(log_dir)
    parts = []
    for lf in p.files:
        for chunk in iter_chunks(str(lf.path), lf.label, first_offset=lf.first_offset):
            if not len(chunk):
                continue
            t = records_table(chunk, "", lf.label, lf.kind)
            if lf.kind == SEGMENT and p.start_offset:
                t = t.filter(pc.greater_equal(t.column("offset"), p.start_offset))
            if lf.kind == SNAPSHOT:
                t = t.set_column(t.schema.get_field_index("offset"), "offset",
                                 pa.array(np.full(t.num_rows, p.start_offset - 1, np.int64)))
            parts.append(t)
    snaps = frozenset(f.label for f in p.files if f.kind == SNAPSHOT)
    return pa.concat_tables(parts) if parts else None, snaps


def cluster_level_recs(bronze: pa.Table) -> list[Rec]:
    """Records the timelines need: everything but partition records, plus partition 0's."""
    rtype = _np(bronze.column("record_type")).astype(object)
    pid = _np(pc.fill_null(bronze.column("partition_id"), -1), np.int64)
    keep = np.flatnonzero(~np.isin(rtype, ["NO_OP_RECORD", "PARTITION_RECORD", PCR]) | (pid == 0))
    rows = bronze.take(pa.array(keep))
    cols = {c: rows.column(c).to_pylist() for c in ("offset", "timestamp", "batch_base_offset", "record_type",
                                                      "record_version", "data_json", "source_file")}
    typed = None
    out = []
    for i in range(rows.num_rows):
        text = cols["data_json"][i]
        if text is None:  # a partition record without its JSON (e.g. an incremental replay's seed state)
            if typed is None:
                typed = {c: rows.column(c).to_pylist() for c in _TYPED}
            data = record_data({c: typed[c][i] for c in _TYPED})
        else:
            data = json.loads(text)
        out.append(Rec(cols["offset"][i], int(cols["timestamp"][i].timestamp() * 1000), cols["batch_base_offset"][i],
                       cols["record_type"][i], cols["record_version"][i], data, cols["source_file"][i]))
    return out


def fast_verify(log_dir, checker=None):
    """Replay + recompute of a log directory through the vectorized core (scalar reference only for
    the partitions it cannot explain).  Returns (Report, explanations table)."""
    from controller_core import fold, timelines
    from controller_core.verify import Report, verify_batches

    bronze, snaps = replay_table(log_dir)
    if bronze is None:
        return Report(), None
    history = fold.fold_partitions(bronze)
    brokers, topics = timelines.build(cluster_level_recs(bronze))
    exp = explain(bronze, history, brokers, topics)
    matched = _np(exp.column("matched"), bool)
    todo = {(t, p) for t, p, ok in zip(exp.column("topic_id").to_pylist(), exp.column("partition_id").to_pylist(),
                                       matched.tolist()) if not ok}
    rep = verify_batches(scalar_batches(bronze, todo), checker, snapshot_files=snaps) if todo else Report()
    rep.records = bronze.num_rows
    rep.partition_changes = len(exp)
    for name in np.array(exp.column("trigger").to_pylist(), dtype=object)[matched].tolist():
        rep.triggers[name] = rep.triggers.get(name, 0) + 1
    return rep, exp
