"""``kraft-audit describe``: ``kafka-topics.sh --describe`` for any point in a metadata log's history.

The cluster image is replayed from a log directory through the replay pipeline (no Spark), up to the
point (:mod:`controller_core.point`):

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

``--json``: an array, one object per partition line (same filters); ``directories`` has one entry per replica,
MIGRATING (``AAAAAAAAAAAAAAAAAAAAAA``) where the log carries none (MV below 3.7-IV2, controller-rules §1.2-4, B10).

``--brokers``: the registered brokers at the point instead of the topics, one line each (``--json``: one object
each): epoch, incarnation, fenced, in controlled shutdown, rack, log directories and, where a record carries
them (RegisterBrokerRecord v4 / BrokerRegistrationChangeRecord v3, KIP-1066), the cordoned log directories.

``--lake/--cluster`` prints the same from the replayed tables: partitions and brokers from silver, the Configs line
from the topics' ConfigRecords in bronze.
"""
from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core import threads as _threads
from controller_core.codec.arrowutil import from_numpy, to_numpy
from controller_core.image import NO_LEADER, TOPIC, Cluster, Partition, replica_dirs
from controller_core.point import Reached, fmt_ms, fmt_us, replay_to, with_partitions
from controller_core.vector import fold
from jobs.common import CannotRun, parse_time, warn_quarantined

PROG = "kraft-audit describe"



class DescribeError(CannotRun):
    """A request that cannot be answered (bad argument, no such table in the lake): exit 2."""


# ------------------------------------------------------------------------------------------ parsing
def topic_names(values: list[str] | None) -> list[str]:
    names: list[str] = []
    for v in values or []:
        for name in v.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


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


class _IdLists:
    """``_ids`` remembered per distinct list for one rendering: a cluster's replica, ISR and ELR lists repeat (a
    replication factor of 3 over a few brokers makes a few hundred), and joining each again was a quarter of the
    text's time at 100 k partitions.  At most four entries per partition, dropped with the rendering."""

    def __init__(self):
        self._seen: dict[tuple, str] = {}

    def __call__(self, xs: list[int]) -> str:
        key = tuple(xs)
        text = self._seen.get(key)
        if text is None:
            text = self._seen[key] = _ids(xs)
        return text


def topic_line(c: Cluster, name: str, tid: str, count: int, rf: int) -> str:
    """The topic's line: ``count`` partitions, ``rf`` the replication factor of its first partition (0: none)."""
    configs = c.configs.get((2, name), {})
    return (f"Topic: {name}\tTopicId: {tid}\tPartitionCount: {count}\tReplicationFactor: {rf}\t"
            f"Configs: {','.join(f'{k}={configs[k]}' for k in sorted(configs))}")


def partition_line(name: str, p: Partition, ids=_ids) -> str:
    leader = "none" if p.leader == NO_LEADER else str(p.leader)
    line = (f"\tTopic: {name}\tPartition: {p.partition_id}\tLeader: {leader}\tReplicas: {ids(p.replicas)}"
            f"\tIsr: {ids(p.isr)}")
    if p.adding or p.removing:
        line += f"\tAdding Replicas: {ids(p.adding)}\tRemoving Replicas: {ids(p.removing)}"
    return line + f"\tElr: {ids(p.elr)}\tLastKnownElr: {ids(p.last_known_elr)}"


def partition_json(name: str, p: Partition) -> dict:
    # §1.2-4 / B10: a log without directories (MV below 3.7-IV2) means MIGRATING for every replica, as Kafka reports
    dirs = replica_dirs(p.directories, len(p.replicas))
    return {"topic": name, "topicId": p.topic_id, "partition": p.partition_id, "replicas": list(p.replicas),
            "isr": list(p.isr), "eligibleLeaderReplicas": list(p.elr), "lastKnownElr": list(p.last_known_elr),
            "leader": p.leader, "leaderEpoch": p.leader_epoch, "partitionEpoch": p.partition_epoch,
            "leaderRecoveryState": p.lrs, "addingReplicas": list(p.adding), "removingReplicas": list(p.removing),
            "directories": dirs}


def broker_json(c: Cluster, b: int) -> dict:
    br = c.brokers[b]
    out = {"broker": b, "epoch": br.epoch, "incarnationId": br.incarnation_id, "fenced": br.fenced,
           "inControlledShutdown": br.in_controlled_shutdown, "rack": br.rack, "logDirs": list(br.log_dirs)}
    if getattr(br, "cordoned_log_dirs", None) is not None:  # only where a record carried them (KIP-1066)
        out["cordonedLogDirs"] = list(br.cordoned_log_dirs)
    return out


