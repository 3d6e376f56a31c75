"""``kraft-audit describe``: ``kafka-topics.sh --describe`` for any point in a metadata log's history.

The cluster image is replayed straight from a log directory with the controller core (no Spark):

* ``--at-offset N``: the state after every record up to and including log offset N (a batch is cut
  at N if N falls inside it: a note on stderr says so, since Kafka applies batches atomically);
* ``--at-time T``: the state after the longest run of batches, from the start, whose timestamps are at
  or before T (a batch is applied whole or not at all);
* neither: the end of the log.

When the older segments were deleted the replay starts from a snapshot (``<endOffset>-<epoch>.checkpoint``
covering the missing start): the newest covering snapshot at or before the requested point is used, and a
point before every covering snapshot is refused with exit 2, as is an offset past the end of the log or
a time before its first record.

Text output is Kafka's (``TopicCommand``): a topic line, then one line per partition, topics by name and
partitions by id; with a partition filter only the matching partition lines (no topic lines).
Differences, on purpose:

* ``Configs:`` lists the topic's own ConfigRecords (its overrides), sorted by key.  Kafka also prints
  values that resolve from dynamic broker or cluster-level configs and from the brokers' static
  ``server.properties`` (any source but the built-in default); the static file is not in the log.
* the min-ISR filters use the *effective* min ISR (controller-rules.md §1.7: the resolved
  ``min.insync.replicas`` capped by partition 0's replica count), the value the controller uses; Kafka's
  tool compares with the configured value and also counts every leaderless partition as under min ISR.
* a leader that is a fenced or unregistered broker is printed as its id (Kafka's client prints
  ``none`` as it only knows live brokers); ``--unavailable-partitions`` lists it.
* ``--elr-partitions`` (non-empty ELR) is an addition; ``Elr``/``LastKnownElr`` are never ``N/A``.

``--json``: an array, one object per partition line (same filters).
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from controller_core.logdir import SEGMENT, SNAPSHOT, LogFile, discover
from controller_core.replay import Plan, Rec, iter_batches, iter_file_records, plan
from controller_core.image import MIGRATING, NO_LEADER, Broker, Cluster, Partition, ReplayError

PROG = "kraft-audit describe"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

JSON_KEYS = ("topic", "topicId", "partition", "replicas", "isr", "eligibleLeaderReplicas", "lastKnownElr", "leader",
             "leaderEpoch", "partitionEpoch", "leaderRecoveryState", "addingReplicas", "removingReplicas",
             "directories")


class DescribeError(Exception):
    """A request that cannot be answered (bad argument, point outside the log): exit 2."""


# ------------------------------------------------------------------------------------------ parsing
def parse_time(text: str) -> int:
    """Epoch microseconds of an ISO 8601 time (UTC when it has no offset) or of epoch milliseconds."""
    s = text.strip()
    if re.fullmatch(r"\d+", s):
        return int(s) * 1000
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s[-1:] in ("Z", "z") else s)
    except ValueError:
        raise DescribeError(f"--at-time {text!r}: not an ISO 8601 time such as 2025-09-22T12:00:00Z "
                            "(nor epoch milliseconds)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - EPOCH) // timedelta(microseconds=1)


def fmt_ms(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fmt_us(us: int) -> str:
    spec = "milliseconds" if us % 1000 == 0 else "microseconds"
    return (EPOCH + timedelta(microseconds=us)).isoformat(timespec=spec).replace("+00:00", "Z")


def topic_names(values: list[str] | None) -> list[str]:
    names: list[str] = []
    for v in values or []:
        for name in v.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


# ------------------------------------------------------------------------------------------ replay
@dataclass
class Reached:
    """Where the replay stopped: the last log offset applied and its batch's timestamp (None: no log
    record applied, e.g. the state is a snapshot's), and the snapshot it started from."""

    offset: int | None = None
    timestamp: int | None = None
    snapshot: LogFile | None = None


def _snapshot_header_ts(snap: LogFile) -> int:
    """lastContainedLogTimestamp of a snapshot (ms): the time of the last record it contains."""
    for rec in iter_file_records(snap, include_skipped=True):
        if rec.type == "SNAPSHOT_HEADER":
            return int(rec.data.get("lastContainedLogTimestamp", 0))
        break
    return 0


