"""Candidate leaders for a leaderless partition: clean ones first, then KIP-966's unclean recovery ranking.

Kafka never shipped the Unclean Recovery Manager (controller-rules §3.1); this module makes the decision
it was designed to make (§3.2), offline, from the partition's state at a point of the log, the brokers'
state at that point and per-replica log info (``audit.loginfo`` rows).

Steps, named after the KIP's order:

1. **Clean candidates.** An active ISR member (the controller elects it by itself), then active ELR
   members.  "Active" is the controller's ``acceptable``: registered, unfenced, not in controlled
   shutdown.  Both are ranked in replica order, the order in which the controller's election walks the
   candidates (controller-rules §2.3; ELR order carries no meaning, §1.1).  A clean candidate is
   recommended under every strategy: the strategy only governs *unclean* recovery.
2. **Validate replies.** A log-info row is discarded when its ErrorCode ≠ 0, when its BrokerEpoch is not
   the broker's registration epoch at that point ("stale broker epoch": the broker restarted since it
   answered), or when its CurrentLeaderEpoch is not the partition's leader epoch ("stale leader epoch").
   Offline collection cannot always supply these two numbers: BrokerEpoch -1 means "not known" and is
   accepted with a note; ``leader_epoch_check="log"`` accepts a CurrentLeaderEpoch read from the log
   (the leader-epoch checkpoint, always lower than a leaderless partition's epoch, because electing
   ``-1`` bumps the epoch without writing data) when it is not *greater* than the partition's.
3. **Rank** valid replies: highest LastWrittenLeaderEpoch, then longest LogEndOffset, ties in replica order.
4. **Decide** by strategy:

   * ``aggressive``: the best-ranked valid reply of an active broker.
   * ``balanced``: the same, but only once every broker that may hold committed data has replied validly
     and is active: the members of ISR, ELR and LastKnownElr (KIP steps 3 and 4: wait for fenced ELR
     members; recover once all LastKnownELR members are unfenced and replied).  A member in controlled
     shutdown is waited for too: it is on its way to a restart, cannot be elected meanwhile, and may hold
     the longest log, which choosing another replica would throw away.  When all three are empty
     every replica is required: nothing then says which replica holds the committed data.
   * ``none``: nothing is recommended (KIP "None": wait for the operator); the facts are listed.

``estimated_records_lost`` is the best LogEndOffset among valid replies minus the row's own: an estimate,
since logs of different epochs may have diverged below their ends.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from controller_core.brokers import active

STRATEGIES = ("balanced", "aggressive", "none")
CLEAN_ISR, CLEAN_ELR, UNCLEAN = "clean_isr", "clean_elr", "unclean_longest_log"

STALE_BROKER_EPOCH = "stale broker epoch"
STALE_LEADER_EPOCH = "stale leader epoch"
NO_LOG_INFO = "no log info"
NOT_A_REPLICA = "not a replica of the partition"

CANDIDATE_SCHEMA = pa.schema([
    pa.field("topic_id", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("broker", pa.int32(), nullable=False),
    pa.field("rank", pa.int32()),  # 1 = best; null for a broker whose reply was discarded or missing
    pa.field("recommended", pa.bool_(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("in_isr", pa.bool_(), nullable=False),
    pa.field("in_elr", pa.bool_(), nullable=False),
    pa.field("in_last_known_elr", pa.bool_(), nullable=False),
    pa.field("alive_now", pa.bool_(), nullable=False),
    pa.field("last_written_leader_epoch", pa.int32()),
    pa.field("log_end_offset", pa.int64()),
    pa.field("estimated_records_lost", pa.int64()),
    pa.field("excluded_reason", pa.string()),
    pa.field("strategy", pa.string(), nullable=False),
    pa.field("note", pa.string(), nullable=False),
])

PARTITION_SCHEMA = pa.schema([
    pa.field("topic_id", pa.string()), pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()), pa.field("replicas", pa.list_(pa.int32())),
    pa.field("isr", pa.list_(pa.int32())), pa.field("eligible_leader_replicas", pa.list_(pa.int32())),
    pa.field("last_known_elr", pa.list_(pa.int32())), pa.field("leader", pa.int32()),
    pa.field("leader_epoch", pa.int32()),
])

BROKER_SCHEMA = pa.schema([
    pa.field("broker_id", pa.int32()), pa.field("registered", pa.bool_()), pa.field("broker_epoch", pa.int64()),
    pa.field("fenced", pa.bool_()), pa.field("in_controlled_shutdown", pa.bool_()),
])

_DESCRIBE_KEYS = {"topicId": "topic_id", "eligibleLeaderReplicas": "eligible_leader_replicas",
                  "lastKnownElr": "last_known_elr", "leaderEpoch": "leader_epoch"}


@dataclass(frozen=True)
class BrokerState:
    registered: bool = False
    broker_epoch: int = -1
    fenced: bool = True
    in_controlled_shutdown: bool = False

    @property
    def alive(self) -> bool:
        """Up and heartbeating (registered, unfenced): the ``alive_now`` fact of a candidate row.  A
        broker in controlled shutdown is alive but may not lead; leading is :attr:`acceptable`."""
        return self.registered and not self.fenced

    @property
    def acceptable(self) -> bool:
        """Could lead now: ``active(b)``, the one definition in :mod:`controller_core.brokers`."""
        return active(self.registered, self.fenced, self.in_controlled_shutdown)


def normalise_partition(p: dict) -> dict:
    """Accept ``describe --json`` keys (topicId, eligibleLeaderReplicas, ...) as well as snake_case."""
    out = {_DESCRIBE_KEYS.get(k, k): v for k, v in p.items()}
    for k in ("isr", "eligible_leader_replicas", "last_known_elr"):
        out[k] = list(out.get(k) or [])
    return out


def _inactive_state(st: BrokerState) -> str:
    return "not registered" if not st.registered else "fenced" if st.fenced else "in controlled shutdown"


def _broker(brokers: dict, b: int) -> BrokerState:
    s = brokers.get(b)
    if s is None:
        return BrokerState()
    if isinstance(s, BrokerState):
        return s
    return BrokerState(bool(s.get("registered", True)), int(s.get("broker_epoch", -1)),
                       bool(s.get("fenced", False)), bool(s.get("in_controlled_shutdown", False)))


def _validate(info: dict, state: BrokerState, leader_epoch: int, leader_epoch_check: str) -> tuple[str | None, str]:
    """(excluded reason or None, remark) for one log-info reply."""
    if info["error_code"] != 0:
        return f"error {info['error_code']}: {info.get('error_message') or 'no message'}", ""
    remark = ""
    if info["broker_epoch"] == -1:
        remark = "its broker epoch was not supplied, so a restart since collection cannot be ruled out"
    elif info["broker_epoch"] != state.broker_epoch:
        return (f"{STALE_BROKER_EPOCH} ({info['broker_epoch']}, registered with {state.broker_epoch})"
                if state.registered else f"{STALE_BROKER_EPOCH} (broker not registered)"), ""
    cle = info["current_leader_epoch"]
    if leader_epoch_check == "strict" and cle != leader_epoch or leader_epoch_check == "log" and cle > leader_epoch:
        return f"{STALE_LEADER_EPOCH} ({cle}, partition at {leader_epoch})", ""
    return None, remark


def required_replies(p: dict) -> list[int]:
    """Who balanced recovery waits for: ISR ∪ ELR ∪ LastKnownElr, else every replica (replica order
    first, then members that are not replicas)."""
    need = set(p["isr"]) | set(p["eligible_leader_replicas"]) | set(p["last_known_elr"])
    if not need:
        return list(p["replicas"])
    return [b for b in p["replicas"] if b in need] + sorted(need - set(p["replicas"]))


def recovery_candidates(partition: dict, brokers: dict, log_info: list[dict], strategy: str = "balanced",
                        leader_epoch_check: str = "strict") -> list[dict]:
    """Ranked candidate rows (CANDIDATE_SCHEMA fields) for one leaderless partition; [] if it has a leader.

    ``partition``: topic_id, partition, replicas, isr, eligible_leader_replicas, last_known_elr, leader,
    leader_epoch (or the describe --json keys).  ``brokers``: broker id -> BrokerState or a dict of its
    fields.  ``log_info``: rows as ``loginfo.read_log_info`` makes them (rows of other partitions are
    ignored; a broker's first row counts).  ``leader_epoch_check``: "strict" (KIP) or "log" (see module doc).
    """
    _check_options(strategy, leader_epoch_check)
    p = normalise_partition(partition)
    if p.get("leader", -1) != -1:
        return []
    replies = _replies_of(p, log_info)
    # replicas first, in replica order; then brokers that answered for a partition they do not host
    brokers_in_order = list(p["replicas"]) + sorted(set(replies) - set(p["replicas"]))
    rows = {b: _candidate_row(p, b, _broker(brokers, b), replies.get(b), strategy, leader_epoch_check)
            for b in brokers_in_order}

    clean = _clean_candidates(p, rows)
    valid = _rank_valid_replies(rows, brokers_in_order)
    rest = [r for r in rows.values() if r["kind"] == UNCLEAN and not r["_valid"]]
    ordered = clean + valid + rest
    for i, r in enumerate(clean + valid, 1):
        r["rank"] = i
    _estimate_records_lost(rows)
    waiting = _decide(p, rows, clean, valid, strategy, brokers)

    _write_notes(ordered, clean, valid, waiting, strategy, brokers)
    for r in ordered:
        del r["_remark"], r["_valid"]
    return ordered


def _check_options(strategy: str, leader_epoch_check: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r}, expected one of {STRATEGIES}")
    if leader_epoch_check not in ("strict", "log"):
        raise ValueError(f"leader_epoch_check {leader_epoch_check!r}, expected 'strict' or 'log'")


def _replies_of(p: dict, log_info: list[dict]) -> dict[int, dict]:
    """Broker id -> its first log-info row for this partition.  A row names its topic by id; a row whose
    topic id could not be read matches on the topic name instead."""
    tid, part = p.get("topic_id"), int(p["partition"])
    replies: dict[int, dict] = {}
    for r in log_info:
        same_topic = (r.get("topic_id") == tid if r.get("topic_id") is not None
                      else r.get("topic_name") is not None and r.get("topic_name") == p.get("topic"))
        if r["partition"] == part and same_topic:
            replies.setdefault(int(r["broker_id"]), r)
    return replies


def _candidate_row(p: dict, b: int, st: BrokerState, info: dict | None, strategy: str,
                   leader_epoch_check: str) -> dict:
    """Broker ``b``'s row before ranking: its membership facts, its reply (step 2: usable or why not) and
    whether it is a clean candidate.  ``_remark`` and ``_valid`` are working fields, dropped at the end."""
    isr, elr, lke = p["isr"], p["eligible_leader_replicas"], p["last_known_elr"]
    row = {"topic_id": p.get("topic_id"), "topic": p.get("topic"), "partition": int(p["partition"]), "broker": b,
           "rank": None, "recommended": False, "kind": UNCLEAN, "in_isr": b in isr, "in_elr": b in elr,
           "in_last_known_elr": b in lke, "alive_now": st.alive, "last_written_leader_epoch": None,
           "log_end_offset": None, "estimated_records_lost": None, "excluded_reason": None,
           "strategy": strategy, "note": "", "_remark": "", "_valid": False}
    if b not in p["replicas"]:
        row["excluded_reason"] = NOT_A_REPLICA
    elif info is None:
        row["excluded_reason"] = NO_LOG_INFO
    else:
        row["last_written_leader_epoch"] = info["last_written_leader_epoch"]
        row["log_end_offset"] = info["log_end_offset"]
        row["excluded_reason"], row["_remark"] = _validate(info, st, int(p["leader_epoch"]), leader_epoch_check)
        row["_valid"] = row["excluded_reason"] is None
    row["kind"] = _clean_kind(p, b, st)
    return row


def _clean_kind(p: dict, b: int, st: BrokerState) -> str:
    """Step 1 for one broker: an active ISR member, else an active ELR member, is elected without loss;
    anything else could only be elected uncleanly."""
    if st.acceptable and b in p["replicas"]:
        if b in p["isr"]:
            return CLEAN_ISR
        if b in p["eligible_leader_replicas"]:
            return CLEAN_ELR
    return UNCLEAN


def _clean_candidates(p: dict, rows: dict[int, dict]) -> list[dict]:
    """Step 1: the clean candidates, ISR before ELR, replica order within each (the controller's walk)."""
    in_order = [rows[b] for b in p["replicas"]]
    return [r for r in in_order if r["kind"] == CLEAN_ISR] + [r for r in in_order if r["kind"] == CLEAN_ELR]


def _rank_valid_replies(rows: dict[int, dict], brokers_in_order: list[int]) -> list[dict]:
    """Step 3: the usable replies of the non-clean brokers, best first: highest LastWrittenLeaderEpoch
    (the newest leader's data), then longest LogEndOffset, ties in replica order."""
    valid = [r for r in rows.values() if r["_valid"] and r["kind"] == UNCLEAN]
    pos = {b: i for i, b in enumerate(brokers_in_order)}
    valid.sort(key=lambda r: (-r["last_written_leader_epoch"], -r["log_end_offset"], pos[r["broker"]]))
    return valid


def _estimate_records_lost(rows: dict[int, dict]) -> None:
    """Each usable reply's distance to the longest usable log (clean ones included): an estimate, since
    logs of different epochs may have diverged below their ends."""
    offsets = [r["log_end_offset"] for r in rows.values() if r["_valid"]]
    if not offsets:
        return
    best = max(offsets)
    for r in rows.values():
        if r["_valid"]:
            r["estimated_records_lost"] = max(best - r["log_end_offset"], 0)


def _decide(p: dict, rows: dict[int, dict], clean: list[dict], valid: list[dict], strategy: str,
            brokers: dict) -> list[str]:
    """Step 4: mark the recommended row; returns whom balanced recovery is still waiting for.  A clean
    candidate wins under every strategy (the strategy governs only unclean recovery); ``none`` recommends
    nothing unclean; ``aggressive`` takes the best-ranked active broker at once."""
    if clean:
        clean[0]["recommended"] = True
        return []
    if strategy == "none":
        return []
    waiting = _balanced_waits_for(p, rows, brokers) if strategy == "balanced" else []
    if not waiting:
        pick = next((r for r in valid if _broker(brokers, r["broker"]).acceptable), None)
        if pick is not None:
            pick["recommended"] = True
    return waiting


def _balanced_waits_for(p: dict, rows: dict[int, dict], brokers: dict) -> list[str]:
    """The brokers that may hold committed data (:func:`required_replies`) and have not yet replied
    usably while active, each with why (KIP-966 balanced steps 3 and 4)."""
    waiting = []
    for b in required_replies(p):
        r, st = rows.get(b), _broker(brokers, b)
        if r is None:
            waiting.append(f"broker {b} (not a replica, no log info)")
        elif not st.acceptable:  # it comes back (and may be elected cleanly) after its restart
            waiting.append(f"broker {b} ({_inactive_state(st)})")
        elif not r["_valid"]:
            waiting.append(f"broker {b} ({r['excluded_reason']})")
    return waiting


def _write_notes(ordered, clean, valid, waiting, strategy, brokers) -> None:
    """Every row's ``note``; when no clean candidate exists, the first row also says why nothing (or
    what) is recommended under the strategy."""
    chosen = next((r for r in ordered if r["recommended"]), None)
    for r in ordered:
        r["note"] = _row_note(r, r is chosen, _broker(brokers, r["broker"]))
    if clean or not ordered:
        return
    head = ordered[0]
    if strategy == "none":
        head["note"] += " Strategy none: no leader is recommended; the operator decides."
    elif waiting:
        head["note"] += " Balanced recovery recommends nothing yet: waiting for " + ", ".join(waiting) + "."
    elif chosen is None:
        head["note"] += " No active replica has valid log info: nothing can be recommended."


def _row_note(r: dict, chosen: bool, st: BrokerState) -> str:
    """What one row means for the operator: a clean candidate, a discarded reply, the unclean pick with
    what it may lose, or a usable log that cannot lead now."""
    b = r["broker"]
    if r["kind"] == CLEAN_ISR:
        text = f"Broker {b} is an active ISR member: the controller elects it without data loss."
    elif r["kind"] == CLEAN_ELR:
        text = f"Broker {b} is an active eligible leader replica: electing it loses no committed data."
    elif r["excluded_reason"] == NO_LOG_INFO:
        text = f"Broker {b} supplied no log info, so its log cannot be compared."
    elif r["excluded_reason"] == NOT_A_REPLICA:
        text = f"Broker {b} sent log info but is not a replica of this partition; ignored."
    elif r["excluded_reason"]:
        text = f"Broker {b}'s log info is not used: {r['excluded_reason']}."
    elif chosen:
        lost = r["estimated_records_lost"]
        text = (f"Broker {b} has the most recent log (leader epoch {r['last_written_leader_epoch']}, "
                f"end offset {r['log_end_offset']}); electing it is an unclean election"
                + (f" that may lose about {lost} records held by other replicas." if lost else
                   "; records never replicated to it are lost."))
    elif not st.acceptable:
        text = (f"Broker {b} has a usable log (rank {r['rank']}) but cannot be elected while "
                f"{_inactive_state(st)}.")
    else:
        text = (f"Broker {b} ranks {r['rank']} (leader epoch {r['last_written_leader_epoch']}, "
                f"end offset {r['log_end_offset']}).")
    if r["_remark"]:
        text += f" Note: {r['_remark']}."
    return text


# --------------------------------------------------------------------------------------------------
# Many partitions at once (Arrow in, Arrow out)


def recovery_candidates_table(partitions: pa.Table, brokers: pa.Table, log_info: pa.Table,
                              strategy: str = "balanced", leader_epoch_check: str = "strict") -> pa.Table:
    """CANDIDATE_SCHEMA rows for every leaderless partition of ``partitions`` (PARTITION_SCHEMA columns;
    ``topic`` may be absent), given ``brokers`` (BROKER_SCHEMA: the state at the same point) and
    ``log_info`` (loginfo.LOG_INFO_SCHEMA).  Partitions with a leader give no rows.

    Log info is grouped once by (topic id, partition) and brokers indexed once, so the cost is linear in
    the inputs; each partition then goes through the same decision as ``recovery_candidates``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r}, expected one of {STRATEGIES}")
    import pyarrow.compute as pc

    leaderless = partitions.filter(pc.equal(partitions.column("leader"), -1))
    broker_map = {r["broker_id"]: BrokerState(bool(r["registered"]), int(r["broker_epoch"]), bool(r["fenced"]),
                                              bool(r["in_controlled_shutdown"]))
                  for r in brokers.select(BROKER_SCHEMA.names).to_pylist()}
    info = log_info.select([c for c in ("broker_id", "broker_epoch", "topic_id", "topic_name", "partition",
                                        "last_written_leader_epoch", "current_leader_epoch", "log_end_offset",
                                        "error_code", "error_message") if c in log_info.column_names])
    by_partition: dict[tuple, list[dict]] = defaultdict(list)
    for r in info.to_pylist():  # keyed by id; rows of a topic whose id was unreadable, by name
        key = ("id", r["topic_id"]) if r["topic_id"] is not None else ("name", r.get("topic_name"))
        by_partition[(*key, r["partition"])].append(r)
    out = []
    for p in leaderless.to_pylist():
        rows = list(by_partition.get(("id", p["topic_id"], p["partition"]), []))
        if p.get("topic"):
            rows += by_partition.get(("name", p["topic"], p["partition"]), [])
        out.extend(recovery_candidates(p, broker_map, rows, strategy, leader_epoch_check))
    return pa.Table.from_pylist(out, schema=CANDIDATE_SCHEMA)
