"""The vectorized partition fold (controller_core.vector.fold) equals the scalar replay (state.Cluster / merge).

* Generated histories -- several topics and partitions, re-creation after RemoveTopic under a reused name,
  change records with random subsets of fields (leader -1, same-leader bumps, directories, ELR), ClearElr by
  name and for all topics -- are encoded into a real log, decoded into bronze rows, folded, and compared
  field by field, row by row, with a record-by-record replay through state.Cluster (controller-rules.md
  §1.2-1.4).
* Every real cluster under ../shared/realdata folds to the same rows as the scalar replay, and the state at
  a snapshot's end offset equals the snapshot's PartitionRecords.
* A change record for a partition that does not exist is flagged, not fatal.
"""
from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller_core.codec.bronze import records_table
from controller_core.codec.logfile import iter_chunks
from controller_core.vector.fold import HISTORY_SCHEMA, STATE_COLUMNS, fold_partitions, state_at
from controller_core.replay import plan
from controller_core.image import LOST, MIGRATING, UNASSIGNED, Cluster, Partition, _dirs
from simulator.writer import write_log

REALDATA = Path(__file__).resolve().parents[4] / "shared" / "realdata"
if not (REALDATA / "README.md").is_file():
    raise FileNotFoundError(f"real metadata is missing: {REALDATA} (need ../shared beside the checkout)")
from realdata_facts import CLUSTERS  # noqa: E402

PARTITION_TYPES = ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "CLEAR_ELR_RECORD", "REMOVE_TOPIC_RECORD")


# ------------------------------------------------------------------------------------------ helpers
def bronze(paths) -> pa.Table:
    tables = []
    for p in paths:
        for chunk in iter_chunks(str(p)):
            assert not chunk.quarantine, chunk.quarantine[:1]
            if len(chunk):
                tables.append(records_table(chunk, "test", Path(p).name, "segment"))
    return pa.concat_tables(tables)


def state_row(p: Partition) -> dict:
    return {"replicas": p.replicas, "isr": p.isr, "removing_replicas": p.removing, "adding_replicas": p.adding,
            "leader": p.leader, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
            "leader_recovery_state": p.lrs, "directories": p.directories, "eligible_leader_replicas": p.elr,
            "last_known_elr": p.last_known_elr}


NULL_STATE = dict.fromkeys(STATE_COLUMNS)


def scalar_history(records, snapshot_offsets=()) -> tuple[list[dict], dict[int, dict]]:
    """Rows the fold must produce, by replaying (offset, type, data) one record at a time through
    state.Cluster, plus {offset: {(topic, partition): state row}} after the given offsets."""
    cluster = Cluster()
    rows: list[dict] = []
    snaps = {}
    wanted = set(snapshot_offsets)
    for offset, rtype, data in records:
        before = dict(cluster.partitions)
        cluster.apply(rtype, data, offset)
        after = cluster.partitions
        touched = []
        if rtype in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD"):
            touched = [(data["topicId"], data["partitionId"])]
        elif rtype == "CLEAR_ELR_RECORD":
            touched = [k for k, p in after.items() if before.get(k) is not p]
        for k in touched:
            rows.append({"topic_id": k[0], "partition_id": k[1], "offset": offset, "record_type": rtype,
                         **state_row(after[k]), "deleted": False, "orphan": False})
        if rtype == "REMOVE_TOPIC_RECORD":
            for k in before.keys() - after.keys():
                rows.append({"topic_id": k[0], "partition_id": k[1], "offset": offset, "record_type": rtype,
                             **NULL_STATE, "deleted": True, "orphan": False})
        if offset in wanted:
            snaps[offset] = {k: state_row(p) for k, p in after.items()}
    rows.sort(key=lambda r: (r["topic_id"], r["partition_id"], r["offset"]))
    for a, b in zip(rows, rows[1:] + [None]):
        same = b is not None and (a["topic_id"], a["partition_id"]) == (b["topic_id"], b["partition_id"])
        a["valid_to_offset"] = b["offset"] if same else None
    return rows, snaps


def fold_rows(history: pa.Table) -> list[dict]:
    rows = history.to_pylist()
    rows.sort(key=lambda r: (r["topic_id"], r["partition_id"], r["offset"]))
    return rows