def _files(log_dir, at_offset: int | None, at_time: int | None) -> tuple[list[LogFile], LogFile | None, int]:
    """Files to replay, the snapshot they start from and the first log offset after it.

    A complete log (its first segment starts at 0) is replayed from the start.  Otherwise
    :func:`controller_core.replay.plan` picks the newest snapshot covering the missing start; for a point
    before that one, an older covering snapshot at or before the point is used if there is one."""
    p = plan(log_dir)
    if p.snapshot is None:
        return p.files, None, 0
    segments = [f for f in p.files if f.kind == SEGMENT]
    first = min(s.offset for s in segments)
    covering = sorted((f for f in discover(Path(log_dir)) if f.kind == SNAPSHOT and f.offset >= first),
                      key=lambda f: f.offset, reverse=True)
    for snap in covering:
        if at_offset is not None and snap.offset - 1 > at_offset:
            continue
        if at_time is not None and _snapshot_header_ts(snap) * 1000 > at_time:
            continue
        return [snap] + segments, snap, snap.offset
    oldest = covering[-1]
    what = (f"offset {at_offset}" if at_offset is not None else f"{fmt_us(at_time)}")
    since = (f"offset {oldest.offset - 1}" if at_offset is not None
             else f"{fmt_ms(_snapshot_header_ts(oldest))} (offset {oldest.offset - 1})")
    raise DescribeError(f"{what} is before what the log covers: its segments start at offset {first}, so the "
                        f"replay starts from a snapshot, and the oldest one ({oldest.label}) holds the state as of "
                        f"{since}; no earlier state can be rebuilt")


def replay(log_dir, at_offset: int | None = None, at_time: int | None = None, err=None) -> tuple[Cluster, Reached]:
    """The cluster image at the requested point (``at_time`` in epoch microseconds).  Records the
    image rejects (:class:`ReplayError`) are reported on ``err`` and skipped."""
    err = err or sys.stderr
    if at_offset is not None and at_offset < 0:
        raise DescribeError(f"--at-offset {at_offset}: offsets start at 0")
    files, snap, start = _files(log_dir, at_offset, at_time)
    cluster = Cluster()
    reached = Reached(snapshot=snap)
    first_batch: tuple[int, int] | None = None  # (offset, timestamp) of the first log batch
    done = False

    def apply(recs: list[Rec]) -> None:
        for r in recs:
            try:
                cluster.apply(r.type, r.data, r.offset)
            except ReplayError as exc:
                print(f"{PROG}: {r.file} offset {r.offset} ({r.type}): {exc}; record skipped", file=err)

    for lf, batch in iter_batches(log_dir, include_skipped=True, chosen=Plan(files, None, start)):
        if lf.kind != SEGMENT:  # bootstrap.checkpoint, snapshot: the starting image, whole
            apply(batch)
            continue
        head, ts = batch[0], batch[0].timestamp
        if first_batch is None:
            first_batch = (head.offset, ts)
        if at_time is not None:
            if ts * 1000 > at_time:
                done = True
                break
        elif at_offset is not None:
            if head.offset > at_offset:
                done = True
                break
            upto = [r for r in batch if r.offset <= at_offset]
            if len(upto) < len(batch):
                print(f"{PROG}: note: offset {at_offset} is inside batch {head.offset}..{batch[-1].offset}, which "
                      "Kafka applies atomically; showing the state part-way through it", file=err)
            if upto[-1].offset == at_offset or len(upto) < len(batch):
                apply(upto)
                reached.offset, reached.timestamp = upto[-1].offset, ts
                done = True
                break
        apply(batch)
        reached.offset, reached.timestamp = batch[-1].offset, ts

    end = reached.offset if reached.offset is not None else (snap.offset - 1 if snap is not None else None)
    if at_offset is not None and not done and (end is None or at_offset > end):
        raise DescribeError(f"offset {at_offset} is past the end of the log "
                            f"({'it has no records' if end is None else f'last offset {end}'})")
    if at_time is not None and snap is None and first_batch is not None and reached.offset is None:
        raise DescribeError(f"{fmt_us(at_time)} is before the log's first record (offset {first_batch[0]}, written "
                            f"{fmt_ms(first_batch[1])})")
    return cluster, reached


