"""The metadata quorum's own history, from the log: who was the active controller when, in which Raft epoch,
which voters there were (and their directories), which controllers registered, and how long the log was
silent before each election.

Sources (controller-rules §1, KIP-595 / KIP-853 / KIP-919): LeaderChangeMessage control records (the leader
and the voters of each epoch, written first by a new leader), VotersRecord and KRaftVersionRecord (dynamic
quorums), RegisterControllerRecord / UnregisterControllerRecord, and every batch's partitionLeaderEpoch.
The rows are few (one per such record), so each is read from its ``data_json`` (kafka-dump-log's shape).

Pure Arrow; never imports Spark or Delta.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TS = pa.timestamp("us", tz="UTC")
EVENTS = ("LEADER_CHANGE", "KRAFT_VOTERS", "KRAFT_VERSION", "REGISTER_CONTROLLER_RECORD",
          "UNREGISTER_CONTROLLER_RECORD")
INT_LIST = pa.list_(pa.int32())
QUORUM_SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", TS),
    pa.field("source_kind", pa.string()),  # segment | snapshot | bootstrap
    pa.field("event", pa.string(), nullable=False),  # the record's type, as kafka-dump-log names it
    pa.field("epoch", pa.int32()),  # the Raft epoch of the record's batch (its partitionLeaderEpoch)
    pa.field("leader_id", pa.int32()),  # LeaderChange: the new active controller
    pa.field("voters", INT_LIST),  # LeaderChange / VotersRecord: the voter ids
    pa.field("granting_voters", INT_LIST),  # LeaderChange: the voters that elected it
    pa.field("voter_directories", pa.list_(pa.string())),  # VotersRecord: each voter's directory id
    pa.field("kraft_version", pa.int16()),  # KRaftVersionRecord
    pa.field("controller_id", pa.int32()),  # (Un)RegisterControllerRecord
    pa.field("incarnation_id", pa.string()),  # RegisterControllerRecord
    pa.field("silent_ms", pa.int64()),  # LeaderChange: time since the log's previous record
])


def _ids(items, key: str) -> list[int] | None:
    return None if items is None else [int(v[key]) for v in items if v.get(key) is not None]


def quorum_history(records: pa.Table) -> pa.Table:
    """One row per quorum record of bronze ``records`` (offset order), QUORUM_SCHEMA."""
    if records is None or not records.num_rows:
        return QUORUM_SCHEMA.empty_table()
    is_q = pc.is_in(records.column("record_type"), pa.array(list(EVENTS)))
    q = records.filter(is_q)
    seg = pc.equal(records.column("source_kind"), "segment")
    # the time of each segment record before a LeaderChange: how long the log was silent before the election
    off_all = np.asarray(records.column("offset").filter(seg).to_numpy(zero_copy_only=False), np.int64)
    ts_all = np.asarray(pc.cast(pc.cast(records.column("timestamp").filter(seg), TS), pa.int64())
                        .to_numpy(zero_copy_only=False), np.int64) // 1000
    order = np.argsort(off_all, kind="stable")
    off_all, ts_all = off_all[order], ts_all[order]
    rows = []
    for r in q.to_pylist():
        d = json.loads(r["data_json"]) if r.get("data_json") else {}
        kind = r["record_type"]
        row = {"offset": r["offset"], "timestamp": r["timestamp"], "source_kind": r["source_kind"], "event": kind,
               "epoch": r.get("batch_leader_epoch"), "leader_id": None, "voters": None, "granting_voters": None,
               "voter_directories": None, "kraft_version": None, "controller_id": None, "incarnation_id": None,
               "silent_ms": None}
        if kind == "LEADER_CHANGE":
            row.update(leader_id=d.get("leaderId"), voters=_ids(d.get("voters"), "voterId"),
                       granting_voters=_ids(d.get("grantingVoters"), "voterId"))
            if r["source_kind"] == "segment":
                k = int(np.searchsorted(off_all, r["offset"])) - 1
                if k >= 0 and k + 1 < len(off_all) and off_all[k + 1] == r["offset"]:
                    row["silent_ms"] = int(ts_all[k + 1] - ts_all[k])
        elif kind == "KRAFT_VOTERS":
            voters = d.get("voters") or []
            row.update(voters=_ids(voters, "voterId"),
                       voter_directories=[v.get("voterDirectoryId") for v in voters])
        elif kind == "KRAFT_VERSION":
            row["kraft_version"] = d.get("kRaftVersion", d.get("kraftVersion"))
        else:
            row.update(controller_id=d.get("controllerId"), incarnation_id=d.get("incarnationId"))
        rows.append(row)
    out = pa.Table.from_pylist(rows, schema=QUORUM_SCHEMA)
    return out.sort_by([("offset", "ascending")])


def meta_properties(data_dir: str | Path) -> dict[str, str]:
    """The ``key=value`` lines of a data directory's ``meta.properties`` (empty when there is none)."""
    p = Path(data_dir) / "meta.properties"
    out: dict[str, str] = {}
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if line.strip().startswith("#") or "=" not in line:
            continue
        k, _, v = line.partition("=")
        out[k.strip()] = v.strip()
    return out