def render_brokers(c: Cluster, as_json: bool) -> str:
    docs = [broker_json(c, b) for b in sorted(c.brokers)]
    if as_json:
        return "[\n" + ",\n".join(json.dumps(d) for d in docs) + "\n]\n" if docs else "[]\n"
    lines = []
    for d in docs:
        line = (f"Broker: {d['broker']}\tEpoch: {d['epoch']}\tIncarnationId: {d['incarnationId']}\t"
                f"Fenced: {str(d['fenced']).lower()}\tInControlledShutdown: {str(d['inControlledShutdown']).lower()}\t"
                f"Rack: {d['rack'] if d['rack'] is not None else 'none'}\tLogDirs: {','.join(d['logDirs'])}")
        if "cordonedLogDirs" in d:
            line += f"\tCordonedLogDirs: {','.join(d['cordonedLogDirs'])}"
        lines.append(line)
    return "".join(line + "\n" for line in lines)


def render(c: Cluster, names: list[str], filters: dict[str, bool], as_json: bool) -> str:
    rows = select(c, names, filters)
    if as_json:
        objs = [json.dumps(partition_json(name, p)) for name, _, parts, _ in rows for p in parts]
        return "[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n"
    lines = []
    ids = _IdLists()
    for name, tid, parts, header in rows:
        if header:
            lines.append(topic_line(c, name, tid, len(parts), replication_factor(parts[0]) if parts else 0))
        lines.extend(partition_line(name, p, ids) for p in parts)
    return "".join(line + "\n" for line in lines)


def render_state(c: Cluster, history: pa.Table, names: list[str]) -> str:
    """:func:`render`'s text without a filter, from the partition history at the point (``point.replay_to``) instead of
    the image's Partition objects: the partition lines are made a column at a time (Arrow string kernels), the
    topic lines per topic.  Making a Partition object and formatting a line per partition in Python was half of
    ``describe``'s time; :func:`render` over ``point.with_partitions`` stays the reference (the tests hold the two
    to the same text)."""
    shown = sorted(n for n in c.topic_ids if not names or n in names)  # Kafka's order: topics by name
    shown_ids = [c.topic_ids[n] for n in shown]
    state = fold.state_at(history)
    rank = to_numpy(pc.fill_null(pc.index_in(state.column("topic_id"), value_set=pa.array(shown_ids, pa.string())),
                                 -1), np.int64)
    pid = to_numpy(state.column("partition_id"), np.int64)
    rows = np.flatnonzero(rank >= 0)
    rows = rows[np.lexsort((pid[rows], rank[rows]))]  # then partitions by id
    rows_at = from_numpy(rows)
    part = state.select(["partition_id", "leader", "replicas", "isr", "adding_replicas", "removing_replicas",
                         "eligible_leader_replicas", "last_known_elr"]).take(rows_at)

    def length(column: str) -> np.ndarray:
        return to_numpy(pc.fill_null(pc.list_value_length(part.column(column)), 0), np.int64)

    names_col = pa.array(shown, pa.string()).take(from_numpy(rank[rows]))
    adding, removing = length("adding_replicas"), length("removing_replicas")
    moving = (adding > 0) | (removing > 0)
    # the partition lines, in two halves on two threads when the process may use two cores (Arrow's string
    # kernels hold no GIL)
    cores = _threads.available()
    if _threads.worth(cores, len(rows)):
        half = len(rows) // 2
        pieces = list(_threads.pool(cores).map(lambda lo_hi: _partition_lines(part, names_col, moving, *lo_hi),
                                               [(0, half), (half, len(rows))]))
        lines = pa.chunked_array([c for piece in pieces for c in piece.chunks], pa.string())
    else:
        lines = _partition_lines(part, names_col, moving, 0, len(rows))
    # the topic lines: each topic's partition count, and the replication factor of its first partition
    counts = np.bincount(rank[rows], minlength=len(shown))
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    replicas = length("replicas")
    rf = np.where(moving, replicas - adding, replicas)
    heads = pa.array([topic_line(c, name, tid, int(counts[k]), int(rf[first[k]]) if counts[k] else 0)
                      for k, (name, tid) in enumerate(zip(shown, shown_ids))], pa.string())
    # every topic's line, then its partitions' lines, as one Arrow column (a Python string per line, joined, was a
    # third of this function): topic k's line goes before its first partition's
    at = np.empty(len(heads) + len(lines), np.int64)
    at[first + np.arange(len(heads))] = np.arange(len(heads))
    part_place = np.ones(len(at), bool)
    part_place[first + np.arange(len(heads))] = False
    at[part_place] = len(heads) + np.arange(len(lines))
    pieces = lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]
    every = pa.concat_arrays([heads.cast(pa.large_string()), *(p.cast(pa.large_string()) for p in pieces)])
    eol = pa.scalar("\n", pa.large_string())
    return _joined(pc.binary_join_element_wise(every.take(from_numpy(at)), pa.scalar("", pa.large_string()), eol))