# ------------------------------------------------------------------------------------------ views
def replication_factor(p: Partition) -> int:
    """TopicCommand.getReplicationFactor: during a reassignment, the replicas minus the adding ones."""
    return len(p.replicas) - len(p.adding) if (p.adding or p.removing) else len(p.replicas)


def available(c: Cluster, p: Partition) -> bool:
    br = c.brokers.get(p.leader)
    return p.leader != NO_LEADER and br is not None and not br.fenced


def select(c: Cluster, names: list[str], filters: dict[str, bool]) -> list[tuple[str, str, list[Partition], bool]]:
    """[(topic name, topic id, partitions to print, print the topic line)] in Kafka's order."""
    by_topic: dict[str, list[Partition]] = {}
    for (tid, _), p in c.partitions.items():
        by_topic.setdefault(tid, []).append(p)
    any_filter = any(filters.values())
    out = []
    for name in sorted(c.topic_ids):
        if names and name not in names:
            continue
        tid = c.topic_ids[name]
        parts = sorted(by_topic.get(tid, []), key=lambda p: p.partition_id)
        if any_filter:
            m = c.min_isr(tid)
            parts = [p for p in parts if
                     (filters["under_min_isr"] and len(p.isr) < m)
                     or (filters["at_min_isr"] and len(p.isr) == m)
                     or (filters["under_replicated"] and len(p.isr) < replication_factor(p))
                     or (filters["unavailable"] and not available(c, p))
                     or (filters["elr"] and bool(p.elr))]
        out.append((name, tid, parts, not any_filter))
    return out


def _ids(xs: list[int]) -> str:
    return ",".join(map(str, xs))


def topic_line(c: Cluster, name: str, tid: str, parts: list[Partition]) -> str:
    configs = c.configs.get((2, name), {})
    rf = replication_factor(parts[0]) if parts else 0
    return (f"Topic: {name}\tTopicId: {tid}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\t"
            f"Configs: {','.join(f'{k}={configs[k]}' for k in sorted(configs))}")


def partition_line(name: str, p: Partition) -> str:
    leader = "none" if p.leader == NO_LEADER else str(p.leader)
    line = (f"\tTopic: {name}\tPartition: {p.partition_id}\tLeader: {leader}\tReplicas: {_ids(p.replicas)}"
            f"\tIsr: {_ids(p.isr)}")
    if p.adding or p.removing:
        line += f"\tAdding Replicas: {_ids(p.adding)}\tRemoving Replicas: {_ids(p.removing)}"
    return line + f"\tElr: {_ids(p.elr)}\tLastKnownElr: {_ids(p.last_known_elr)}"


def partition_json(name: str, p: Partition) -> dict:
    dirs = [] if all(d == MIGRATING for d in p.directories) else list(p.directories)
    return {"topic": name, "topicId": p.topic_id, "partition": p.partition_id, "replicas": list(p.replicas),
            "isr": list(p.isr), "eligibleLeaderReplicas": list(p.elr), "lastKnownElr": list(p.last_known_elr),
            "leader": p.leader, "leaderEpoch": p.leader_epoch, "partitionEpoch": p.partition_epoch,
            "leaderRecoveryState": p.lrs, "addingReplicas": list(p.adding), "removingReplicas": list(p.removing),
            "directories": dirs}


def render(c: Cluster, names: list[str], filters: dict[str, bool], as_json: bool) -> str:
    rows = select(c, names, filters)
    if as_json:
        objs = [json.dumps(partition_json(name, p)) for name, _, parts, _ in rows for p in parts]
        return "[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n"
    lines = []
    for name, tid, parts, header in rows:
        if header:
            lines.append(topic_line(c, name, tid, parts))
        lines.extend(partition_line(name, p) for p in parts)
    return "".join(line + "\n" for line in lines)


# ------------------------------------------------------------------------------------------ silver
def _latest(rows: list[dict], key, at_offset, at_time, time_col) -> dict:
    """Per key, the last row valid at the point (offset <= N, or its start time <= T)."""
    out: dict = {}
    for r in sorted(rows, key=lambda r: r["offset"]):
        if at_offset is not None and r["offset"] > at_offset:
            continue
        t = r.get(time_col)
        if at_time is not None and (t is None or int(t.timestamp() * 1_000_000) > at_time):
            continue
        out[key(r)] = r
    return out