def assert_rows_equal(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want), (
        f"{len(got)} rows folded, {len(want)} replayed\n fold:   {[(r['topic_id'][:4], r['partition_id'], r['offset']) for r in got]}"
        f"\n replay: {[(r['topic_id'][:4], r['partition_id'], r['offset']) for r in want]}")
    for g, w in zip(got, want):
        assert g == w, "\n".join(f"  {k}: fold={g.get(k)!r} replay={w.get(k)!r}" for k in w if g.get(k) != w.get(k))


def by_partition(table: pa.Table) -> dict:
    return {(r["topic_id"], r["partition_id"]): {c: r[c] for c in STATE_COLUMNS} for r in table.to_pylist()}


# ------------------------------------------------------------------------------- generated histories
# One generator, two sources of choices: hypothesis draws (shrinkable, ~60 ms of drawing per history) and a
# seeded random.Random (cheap: many histories per log, so thousands of histories fit the time budget).
DIR_POOL = [MIGRATING, UNASSIGNED, LOST, "Teb3PFb009qvAZgMDEFH4g", "s5Lm0nB0T3SgyTCa0QrFJg"]
CHANGE_FIELDS = ["isr", "leader", "replicas", "removingReplicas", "addingReplicas", "leaderRecoveryState",
                 "directories", "eligibleLeaderReplicas", "lastKnownElr"]


class Draws:
    """Choices from hypothesis."""

    def __init__(self, data):
        self.data = data

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.data.draw(st.sampled_from(list(seq)))

    def uuid(self) -> str:
        return base64.urlsafe_b64encode(self.data.draw(st.binary(min_size=16, max_size=16))).decode().rstrip("=")