def _partition_lines(part: pa.Table, names: pa.Array, moving: np.ndarray, lo: int, hi: int) -> pa.ChunkedArray:
    """The ``kafka-topics.sh --describe`` lines of rows [lo, hi) of ``part`` (a partition's state a row; ``names``
    its topic's name, ``moving`` whether it is being reassigned)."""
    part, names = part.slice(lo, hi - lo), names.slice(lo, hi - lo)

    def ids(column: str) -> pa.Array:  # ",".join of each list ("" for an empty or null one)
        col = part.column(column)
        return pc.fill_null(pc.binary_join(col.cast(pa.list_(pa.string())), ","), "")

    leader = part.column("leader")
    leader_text = pc.if_else(pc.equal(leader, NO_LEADER), "none", leader.cast(pa.string()))
    reassigning = pc.if_else(from_numpy(moving[lo:hi]), pc.binary_join_element_wise(
        "\tAdding Replicas: ", ids("adding_replicas"), "\tRemoving Replicas: ", ids("removing_replicas"), ""), "")
    lines = pc.binary_join_element_wise(
        "\tTopic: ", names, "\tPartition: ", part.column("partition_id").cast(pa.string()), "\tLeader: ",
        leader_text, "\tReplicas: ", ids("replicas"), "\tIsr: ", ids("isr"), reassigning,
        "\tElr: ", ids("eligible_leader_replicas"), "\tLastKnownElr: ", ids("last_known_elr"), "")
    return lines if isinstance(lines, pa.ChunkedArray) else pa.chunked_array([lines], pa.string())


def _joined(text: pa.Array) -> str:
    """The strings of ``text`` (large_string, no nulls: 64-bit offsets, past 2 GB of text) one after the other:
    the bytes its offsets span."""
    if not len(text):
        return ""
    offsets = np.frombuffer(text.buffers()[1], np.int64)[text.offset:text.offset + len(text) + 1]
    return memoryview(text.buffers()[2])[int(offsets[0]):int(offsets[-1])].tobytes().decode("utf-8")


# ------------------------------------------------------------------------------------------ silver
def from_silver(lake_root: str, cluster_name: str, at_offset: int | None, at_time: int | None):
    """The image at a point from the silver tables of ``kraft-audit replay`` (read with delta-rs): the
    tables cut at the point (:func:`audit.run.truncate`), as the what-if image (:mod:`audit.image_at`).
    Configs: the topics' ConfigRecords from bronze (:func:`topic_configs`), as ``--log-dir`` prints them."""
    from audit.image_at import whatif_spec
    from audit.run import offset_at_time, truncate
    from controller_core.rules.whatif import load_cluster
    from lake import catalog, gold
    from lake.delta import Lake  # deltalake only; no Spark

    lake = Lake(lake_root, None, backend="delta-rs")
    for t in (catalog.PARTITION_STATE_HISTORY.name, catalog.TOPIC_CONFIG_HISTORY.name,
              catalog.BROKER_STATE_HISTORY.name):
        if not lake.exists(t):
            raise DescribeError(f"no silver table {t}; run kraft-audit replay --cluster {cluster_name}",
                                f"lake {lake_root}")
    try:
        tables, end_offset, _ = gold.silver_from_lake(lake, cluster_name)
    except gold.GoldError as exc:
        raise DescribeError(str(exc), f"lake {lake_root}") from None
    at = end_offset if at_offset is None else at_offset
    if at_time is not None:
        at = offset_at_time(tables, at_time)
        if at is None:
            raise DescribeError(f"{fmt_us(at_time)} is before the first record of cluster {cluster_name!r}",
                                f"lake {lake_root}")
    cut, _ = truncate(tables, at)
    image = load_cluster(whatif_spec(cut))
    # the Configs line: the topics' own ConfigRecords up to the point, as --log-dir prints them (silver keeps only
    # the resolved settings; bronze holds every ConfigRecord)
    for key in [k for k in image.configs if k[0] == TOPIC]:
        del image.configs[key]
    image.configs.update(topic_configs(lake, cluster_name, at))
    return image, Reached(at, None, None)