def summary(history: pa.Table, node: dict[str, str] | None = None) -> dict:
    """The quorum at the end of ``history``: the active controller and its epoch, the voters, the registered
    controllers, every election, and whether a data directory's ``meta.properties`` (``node``) is a voter."""
    rows = history.to_pylist()
    elections = [{"offset": r["offset"], "time": r["timestamp"], "epoch": r["epoch"], "leaderId": r["leader_id"],
                  "voters": r["voters"], "grantingVoters": r["granting_voters"], "silentMs": r["silent_ms"]}
                 for r in rows if r["event"] == "LEADER_CHANGE"]
    voters_rec = [r for r in rows if r["event"] == "KRAFT_VOTERS"]
    controllers: dict[int, dict] = {}
    for r in rows:
        if r["event"] == "REGISTER_CONTROLLER_RECORD":
            controllers[r["controller_id"]] = {"controllerId": r["controller_id"], "incarnationId": r["incarnation_id"],
                                               "registeredAt": r["offset"]}
        elif r["event"] == "UNREGISTER_CONTROLLER_RECORD":
            controllers.pop(r["controller_id"], None)
    last = elections[-1] if elections else None
    if voters_rec:
        v = voters_rec[-1]
        voters = [{"voterId": i, "directoryId": dirid} for i, dirid in zip(v["voters"] or [], v["voter_directories"] or [])]
        voters_from = "VotersRecord"
    else:
        voters = [{"voterId": i, "directoryId": None} for i in (last["voters"] or [])] if last else []
        voters_from = "LeaderChange" if last else None
    # KIP-853: every VotersRecord, with who joined and who left against the one before
    changes, before = [], None
    for v in voters_rec:
        now = [{"voterId": i, "directoryId": d} for i, d in zip(v["voters"] or [], v["voter_directories"] or [])]
        ids = [x["voterId"] for x in now]
        prev = [x["voterId"] for x in before] if before is not None else None
        changes.append({"offset": v["offset"], "time": v["timestamp"], "epoch": v["epoch"], "voters": now,
                        "added": [i for i in ids if prev is not None and i not in prev],
                        "removed": [i for i in (prev or []) if i not in ids]})
        before = now
    kv = [r for r in rows if r["event"] == "KRAFT_VERSION"]
    out = {"leaderId": last["leaderId"] if last else None, "epoch": last["epoch"] if last else None,
           "leaderSince": last["offset"] if last else None, "voters": voters, "votersFrom": voters_from,
           "controllers": [controllers[k] for k in sorted(controllers)], "elections": elections,
           "kraftVersion": ({"level": kv[-1]["kraft_version"], "offset": kv[-1]["offset"]} if kv else None),
           "voterChanges": changes}
    if node is not None:
        nid, did = node.get("node.id"), node.get("directory.id")
        match = next((v for v in voters if str(v["voterId"]) == str(nid)), None) if nid is not None else None
        out["dataDirectory"] = {
            "nodeId": nid, "directoryId": did, "isVoter": match is not None,
            "directoryMatches": (None if match is None or match["directoryId"] is None or did is None
                                 else match["directoryId"] == did)}
    return out
