#!/usr/bin/env python3
"""Partition fold throughput: bronze rows -> partition_state_history (controller_core.vector.fold), one core.

A synthetic bronze-like Arrow table is built directly with NumPy (no encoder): ``--partitions``
partitions (100 per topic) with a PartitionRecord each (3 replicas out of 30 brokers, explicit log
directories as written at MV >= 3.7), then ``--changes`` PartitionChangeRecords on random partitions:
40 % ISR shrinks, 30 % ISR expands, 20 % leader changes, 5 % leader -1 with a one-member ISR, 5 %
same-leader bumps.  A fresh process pinned to one core times ``fold_partitions`` (best of
``--repeat``) with plain string columns (HISTORY_SCHEMA) and with ``dictionary_strings=True``, prints
records/s (first run and best run), user/sys CPU, peak RSS and the CPU seconds of each fold step;
once with the default allocators and once "tuned" (glibc keeps freed memory, Arrow uses the system
allocator, NumPy does not madvise huge pages): on this VM most of a cold run's sys time is page faults.  The scalar
reference (``state.merge`` record by record) on a ``--scalar``-record slice gives the speed ratio.

    python benchmarks/bench_fold.py [--partitions 1000000] [--changes 10000000] [--scalar 200000]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BROKERS = 30
PER_TOPIC = 100


def synth_bronze(partitions: int, changes: int, seed: int = 7):
    """(bronze-like table, replicas matrix) with the columns fold_partitions reads."""
    import base64

    import numpy as np
    import pyarrow as pa

    from controller_core.codec.arrowutil import from_numpy

    rng = np.random.default_rng(seed)
    topics = -(-partitions // PER_TOPIC)
    n_t, n_p, n_c = topics, partitions, changes
    n = n_t + n_p + n_c
    tids = pa.array([base64.urlsafe_b64encode(rng.bytes(16)).decode().rstrip("=") for _ in range(topics)])
    dir_ids = pa.array([base64.urlsafe_b64encode(rng.bytes(16)).decode().rstrip("=") for _ in range(BROKERS)])

    # replicas: 3 distinct brokers per partition
    first = rng.integers(0, BROKERS, n_p)
    step = rng.integers(1, BROKERS // 3, n_p)
    reps = np.stack([first, (first + step) % BROKERS, (first + 2 * step) % BROKERS], axis=1).astype(np.int32)

    # rows: TopicRecords, PartitionRecords, then the changes (random partitions)
    kind = np.empty(n, np.int8)  # 0 topic, 1 partition, 2 change
    kind[:n_t], kind[n_t:n_t + n_p], kind[n_t + n_p:] = 0, 1, 2
    part = np.empty(n, np.int64)
    part[:n_t] = -1
    part[n_t:n_t + n_p] = np.arange(n_p)
    cpart = rng.integers(0, n_p, n_c)
    part[n_t + n_p:] = cpart
    topic_of = np.where(kind == 0, np.arange(n) % max(n_t, 1), part // PER_TOPIC)

    # change kinds: shrink, expand, leader change, leader -1, same-leader bump
    ck = rng.choice(5, n_c, p=[0.40, 0.30, 0.20, 0.05, 0.05])
    crep = reps[cpart]
    drop = rng.integers(0, 3, n_c)  # the ISR member a shrink removes
    leader = np.full(n, -2, np.int32)
    leader[n_t:n_t + n_p] = reps[:, 0]
    cl = np.full(n_c, -2, np.int32)
    moved = np.flatnonzero(ck == 2)
    cl[moved] = crep[moved, rng.integers(0, 3, len(moved))]
    cl[ck == 3] = -1
    cl[ck == 4] = crep[ck == 4, 0]
    leader[n_t + n_p:] = cl

    # isr lists: P = replicas, shrink = 2 members, expand = replicas, leader -1 = [one member], else null
    isr_len = np.zeros(n, np.int64)
    isr_len[n_t:n_t + n_p] = 3
    cil = np.select([ck == 0, ck == 1, ck == 3], [2, 3, 1], 0)
    isr_len[n_t + n_p:] = cil
    isr_valid = np.zeros(n, bool)
    isr_valid[n_t:n_t + n_p] = True
    isr_valid[n_t + n_p:] = (ck == 0) | (ck == 1) | (ck == 3)
    m = crep.copy()
    shrink = ck == 0
    m[shrink, :2] = crep[shrink][np.arange(3)[None, :] != drop[shrink][:, None]].reshape(-1, 2)
    isr_vals = np.concatenate([reps.ravel(), m[np.arange(3)[None, :] < cil[:, None]]])
    del m, crep

    def lists(lens, vals, valid, child=None):
        off = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        values = child if child is not None else from_numpy(np.ascontiguousarray(vals, np.int32))
        return pa.ListArray.from_arrays(from_numpy(off.astype(np.int32)), values, mask=from_numpy(~valid))

    p_only = np.zeros(n, bool)
    p_only[n_t:n_t + n_p] = True
    p_lens = np.where(p_only, 3, 0)
    empty = lists(np.zeros(n, np.int64), np.zeros(0, np.int32), p_only)  # [] in PartitionRecords
    cols = {
        "offset": from_numpy(np.arange(n, dtype=np.int64)),
        "record_type": pa.array(["TOPIC_RECORD", "PARTITION_RECORD", "PARTITION_CHANGE_RECORD"]).take(from_numpy(kind)),
        "topic_id": tids.take(from_numpy(topic_of.astype(np.int32))),
        "topic_name": pa.array(["t%d" % i for i in range(n_t)] + [None] * (n - n_t), pa.string()),
        "partition_id": from_numpy(np.where(kind == 0, 0, part % PER_TOPIC).astype(np.int32), kind != 0),
        "replicas": lists(p_lens, reps.ravel(), p_only),
        "isr": lists(isr_len, isr_vals, isr_valid),
        "removing_replicas": empty,
        "adding_replicas": empty,
        "leader": from_numpy(leader, kind != 0),
        "leader_epoch": from_numpy(np.zeros(n, np.int32), p_only),
        "partition_epoch": from_numpy(np.zeros(n, np.int32), p_only),
        "leader_recovery_state": from_numpy(np.where(p_only, 0, -1).astype(np.int8), kind != 0),
        "directories": lists(p_lens, None, p_only, child=dir_ids.take(from_numpy(reps.ravel()))),
        "eligible_leader_replicas": pa.nulls(n, pa.list_(pa.int32())),
        "last_known_elr": pa.nulls(n, pa.list_(pa.int32())),
    }
    return pa.table(cols), reps


CHILD = r"""
import gc, json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
if os.environ.get("BENCH_NO_HUGEPAGE"):
    np._core.multiarray._set_madvise_hugepage(False)