_CONFIG_TYPES = ("TOPIC_RECORD", "REMOVE_TOPIC_RECORD", "CONFIG_RECORD")


def topic_configs(lake, cluster_name: str, at: int) -> dict[tuple[int, str], dict[str, str]]:
    """{(TOPIC, name): {key: value}} after every topic ConfigRecord of the cluster's bronze records up to offset
    ``at``: from the segments, seeded by the newest snapshot at or before ``at`` when there is one (the
    replay's own choice of starting point); a RemoveTopicRecord drops the topic's configs (§1.4)."""
    from lake import catalog

    cols = ["source_file", "source_kind", "offset", "record_type", "topic_id", "topic_name",
            "config_resource_type", "config_resource_name", "config_name", "config_value"]
    rows = lake.read_arrow(catalog.METADATA_RECORDS.name, columns=cols,
                           filters=[("cluster", "=", cluster_name), ("record_type", "in", list(_CONFIG_TYPES))])
    rows = rows.to_pylist()

    def snapshot_end(r) -> int:
        return int(r["source_file"].rsplit("/", 1)[-1].split("-")[0])

    snaps = sorted({snapshot_end(r) for r in rows if r["source_kind"] == "snapshot"})
    snaps = [e for e in snaps if e <= at + 1]
    start = snaps[-1] if snaps else 0
    seed = [r for r in rows if r["source_kind"] == "snapshot" and snapshot_end(r) == start] if snaps else []
    seen, ordered = set(), []
    for r in sorted((r for r in rows if r["source_kind"] != "snapshot" and start <= r["offset"] <= at),
                    key=lambda r: r["offset"]):
        if r["offset"] not in seen:  # the same offset in two copies of a segment: once
            seen.add(r["offset"])
            ordered.append(r)
    names: dict[str, str] = {}
    configs: dict[tuple[int, str], dict[str, str]] = {}
    for r in [*sorted(seed, key=lambda r: r["offset"]), *ordered]:
        if r["record_type"] == "TOPIC_RECORD":
            names[r["topic_id"]] = r["topic_name"]
        elif r["record_type"] == "REMOVE_TOPIC_RECORD":
            configs.pop((TOPIC, names.pop(r["topic_id"], None)), None)
        elif r["config_resource_type"] == TOPIC:
            kv = configs.setdefault((TOPIC, r["config_resource_name"]), {})
            if r["config_value"] is None:
                kv.pop(r["config_name"], None)
            else:
                kv[r["config_name"]] = r["config_value"]
    return configs


# ------------------------------------------------------------------------------------------ command
def run(args, out=None, err=None) -> int:
    """Errors (DescribeError, the log's PointError, a missing path) propagate: jobs.cli makes them one
    line and exit 2."""
    out = out or sys.stdout
    err = err or sys.stderr
    at_time = parse_time(args.at_time) if args.at_time is not None else None
    if getattr(args, "quorum", False) and getattr(args, "brokers", False):
        raise DescribeError("give either --quorum or --brokers, not both")
    if getattr(args, "quorum", False):
        return describe_quorum(args, at_time, out, err)
    names = topic_names(args.topic)
    if args.lake or args.cluster:
        if args.log_dir:
            raise DescribeError("give either --log-dir or --lake/--cluster, not both")
        if not (args.lake and args.cluster):
            raise DescribeError("--lake and --cluster go together")
        cluster, reached = from_silver(args.lake, args.cluster, args.at_offset, at_time)
        history = None  # the image has its partitions
    elif not args.log_dir:
        raise DescribeError("give --log-dir DIR (a __cluster_metadata-0 folder or the data directory holding it)")
    else:
        spans: list = []
        cluster, history, reached = replay_to(args.log_dir, at_offset=args.at_offset, at_time=at_time, err=err,
                                              prog=PROG, quarantine=spans)
        warn_quarantined(PROG, args.log_dir, err, spans)  # what this replay could not decode
    if at_time is not None:
        where = (f"offset {reached.offset}, batch written {fmt_ms(reached.timestamp)}" if reached.offset is not None
                 else f"snapshot {reached.snapshot.label}" if reached.snapshot is not None else "no log record")
        print(f"{PROG}: state at {fmt_us(at_time)}: after {where}", file=err)
    if getattr(args, "brokers", False):
        out.write(render_brokers(cluster, args.json))
        out.flush()
        return 0
    missing = [n for n in names if n not in cluster.topic_ids]
    for n in missing:
        print(f"{PROG}: topic '{n}' does not exist at that point", file=err)
    filters = {"under_min_isr": args.under_min_isr_partitions, "at_min_isr": args.at_min_isr_partitions,
               "under_replicated": args.under_replicated_partitions, "unavailable": args.unavailable_partitions,
               "elr": args.elr_partitions}
    if history is not None and not args.json and not any(filters.values()):
        out.write(render_state(cluster, history, names))
    else:
        if history is not None:
            cluster = with_partitions(cluster, history)
        out.write(render(cluster, names, filters, args.json))
    out.flush()
    return 2 if names and len(missing) == len(names) else 0


