#!/usr/bin/env python3
"""Replay + recompute throughput of the vectorized controller core, and the scalar reference.

A synthetic cluster (default: 1,000,000 partitions of RF 3 over 60 brokers, >= 10 M change records)
is generated in NumPy as bronze rows, in partition-hash groups as the Spark job processes them (each
group: its partitions plus every broker record).  Rounds of controller activity, each with the
records Kafka's controller writes (controller-rules §2): broker b is fenced (its ISR memberships
removed, leaderships moved to the next replica in replica order, then the fence record), unfenced,
its followers' AlterPartition requests bring it back into the ISRs, and preferred elections return
leadership to the first replica.  Per group the core runs fold (partition history) and explain
(vectorized recomputation); records it cannot explain go to the scalar reference.  Printed:
records/s of fold, explain and both, the share explained by the vectorized path, divergences, peak
RSS, and the scalar reference (verify_batches) on a slice for the speed ratio.

    python benchmarks/bench_replay.py [--partitions 1000000] [--rounds 180] [--groups 8]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller_core import timelines  # noqa: E402
from controller_core.vector import fold
from controller_core.codec.bronze import SCHEMA  # noqa: E402
from controller_core.codec.message import uuid_to_str  # noqa: E402
from controller_core.vector.explain import cluster_level_recs, explain, scalar_batches  # noqa: E402
from controller_core.rules.verify import verify_batches  # noqa: E402

MV = 12  # 3.6-IV0: no leader-epoch bump on shrink; ELR not available
PARTS_PER_TOPIC = 100


def _lists(mat: np.ndarray, lens: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lens) + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    mask = np.arange(mat.shape[1])[None, :] < lens[:, None]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(mat[mask].astype(np.int32)))


class Gen:
    """One group's bronze rows (columns accumulated per record kind, assembled at the end)."""

    def __init__(self, n_parts: int, n_brokers: int, group: int, seed: int, full_json: bool = False):
        self.full_json = full_json  # data_json for every record (the scalar reference reads it)
        rng = np.random.default_rng(seed + group)
        self.n, self.nb = n_parts, n_brokers
        self.R = self._fast_replicas(rng)
        self.I = self.R.copy()  # ISR matrix, -1 padded
        self.L = self.R[:, 0].copy()
        self.topics = [uuid_to_str(int(group * 1_000_000 + t + 1).to_bytes(16, "big")) for t in
                       range((n_parts + PARTS_PER_TOPIC - 1) // PARTS_PER_TOPIC)]
        self.rows: list[dict] = []  # column chunks
        self.offset = 0

    def _fast_replicas(self, rng):
        a = rng.integers(1, self.nb + 1, self.n)
        b = (a + rng.integers(1, self.nb, self.n) - 1) % self.nb + 1
        c = b.copy()
        while True:
            bad = (c == a) | (c == b)
            if not bad.any():
                break
            c[bad] = rng.integers(1, self.nb + 1, bad.sum())
        return np.stack([a, b, c], axis=1).astype(np.int32)

    def _emit(self, kind: str, parts: np.ndarray | None, batch_per_record: bool, **cols):
        k = len(parts) if parts is not None else 1
        off = self.offset + np.arange(k, dtype=np.int64)
        batch = off if batch_per_record else np.full(k, self.offset, np.int64)
        self.rows.append({"kind": kind, "parts": parts, "offset": off, "batch": batch, **cols})
        self.offset += k

    def generate(self, rounds: int):
        n = self.n
        pids = np.arange(n)
        # broker registrations and unfence, then topics and partitions
        for b in range(1, self.nb + 1):
            self._emit("register", None, True, broker=b)
        for b in range(1, self.nb + 1):
            self._emit("unfence", None, True, broker=b)
        self._emit("feature", None, True)
        firsts = pids[pids % PARTS_PER_TOPIC == 0]
        self._emit("topics", firsts, True)
        self._emit("partitions", pids, False, isr=self.R.copy(), isr_len=np.full(n, 3), leader=self.L.copy())
        for r in range(rounds):
            b = r % self.nb + 1
            in_isr = (self.I == b).any(axis=1)
            parts = pids[in_isr]
            newI = self.I[parts].copy()
            newI[newI == b] = -1
            order = np.argsort(newI < 0, axis=1, kind="stable")
            newI = np.take_along_axis(newI, order, axis=1)
            lead_moves = self.L[parts] == b
            # next leader: first replica (replica order) that is still in the ISR
            Rp = self.R[parts]
            cand = (Rp[:, :, None] == newI[:, None, :]).any(axis=2) & (Rp != b)
            nl = Rp[np.arange(len(parts)), cand.argmax(axis=1)]
            leader = np.where(lead_moves, nl, -2)
            self._emit("change", parts, False, isr=newI, isr_len=(newI >= 0).sum(1), leader=leader)
            self._emit("fence", None, False, broker=b, attach_to_last=True)
            self.I[parts] = newI
            self.L[parts] = np.where(lead_moves, nl, self.L[parts])
            self._emit("unfence", None, True, broker=b)
            # followers catch up: AlterPartition adds b back at the end of the ISR (one batch each)
            back = np.concatenate([newI[:, :2], np.full((len(parts), 1), b, np.int32)], axis=1)
            self._emit("change", parts, True, isr=back, isr_len=np.full(len(parts), 3), leader=np.full(len(parts), -2))
            self.I[parts] = back
            # preferred election returns leadership to replica 0
            pref = parts[self.L[parts] != self.R[parts, 0]]
            self._emit("change", pref, False, isr=None, isr_len=None, leader=self.R[pref, 0])
            self.L[pref] = self.R[pref, 0]
        return self.table()

    def table(self) -> pa.Table:
        cols: dict[str, list] = {f.name: [] for f in SCHEMA}
        tid = np.array(self.topics, dtype=object)
        pending_fence_batch = None
        for chunk in self.rows:
            kind, k = chunk["kind"], len(chunk["offset"])
            off, batch = chunk["offset"], chunk["batch"]
            if kind == "fence" and pending_fence_batch is not None:
                batch = np.full(k, pending_fence_batch, np.int64)  # the fence record ends its batch
            def put(**kv):
                m = len(kv["offset"])
                for name in cols:
                    cols[name].append(kv.get(name, [None] * m))
            base = dict(cluster=["bench"] * k, source_file=["__cluster_metadata-0/00000000000000000000.log"] * k,
                        source_kind=["segment"] * k, offset=off.tolist(), position=off.tolist(),
                        batch_position=batch.tolist(), batch_base_offset=batch.tolist(),
                        batch_timestamp=(off * 0 + 1_700_000_000_000).tolist(),
                        timestamp=(off * 0 + 1_700_000_000_000).tolist(), batch_leader_epoch=[1] * k,
                        is_control=[False] * k, record_version=[0] * k)
            if kind == "register":
                b = chunk["broker"]
                inc = uuid_to_str(int(b).to_bytes(16, "big"))
                put(**base, record_type=["REGISTER_BROKER_RECORD"], broker_id=[b], broker_epoch=[b],
                    incarnation_id=[inc], fenced=[True], data_json=[json.dumps(
                        {"brokerId": b, "incarnationId": inc, "brokerEpoch": b, "endPoints": [], "features": [],
                         "rack": None, "fenced": True, "inControlledShutdown": False})])
            elif kind in ("unfence", "fence"):
                b = chunk["broker"]
                f = -1 if kind == "unfence" else 1
                put(**base, record_type=["BROKER_REGISTRATION_CHANGE_RECORD"], broker_id=[b], broker_epoch=[b],
                    fenced=[f == 1], data_json=[json.dumps({"brokerId": b, "brokerEpoch": b, "fenced": f})])
            elif kind == "feature":
                put(**base, record_type=["FEATURE_LEVEL_RECORD"], feature_name=["metadata.version"],
                    feature_level=[MV], data_json=[json.dumps({"name": "metadata.version", "featureLevel": MV})])
            elif kind == "topics":
                p = chunk["parts"]
                names = [f"t{int(x // PARTS_PER_TOPIC)}" for x in p]
                topics = tid[p // PARTS_PER_TOPIC]
                put(**base, record_type=["TOPIC_RECORD"] * k, topic_id=topics.tolist(), topic_name=names,
                    data_json=[json.dumps({"name": nm, "topicId": t}) for nm, t in zip(names, topics)])
            elif kind == "partitions":
                p = chunk["parts"]
                topics = tid[p // PARTS_PER_TOPIC]
                # topic records first (one batch with its partitions)
                first = p % PARTS_PER_TOPIC == 0
                data = [json.dumps({"partitionId": int(x % PARTS_PER_TOPIC), "topicId": t,
                                    "replicas": self.R[x].tolist(), "isr": self.R[x].tolist(), "removingReplicas": [],
                                    "addingReplicas": [], "leader": int(self.R[x, 0]), "leaderEpoch": 0,
                                    "partitionEpoch": 0}) if f or self.full_json else "{}"
                        for x, t, f in zip(p, topics, first)]
                put(**base, record_type=["PARTITION_RECORD"] * k, topic_id=topics.tolist(),
                    partition_id=(p % PARTS_PER_TOPIC).tolist(), replicas=_lists(self.R[p], np.full(k, 3)),
                    isr=_lists(self.R[p], np.full(k, 3)), removing_replicas=_lists(self.R[p][:, :0], np.zeros(k, int)),
                    adding_replicas=_lists(self.R[p][:, :0], np.zeros(k, int)), leader=self.R[p, 0].tolist(),
                    leader_epoch=[0] * k, partition_epoch=[0] * k, leader_recovery_state=[0] * k, data_json=data)
            elif kind == "change":
                p = chunk["parts"]
                isr = _lists(chunk["isr"], chunk["isr_len"]) if chunk["isr"] is not None else pa.nulls(k, pa.list_(pa.int32()))
                leader = chunk["leader"]
                pid0 = (p % PARTS_PER_TOPIC) == 0
                isr_py = chunk["isr"]
                data = ["{}"] * k
                for i in (range(k) if self.full_json else np.flatnonzero(pid0).tolist()):
                    d = {"partitionId": int(p[i] % PARTS_PER_TOPIC), "topicId": tid[p[i] // PARTS_PER_TOPIC]}
                    if isr_py is not None:
                        d["isr"] = [int(x) for x in isr_py[i] if x >= 0]
                    if leader[i] != -2:
                        d["leader"] = int(leader[i])
                    data[i] = json.dumps(d)
                put(**base, record_type=["PARTITION_CHANGE_RECORD"] * k, topic_id=tid[p // PARTS_PER_TOPIC].tolist(),
                    partition_id=(p % PARTS_PER_TOPIC).tolist(), isr=isr, leader=leader.tolist(),
                    leader_recovery_state=[-1] * k, data_json=data)
                pending_fence_batch = int(batch[0]) if len(batch) else None
        arrays = {}
        for f in SCHEMA:
            parts = [c if isinstance(c, pa.Array) else pa.array(c, f.type) for c in cols[f.name]]
            arrays[f.name] = pa.chunked_array([x.cast(f.type) for x in parts], f.type)
        t = pa.table(arrays)
        return t.sort_by("offset")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=180)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--scalar-slice", type=int, default=20000, help="partitions replayed by the scalar reference")
    args = ap.parse_args(argv)
    per = args.partitions // args.groups
    totals = {"records": 0, "changes": 0, "fold": 0.0, "explain": 0.0, "gen": 0.0, "explained": 0, "div": 0}
    for g in range(args.groups):
        t0 = time.perf_counter()
        table = Gen(per, args.brokers, g, 0).generate(args.rounds)
        t1 = time.perf_counter()
        history = fold.fold_partitions(table)
        t2 = time.perf_counter()
        brokers, topics = timelines.build(cluster_level_recs(table))
        exp = explain(table, history, brokers, topics)
        t3 = time.perf_counter()
        matched = exp.column("matched").to_numpy(zero_copy_only=False)
        missed = exp.filter(pa.array(~matched))
        todo = set(zip(missed.column("topic_id").to_pylist(), missed.column("partition_id").to_pylist()))
        if todo:
            totals["div"] += len(verify_batches(scalar_batches(table, todo)).divergences)
        totals["records"] += table.num_rows
        totals["changes"] += len(exp)
        totals["explained"] += int(matched.sum())
        totals["gen"] += t1 - t0
        totals["fold"] += t2 - t1
        totals["explain"] += t3 - t2
        print(f"group {g}: {table.num_rows:,} records ({len(exp):,} changes), fold {t2 - t1:.2f} s, "
              f"timelines+explain {t3 - t2:.2f} s, unexplained {len(exp) - int(matched.sum())}", flush=True)
    rec, ch = totals["records"], totals["changes"]
    core = totals["fold"] + totals["explain"]
    print(f"\n{args.partitions:,} partitions, {rec:,} records ({ch:,} PartitionChangeRecords) in {args.groups} groups")
    print(f"fold      {rec / totals['fold']:>14,.0f} records/s")
    print(f"explain   {ch / totals['explain']:>14,.0f} change records/s (timelines + primary triggers + vectorized builder)")
    print(f"core      {rec / core:>14,.0f} records/s (fold + explain, one core)")
    print(f"explained by the vectorized path: {totals['explained'] / max(ch, 1):.4%}; divergences {totals['div']}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB; "
          f"generation {totals['gen']:.1f} s (not counted)")
    # the scalar reference and the vectorized core on the same smaller cluster
    small = Gen(args.scalar_slice, args.brokers, 99, 1, full_json=True).generate(args.rounds)
    t0 = time.perf_counter()
    h = fold.fold_partitions(small)
    b, tp = timelines.build(cluster_level_recs(small))
    explain(small, h, b, tp)
    vec = time.perf_counter() - t0
    batches = scalar_batches(small, {(t, p) for t, p in zip(small.column("topic_id").to_pylist(),
                                                            small.column("partition_id").to_pylist()) if t})
    t0 = time.perf_counter()
    rep = verify_batches(batches)
    dt = time.perf_counter() - t0
    print(f"same {args.scalar_slice:,}-partition cluster ({small.num_rows:,} records): scalar reference "
          f"{small.num_rows / dt:,.0f} records/s ({len(rep.divergences)} divergences), vectorized core "
          f"{small.num_rows / vec:,.0f} records/s: {dt / vec:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