def from_silver(lake_root: str, cluster_name: str, at_offset: int | None, at_time: int | None):
    """The image at a point, from the silver tables of ``kraft-audit replay`` (read with delta-rs)."""
    from lake import catalog
    from lake.delta import Lake  # deltalake only; no Spark

    lake = Lake(lake_root)
    hist_t, topics_t = catalog.PARTITION_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY
    brokers_t = catalog.BROKER_STATE_HISTORY
    for t in (hist_t.name, topics_t.name, brokers_t.name):
        if not lake.exists(t):
            raise DescribeError(f"{lake_root}: no silver table {t}; run kraft-audit replay --cluster {cluster_name}")
    flt = [("cluster", "=", cluster_name)]
    hist = lake.read_arrow(hist_t.name, filters=flt).to_pylist()
    if not hist:
        raise DescribeError(f"{lake_root}: no history for cluster {cluster_name!r}")
    topics = lake.read_arrow(topics_t.name, filters=flt).to_pylist()
    brokers = lake.read_arrow(brokers_t.name, filters=flt).to_pylist()
    c = Cluster()
    for r in _latest(topics, lambda r: r["topic_id"], at_offset, at_time, "timestamp").values():
        if not r["deleted"]:
            c.topics[r["topic_id"]] = r["topic_name"]
            c.topic_ids[r["topic_name"]] = r["topic_id"]
            if r["min_isr_resolved_from_log"]:
                c.configs.setdefault((2, r["topic_name"]), {})["min.insync.replicas"] = str(r["min_insync_replicas"])
    for r in _latest(brokers, lambda r: r["broker_id"], at_offset, at_time, "timestamp").values():
        if r["registered"]:
            c.brokers[r["broker_id"]] = Broker(r["broker_id"], r["broker_epoch"], r["incarnation_id"], r["fenced"],
                                               r["in_controlled_shutdown"], list(r["log_dirs"] or []), r["rack"])
    last = None
    for (tid, pid), r in _latest(hist, lambda r: (r["topic_id"], r["partition_id"]), at_offset, at_time,
                                 "valid_from_timestamp").items():
        last = max(last or -1, r["offset"])
        if r.get("deleted") or tid not in c.topics:
            continue
        c.partitions[(tid, pid)] = Partition(
            tid, pid, list(r["replicas"]), list(r["isr"]), r["leader"], r["leader_epoch"], r["partition_epoch"],
            list(r["removing_replicas"] or []), list(r["adding_replicas"] or []),
            list(r["eligible_leader_replicas"] or []), list(r["last_known_elr"] or []), r["leader_recovery_state"],
            list(r["directories"] or []))
    return c, Reached(last, None, None)


# ------------------------------------------------------------------------------------------ command
def run(args, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        at_time = parse_time(args.at_time) if args.at_time is not None else None
        names = topic_names(args.topic)
        if args.lake or args.cluster:
            if args.log_dir:
                raise DescribeError("give either --log-dir or --lake/--cluster, not both")
            if not (args.lake and args.cluster):
                raise DescribeError("--lake and --cluster go together")
            cluster, reached = from_silver(args.lake, args.cluster, args.at_offset, at_time)
        elif not args.log_dir:
            raise DescribeError("give --log-dir DIR (a __cluster_metadata-0 folder or the data directory holding it)")
        else:
            cluster, reached = replay(args.log_dir, at_offset=args.at_offset, at_time=at_time, err=err)
    except DescribeError as exc:
        print(f"{PROG}: {exc}", file=err)
        return 2
    if at_time is not None:
        where = (f"offset {reached.offset}, batch written {fmt_ms(reached.timestamp)}" if reached.offset is not None
                 else f"snapshot {reached.snapshot.label}" if reached.snapshot is not None else "no log record")
        print(f"{PROG}: state at {fmt_us(at_time)}: after {where}", file=err)
    missing = [n for n in names if n not in cluster.topic_ids]
    for n in missing:
        print(f"{PROG}: topic '{n}' does not exist at that point", file=err)
    filters = {"under_min_isr": args.under_min_isr_partitions, "at_min_isr": args.at_min_isr_partitions,
               "under_replicated": args.under_replicated_partitions, "unavailable": args.unavailable_partitions,
               "elr": args.elr_partitions}
    out.write(render(cluster, names, filters, args.json))
    out.flush()
    return 2 if names and len(missing) == len(names) else 0