from benchmarks.bench_fold import synth_bronze
from controller_core.vector.fold import fold_partitions
partitions, changes, repeat = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
table, _ = synth_bronze(partitions, changes)
gc.collect()
out = {"rows": table.num_rows, "input_mb": table.nbytes / 2**20,
       "rss_after_input_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
for label, kw in (("dictionary", {"dictionary_strings": True}), ("plain", {})):
    runs = []
    for i in range(repeat):
        steps = {}
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        h = fold_partitions(table, timings=steps, **kw)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        runs.append({"wall": t1 - t0, "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime,
                     "steps": steps})
        out[label + "_output_rows"], out[label + "_output_mb"] = h.num_rows, h.nbytes / 2**20
        del h
        gc.collect()
    out[label] = runs
    out[label + "_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

SCALAR = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from benchmarks.bench_fold import synth_bronze
from controller_core.image import Partition, merge, MIGRATING
partitions, limit = int(sys.argv[2]), int(sys.argv[3])
table, reps = synth_bronze(partitions, limit)
# the change records as state.merge takes them (JSON form; building them is not timed)
kinds = table.column("record_type").to_pylist()
first = kinds.index("PARTITION_CHANGE_RECORD")
t = table.slice(first)
recs = []
for tid, pid, isr, leader in zip(t.column("topic_id").to_pylist(), t.column("partition_id").to_pylist(),
                                 t.column("isr").to_pylist(), t.column("leader").to_pylist()):
    d = {"topicId": tid, "partitionId": pid}
    if isr is not None:
        d["isr"] = isr
    if leader != -2:
        d["leader"] = leader
    recs.append(d)
p0 = table.slice(0, first).filter(np.array([k == "PARTITION_RECORD" for k in kinds[:first]]))
state = {(a, b): Partition(a, b, list(r), list(r), r[0], 0, 0, directories=[MIGRATING] * 3)
         for a, b, r in zip(p0.column("topic_id").to_pylist(), p0.column("partition_id").to_pylist(), reps.tolist())}
t0 = time.perf_counter()
for d in recs:
    k = (d["topicId"], d["partitionId"])
    state[k] = merge(state[k], d)
dt = time.perf_counter() - t0
print(json.dumps({"records": len(recs), "seconds": dt}))
"""


TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40), "ARROW_DEFAULT_MEMORY_POOL": "system",
         "BENCH_NO_HUGEPAGE": "1"}


def _run(code: str, *args, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    cmd = [sys.executable, "-c", code, str(ROOT), *map(str, args)]
    if os.path.exists("/usr/bin/taskset"):  # the figure is a one-core figure
        cmd = ["taskset", "-c", "0"] + cmd
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000_000)
    ap.add_argument("--scalar", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    best_rate = {}
    for config, extra in (("default allocator", None), ("tuned allocator", TUNED)):
        r = _run(CHILD, args.partitions, args.changes, args.repeat, env_extra=extra)
        n = r["rows"]
        print(f"== {config}" + ("" if extra is None else " (" + " ".join(f"{k}={v}" for k, v in extra.items()) + ")"))
        print(f"input: {n:,} bronze rows ({args.partitions:,} PartitionRecords, {args.changes:,} PartitionChangeRecords, "
              f"{-(-args.partitions // PER_TOPIC):,} TopicRecords), {r['input_mb']:.0f} MiB of Arrow; "
              f"peak RSS after building it {r['rss_after_input_mb']:.0f} MiB")
        for label in ("dictionary", "plain"):
            runs = r[label]
            best = min(runs, key=lambda x: x["wall"])
            cold = runs[0]
            best_rate[(config, label)] = n / best["wall"]
            print(f"  fold {label:10s}: first run {cold['wall']:5.2f} s (user {cold['user']:.2f} + sys {cold['sys']:.2f}); "
                  f"best of {len(runs)} {best['wall']:5.2f} s (user {best['user']:.2f} + sys {best['sys']:.2f}) = "
                  f"{n / best['wall'] / 1e6:.2f} M records/s; output {r[label + '_output_rows']:,} rows, "
                  f"{r[label + '_output_mb']:.0f} MiB; peak RSS {r[label + '_peak_rss_mb']:.0f} MiB")
        steps = min(r["plain"], key=lambda x: x["wall"])["steps"]
        total = sum(steps.values())
        print(f"  where the time goes (best plain run, CPU seconds per step, total {total:.2f} s):")
        for step, sec in sorted(steps.items(), key=lambda kv: -kv[1]):
            print(f"    {sec:6.3f} s  {100 * sec / total:4.1f} %  {step}")
    sc = _run(SCALAR, min(args.partitions, args.scalar), args.scalar)
    rate = sc["records"] / sc["seconds"]
    print(f"scalar state.merge loop: {sc['records']:,} records in {sc['seconds']:.2f} s = {rate / 1e6:.3f} M records/s; "
          "fold/scalar: " + ", ".join(f"{c} {l} {v / rate:.0f}x" for (c, l), v in best_rate.items()))


if __name__ == "__main__":
    main()