class Seeded(Draws):
    """The same choices from a seeded random.Random."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, seq):
        return self.rng.choice(list(seq))

    def uuid(self) -> str:
        return base64.urlsafe_b64encode(self.rng.randbytes(16)).decode().rstrip("=")


def brokers(r: Draws, lo: int = 0, hi: int = 4) -> list[int]:
    return [r.int(0, 5) for _ in range(r.int(lo, hi))]


def directories(r: Draws, n_replicas: int) -> list[str]:
    kind = r.choice(["matching", "all-migrating", "empty", "any-length"])
    if kind == "all-migrating":
        return [MIGRATING] * r.int(1, 4)
    if kind == "empty":
        return []
    n = n_replicas if kind == "matching" else r.int(1, 4)
    return [r.choice(DIR_POOL) for _ in range(n)]


def partition_record(r: Draws, tid: str, pid: int):
    version = r.int(0, 2)
    replicas = brokers(r, 1, 4)
    d = {"partitionId": pid, "topicId": tid, "replicas": replicas, "isr": brokers(r),
         "removingReplicas": brokers(r, 0, 2), "addingReplicas": brokers(r, 0, 2),
         "leader": r.choice([-1] + replicas), "leaderEpoch": r.int(0, 50), "partitionEpoch": r.int(0, 50)}
    if r.int(0, 1):
        d["leaderRecoveryState"] = r.int(0, 1)
    if version >= 1 and r.int(0, 1):
        d["directories"] = directories(r, len(replicas))
    if version >= 2:
        for k in ("eligibleLeaderReplicas", "lastKnownElr"):
            if r.int(0, 1):
                d[k] = brokers(r)
    return ("PARTITION_RECORD", version, d)


def change_record(r: Draws, tid: str, pid: int, current_leader: int):
    """A random subset of fields (possibly none: state.merge still bumps PE)."""
    d = {"partitionId": pid, "topicId": tid}
    version = 0
    for f in CHANGE_FIELDS:
        if r.int(0, 3):
            continue
        if f == "leader":
            d[f] = r.choice([-1, current_leader, r.int(0, 5)])  # -1 and same-leader bumps too
        elif f == "leaderRecoveryState":
            d[f] = r.int(0, 1)
        elif f == "directories":
            d[f] = directories(r, len(d.get("replicas", [0, 1, 2])))
            version = max(version, 1)
        elif f in ("eligibleLeaderReplicas", "lastKnownElr"):
            d[f] = brokers(r, 0, 3)
            version = 2
        else:
            d[f] = brokers(r, 1 if f == "replicas" else 0, 4)
    return ("PARTITION_CHANGE_RECORD", r.int(version, 2), d)


def history(r: Draws, names: list[str], used_ids: set[str], steps: int) -> list[tuple[str, int, dict]]:
    """Records of a valid history: every change targets a live partition; names get reused."""
    live: dict[str, tuple[str, int]] = {}  # name -> (topic id, partitions)
    leaders: dict[tuple[str, int], int] = {}
    records = []
    for _ in range(steps):
        op = "create" if not live else r.choice(["create", "change", "change", "change", "change", "remove",
                                                 "clear", "overwrite", "noop"])
        if op == "create" and len(live) == len(names):
            op = "remove"
        if op == "create":
            name = r.choice([n for n in names if n not in live])
            tid = r.uuid()
            while tid in used_ids:
                tid = r.uuid()
            used_ids.add(tid)
            live[name] = (tid, r.int(1, 3))
            records.append(("TOPIC_RECORD", 0, {"name": name, "topicId": tid}))
            for pid in range(live[name][1]):
                records.append(partition_record(r, tid, pid))
                leaders[(tid, pid)] = records[-1][2]["leader"]
        elif op == "remove":
            records.append(("REMOVE_TOPIC_RECORD", 0, {"topicId": live.pop(r.choice(sorted(live)))[0]}))
        elif op in ("change", "overwrite"):
            tid, nparts = live[r.choice(sorted(live))]
            pid = r.int(0, nparts - 1)
            rec = change_record(r, tid, pid, leaders[(tid, pid)]) if op == "change" else partition_record(r, tid, pid)
            if rec[2].get("leader", -2) != -2:
                leaders[(tid, pid)] = rec[2]["leader"]
            records.append(rec)
        elif op == "clear":
            records.append(("CLEAR_ELR_RECORD", 0, {"topicName": r.choice(names + ["", "", "no-such-topic"])}))
        else:
            records.append(("NO_OP_RECORD", 0, {}))
    return records


def interleaved_log(r: Draws, n_histories: int, steps: int):
    """(batches, records in offset order): independent histories (own topic names) interleaved at random
    and cut into batches of 1-4 records.  ClearElr "" reaches into every history."""
    used: set[str] = set()
    queues = [history(r, [f"h{i}-alpha", f"h{i}-beta", f"h{i}-gamma"], used, steps) for i in range(n_histories)]
    records = []
    while any(queues):
        q = r.choice([q for q in queues if q])
        records.append(q.pop(0))
    batches, i = [], 0
    while i < len(records):
        k = r.int(1, 4)
        batches.append(records[i:i + k])
        i += k
    return batches, records


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fold")  # module-scoped: hypothesis reruns the test body many times


def check_fold_against_replay(log_dir: Path, batches, records, state_offsets) -> None:
    path = write_log(log_dir, batches)
    folded = fold_partitions(bronze([path]))
    assert folded.schema == HISTORY_SCHEMA
    want, snaps = scalar_history([(i, t, d) for i, (t, _, d) in enumerate(records)], state_offsets)
    assert_rows_equal(fold_rows(folded), want)
    for off in state_offsets:
        assert by_partition(state_at(folded, off)) == snaps[off], f"state_at({off})"


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=int(os.environ.get("FOLD_EXAMPLES", 150)), **SETTINGS)
@given(data=st.data())
def test_fold_equals_record_by_record_replay_of_generated_histories(log_dir, data):
    r = Draws(data)
    batches, records = interleaved_log(r, r.int(1, 2), r.int(1, 25))
    offsets = [r.int(0, len(records) - 1) for _ in range(r.int(0, 3))]
    check_fold_against_replay(log_dir, batches, records, offsets)


@settings(max_examples=int(os.environ.get("FOLD_SEEDS", 300)), **SETTINGS)
@given(seed=st.integers(0, 2**64 - 1))
def test_fold_equals_replay_of_eight_interleaved_histories_per_log(log_dir, seed):
    r = Seeded(seed)
    batches, records = interleaved_log(r, 8, r.int(1, 30))
    offsets = [r.int(0, len(records) - 1) for _ in range(4)]
    check_fold_against_replay(log_dir, batches, records, offsets)


# ---------------------------------------------------------------------------------- named rules
def _fold_records(tmp_path, records) -> pa.Table:
    return fold_partitions(bronze([write_log(tmp_path, [[r] for r in records])]))


T1, T2 = "fVJ4Z1ZQTB-TZNDBS44j9g", "nyXeXxVUS5CsGNKqjhc6UA"


def _p(tid, pid=0, **kw):
    d = {"partitionId": pid, "topicId": tid, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1,
         "leaderEpoch": 5, "partitionEpoch": 7}
    d.update(kw)
    return ("PARTITION_RECORD", 2, d)


def _c(tid, pid=0, **kw):
    return ("PARTITION_CHANGE_RECORD", 2, {"partitionId": pid, "topicId": tid, **kw})


def test_leader_epoch_bumps_for_any_leader_field_including_same_leader_and_minus_one(tmp_path):
    h = _fold_records(tmp_path, [("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}), _p(T1),
                                 _c(T1, isr=[1, 2]), _c(T1, leader=1), _c(T1, leader=-1), _c(T1, leader=2)])
    rows = h.to_pylist()
    assert [(r["leader"], r["leader_epoch"], r["partition_epoch"]) for r in rows] == [
        (1, 5, 7), (1, 5, 8), (1, 6, 9), (-1, 7, 10), (2, 8, 11)]
    assert [r["valid_to_offset"] for r in rows] == [2, 3, 4, 5, None]


def test_orphan_change_record_is_flagged_not_fatal(tmp_path):
    h = _fold_records(tmp_path, [
        ("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}),
        _c(T1, isr=[1]),  # 1: before any PartitionRecord of the partition
        _p(T1),  # 2
        ("REMOVE_TOPIC_RECORD", 0, {"topicId": T1}),  # 3
        _c(T1, leader=2),  # 4: after the partition was deleted
        _p(T1, leaderEpoch=0, partitionEpoch=0),  # 5
        _c(T1, leader=3),  # 6
    ])
    rows = {r["offset"]: r for r in h.to_pylist()}
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    for o in (1, 4):
        assert rows[o]["orphan"] and rows[o]["valid_to_offset"] is None
        assert all(rows[o][c] is None for c in STATE_COLUMNS)
    assert rows[3]["deleted"] and rows[3]["record_type"] == "REMOVE_TOPIC_RECORD"
    assert [rows[o]["valid_to_offset"] for o in (2, 3, 5, 6)] == [3, 5, 6, None]  # orphans skip the chain
    assert (rows[6]["leader"], rows[6]["leader_epoch"], rows[6]["partition_epoch"]) == (3, 1, 1)
    assert state_at(h, 1).num_rows == 0 and state_at(h, 4).num_rows == 0
    assert state_at(h, 6).column("offset").to_pylist() == [6]


def test_clear_elr_touches_only_partitions_with_elr_and_follows_a_reused_name(tmp_path):
    h = _fold_records(tmp_path, [
        ("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}),  # 0
        _p(T1, 0, eligibleLeaderReplicas=[2]), _p(T1, 1),  # 1, 2
        ("REMOVE_TOPIC_RECORD", 0, {"topicId": T1}),  # 3
        ("TOPIC_RECORD", 0, {"name": "t", "topicId": T2}),  # 4: the name again, a new id
        _p(T2, 0, lastKnownElr=[3]), _p(T2, 1),  # 5, 6
        ("CLEAR_ELR_RECORD", 0, {"topicName": "t"}),  # 7
        ("CLEAR_ELR_RECORD", 0, {"topicName": ""}),  # 8: nothing left to clear
    ])
    cleared = [r for r in h.to_pylist() if r["record_type"] == "CLEAR_ELR_RECORD"]
    assert [(r["topic_id"], r["partition_id"], r["offset"]) for r in cleared] == [(T2, 0, 7)]
    assert (cleared[0]["partition_epoch"], cleared[0]["leader_epoch"]) == (8, 5)
    assert cleared[0]["eligible_leader_replicas"] == [] and cleared[0]["last_known_elr"] == []


def test_directories_absent_empty_or_all_migrating_mean_migrating_per_replica(tmp_path):
    real = "Teb3PFb009qvAZgMDEFH4g"
    h = _fold_records(tmp_path, [
        ("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}),
        _p(T1, 0), _p(T1, 1, directories=[real, real, real]), _p(T1, 2, directories=[MIGRATING]),
        _c(T1, 1, replicas=[1, 2]),  # length differs from the explicit list: MIGRATING x 2 (as state.merge)
        _c(T1, 1, replicas=[1, 2, 4]),
        _c(T1, 2, directories=[real, LOST]),
    ])
    dirs = {(r["partition_id"], r["offset"]): r["directories"] for r in h.to_pylist()}
    assert dirs == {(0, 1): [MIGRATING] * 3, (1, 2): [real] * 3, (2, 3): [MIGRATING] * 3,
                    (1, 4): [MIGRATING] * 2, (1, 5): [MIGRATING] * 3, (2, 6): [real, LOST]}


def test_dictionary_strings_hold_the_same_values(tmp_path):
    records = [("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}), _p(T1, 0, directories=["Teb3PFb009qvAZgMDEFH4g"] * 3),
               _c(T1, 0, leader=2), ("REMOVE_TOPIC_RECORD", 0, {"topicId": T1})]
    table = bronze([write_log(tmp_path, [[r] for r in records])])
    plain = fold_partitions(table)
    assert fold_partitions(table, dictionary_strings=True).cast(HISTORY_SCHEMA).equals(plain)


def test_string_columns_are_chunked_before_int32_offsets_overflow(tmp_path, monkeypatch):
    import controller_core.vector.fold as fold

    records = [("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}), ("TOPIC_RECORD", 0, {"name": "u", "topicId": T2})]
    records += [_p(t, pid, directories=["Teb3PFb009qvAZgMDEFH4g", LOST, UNASSIGNED]) for t in (T1, T2) for pid in range(3)]
    records += [_c(T1, 1, leader=2), _c(T2, 0, isr=[3]), ("REMOVE_TOPIC_RECORD", 0, {"topicId": T2})]
    table = bronze([write_log(tmp_path, [[r] for r in records])])
    whole = fold_partitions(table)
    monkeypatch.setattr(fold, "_MAX_CHUNK_BYTES", 100)  # a few rows' strings per chunk
    chunked = fold_partitions(table)
    assert chunked.column("directories").num_chunks > 1 and chunked.column("topic_id").num_chunks > 1
    assert chunked.equals(whole)


def test_rows_out_of_offset_order_are_folded_in_offset_order(tmp_path):
    records = [("TOPIC_RECORD", 0, {"name": "t", "topicId": T1}), _p(T1), _c(T1, leader=2), _c(T1, isr=[2])]
    table = bronze([write_log(tmp_path, [[r] for r in records])])
    assert fold_partitions(table.take([3, 0, 2, 1])).equals(fold_partitions(table))


# ----------------------------------------------------------------------------------------- real data
def cluster_files(folder: str) -> list[Path]:
    return [f.path for f in plan(REALDATA / folder).files]


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_fold_of_real_cluster_equals_record_by_record_replay(folder):
    table = bronze(cluster_files(folder))
    folded = fold_partitions(table)
    t = table.filter(pa.compute.is_in(table.column("record_type"), pa.array(
        list(PARTITION_TYPES) + ["TOPIC_RECORD"])))
    records = [(o, r, json.loads(d)) for o, r, d in zip(t.column("offset").to_pylist(),
                                                        t.column("record_type").to_pylist(),
                                                        t.column("data_json").to_pylist())]
    want, _ = scalar_history(records)
    assert want, f"{folder}: no partition records"
    assert_rows_equal(fold_rows(folded), want)


SNAPSHOT_CASES = [(folder, snap) for folder in ("ogs59-3broker-mv3.7/kafka-1", "induswargods-elr-mv4.2/kafka-data")
                  for snap in sorted((REALDATA / folder / "__cluster_metadata-0").glob("*-*.checkpoint"))]


@pytest.mark.parametrize("folder, snapshot", SNAPSHOT_CASES, ids=[s.name for _, s in SNAPSHOT_CASES])
def test_state_at_snapshot_end_equals_the_snapshot_partition_records(folder, snapshot):
    segment = REALDATA / folder / "__cluster_metadata-0" / "00000000000000000000.log"
    history = fold_partitions(bronze([segment]))
    end_offset = int(snapshot.name.split("-")[0])
    got = by_partition(state_at(history, end_offset - 1))
    snap = bronze([snapshot])
    want = {}
    for r in snap.filter(pa.compute.equal(snap.column("record_type"), "PARTITION_RECORD")).to_pylist():
        want[(r["topic_id"], r["partition_id"])] = {
            "replicas": r["replicas"], "isr": r["isr"], "removing_replicas": r["removing_replicas"],
            "adding_replicas": r["adding_replicas"], "leader": r["leader"], "leader_epoch": r["leader_epoch"],
            "partition_epoch": r["partition_epoch"], "leader_recovery_state": r["leader_recovery_state"],
            "directories": _dirs(r["directories"], len(r["replicas"])),
            "eligible_leader_replicas": r["eligible_leader_replicas"] or [],
            "last_known_elr": r["last_known_elr"] or []}
    assert want, f"{snapshot.name} holds no PartitionRecord"
    assert got == want