# ------------------------------------------------------------------------------------------ --quorum
def describe_quorum(args, at_time: int | None, out, err) -> int:
    """The quorum as of the point: from the log's LeaderChange, VotersRecord, KRaftVersionRecord and
    (Un)RegisterControllerRecord records (controller_core/quorum.py)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from controller_core import logdir, quorum
    from controller_core.replay import read_log_dir

    if args.lake or args.cluster:
        if not (args.lake and args.cluster) or args.log_dir:
            raise DescribeError("--quorum reads --log-dir DIR, or --lake and --cluster")
        hist, records, node = _quorum_from_lake(args.lake, args.cluster)
    elif not args.log_dir:
        raise DescribeError("--quorum reads a log directory (--log-dir DIR) or the lake (--lake, --cluster)")
    else:
        spans: list = []
        records, _ = read_log_dir(args.log_dir, spans)
        if records is None:
            from controller_core.replay import nothing_to_replay

            raise DescribeError(nothing_to_replay(args.log_dir, spans))
        warn_quarantined(PROG, args.log_dir, err, spans)
        hist = quorum.quorum_history(records)
        node = quorum.meta_properties(logdir.resolve_log_dir(args.log_dir)[0])
    if args.at_offset is not None:
        hist = hist.filter(pc.less_equal(hist.column("offset"), args.at_offset))
    if at_time is not None:
        hist = hist.filter(pc.fill_null(pc.less_equal(pc.cast(hist.column("timestamp"), pa.int64()), at_time), False))
    doc = quorum.summary(hist, node)
    doc["stalls"] = _stalls(records, args.at_offset, at_time)
    if args.json:
        out.write(json.dumps(doc, default=lambda x: fmt_us(int(x.timestamp() * 1_000_000)) if hasattr(x, "timestamp")
                             else str(x)) + "\n")
        return 0
    lines = []
    if doc["leaderId"] is None:
        lines.append("ActiveController: unknown (no LeaderChange record in the log read)")
    else:
        since = next(e for e in reversed(doc["elections"]) if e["offset"] == doc["leaderSince"])
        lines.append(f"ActiveController: {doc['leaderId']}\tEpoch: {doc['epoch']}\tSince: offset {doc['leaderSince']}"
                     f" ({_when(since['time'])})")
    voters = ",".join(str(v["voterId"]) + (f" (directory {v['directoryId']})" if v["directoryId"] else "")
                      for v in doc["voters"])
    lines.append(f"Voters: {voters or 'unknown'}" + (f"\tFrom: {doc['votersFrom']}" if doc["votersFrom"] else ""))
    ctl = ", ".join(f"{c['controllerId']} (incarnation {c['incarnationId']}, offset {c['registeredAt']})"
                    for c in doc["controllers"])
    lines.append(f"RegisteredControllers: {ctl or 'none in the log read'}")
    dd = doc.get("dataDirectory") or {}
    if dd.get("nodeId") is not None:
        verdict = "a voter" if dd["isVoter"] else "not a voter"
        if dd["directoryMatches"] is False:
            verdict += ", but its directory.id is not the one the VotersRecord lists"
        lines.append(f"DataDirectory: node.id {dd['nodeId']}, directory.id {dd['directoryId']}: {verdict}")
    gap_s = _gap_ms() / 1000
    lines.append(f"Stalls: {len(doc['stalls'])} (no record for {gap_s:g} s or more in a log with NoOp heartbeats)")
    for g in doc["stalls"]:
        lines.append(f"\tAfterOffset: {g['afterOffset']}\tFrom: {_when_ms(g['fromMs'])}\tFor: {g['ms']} ms"
                     f"\tEpochs: {g['epochBefore']} -> {g['epochAfter']}")
    kv = doc.get("kraftVersion")
    if kv is not None:
        lines.append(f"KRaftVersion: {kv['level']}\tSince: offset {kv['offset']}")
    lines.append(f"VoterChanges: {len(doc['voterChanges'])}")
    for c in doc["voterChanges"]:
        now = ",".join(f"{v['voterId']} (directory {v['directoryId']})" for v in c["voters"])
        lines.append(f"\tOffset: {c['offset']}\tTime: {_when(c['time'])}\tEpoch: {c['epoch']}\tVoters: {now or '-'}"
                     f"\tAdded: {','.join(map(str, c['added'])) or '-'}\tRemoved: {','.join(map(str, c['removed'])) or '-'}")
    lines.append(f"Elections: {len(doc['elections'])}")
    for e in doc["elections"]:
        silent = f"\tSilentBefore: {e['silentMs']} ms" if e["silentMs"] is not None else ""
        granted = ",".join(map(str, e["grantingVoters"] or []))
        lines.append(f"\tOffset: {e['offset']}\tTime: {_when(e['time'])}\tEpoch: {e['epoch']}\tLeader: {e['leaderId']}"
                     f"\tGrantedBy: {granted or '-'}{silent}")
    out.write("\n".join(lines) + "\n")
    return 0


def _quorum_from_lake(lake_root: str, cluster: str):
    """(quorum_history of the cluster's last replay, its segment records' times for the stalls, no data
    directory to check: the lake holds the records, not meta.properties)."""
    import pyarrow.compute as pc

    from controller_core.pipeline import RECORD_TIME_COLUMNS
    from lake import catalog
    from lake.delta import Lake

    lake = Lake(lake_root, None, backend="delta-rs")
    if not lake.exists(catalog.QUORUM_HISTORY.name):
        raise DescribeError(f"no {catalog.QUORUM_HISTORY.name} table in {lake.root}: run kraft-audit replay "
                            f"--cluster {cluster} (again, with this version)")
    flt = [("cluster", "=", cluster)]
    hist = lake.read_arrow(catalog.QUORUM_HISTORY.name, filters=flt)
    if "cluster" in hist.column_names:
        hist = hist.drop_columns(["cluster"])
    times = lake.read_arrow(catalog.METADATA_RECORDS.name, columns=list(RECORD_TIME_COLUMNS) + ["source_kind"],
                            filters=flt)
    return hist.sort_by([("offset", "ascending")]), times, None


def _when(ts) -> str:
    return fmt_us(int(ts.timestamp() * 1_000_000)) if ts is not None else "?"


def _when_ms(ms: int) -> str:
    return fmt_us(int(ms) * 1000)


def _gap_ms() -> int:
    from lake.config import load_config

    return int(load_config()["audit"]["metadata_gap_ms"])


def _stalls(records, at_offset: int | None, at_time: int | None) -> list[dict]:
    """The metadata gaps (audit/gaps.py: no record for audit.metadata_gap_ms) up to the point: the quorum
    stalled or was down."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from audit.gaps import metadata_gaps
    from controller_core.pipeline import RECORD_TIME_COLUMNS

    if records is None:
        return []
    seg = records.filter(pc.equal(records.column("source_kind"), "segment"))
    times = seg.select(list(RECORD_TIME_COLUMNS))
    times = times.set_column(1, "timestamp", pc.cast(times.column("timestamp"), pa.timestamp("us", tz="UTC")))
    if at_offset is not None:
        times = times.filter(pc.less_equal(times.column("offset"), at_offset))
    if at_time is not None:
        times = times.filter(pc.less_equal(pc.cast(times.column("timestamp"), pa.int64()), at_time))
    g = metadata_gaps(times, _gap_ms())
    return [{"afterOffset": int(a), "beforeOffset": int(b), "fromMs": int(s), "ms": int(e - s),
             "epochBefore": int(x), "epochAfter": int(y)}
            for a, b, s, e, x, y in zip(g.before_offset, g.after_offset, g.start_ms, g.end_ms, g.before_epoch,
                                        g.after_epoch)]
