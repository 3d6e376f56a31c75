"""What the controller would write for a hypothetical event (``kraft-audit whatif``).

The input describes a cluster image in JSON (see :func:`load_cluster`) and one event; the output lists
the records the controller would append, in order, in the decode JSON shape, the per-partition errors
it would answer with (Kafka's error names), and the resulting partitions and brokers.  Decisions come
from the same builder and trigger inputs as the recomputation in :mod:`controller_core.rules.verify`.
"""
from __future__ import annotations

from controller_core.rules import triggers as TR
from controller_core.rules.builder import PREFERRED, UNCLEAN, build
from controller_core.codec.message import decode_body, encode_body
from controller_core.records import BY_TYPE_NAME
from controller_core.image import (
    BROKER, MIGRATING, MIN_ISR, MV_3_3_IV2, MV_3_3_IV3, MV_3_7_IV2, MV_4_0_IV1, NO_LEADER, RECOVERED, RECOVERING,
    TOPIC, Broker, Cluster, Partition, parse_mv, replica_dirs,
)


class WhatIfError(ValueError):
    """The input cannot describe a cluster or an event."""


# ------------------------------------------------------------------------------------ the image
def load_cluster(spec: dict) -> Cluster:
    c = Cluster()
    c.features["metadata.version"] = parse_mv(spec.get("metadataVersion", "4.0-IV1"))
    if spec.get("elrEnabled") is not None:
        if c.metadata_version >= MV_4_0_IV1:
            c.features["eligible.leader.replicas.version"] = 1 if spec["elrEnabled"] else 0
        elif spec["elrEnabled"]:
            raise WhatIfError("elrEnabled needs metadataVersion >= 4.0-IV1")
    c.controller_id = int(spec.get("controllerId", -1))
    for bid, b in (spec.get("brokers") or {}).items():
        c.brokers[int(bid)] = Broker(int(bid), int(b.get("epoch", 0)), b.get("incarnationId", "AAAAAAAAAAAAAAAAAAAAAA"),
                                     bool(b.get("fenced", False)), bool(b.get("inControlledShutdown", False)),
                                     list(b.get("logDirs") or []), b.get("rack"),
                                     None if b.get("cordonedLogDirs") is None else list(b["cordonedLogDirs"]))
    configs = spec.get("configs") or {}
    if configs.get("cluster"):
        c.configs[(BROKER, "")] = {k: str(v) for k, v in configs["cluster"].items()}
    for bid, kv in (configs.get("brokers") or {}).items():
        c.configs[(BROKER, str(bid))] = {k: str(v) for k, v in kv.items()}
    for name, kv in (configs.get("topics") or {}).items():
        c.configs[(TOPIC, name)] = {k: str(v) for k, v in kv.items()}
    for name, tid in (spec.get("topics") or {}).items():
        c.topics[tid] = name
        c.topic_ids[name] = tid
    for p in spec.get("partitions") or []:
        tid = p.get("topicId") or c.topic_ids.get(p["topic"])
        if tid is None:
            raise WhatIfError(f"partition of unknown topic {p.get('topic')!r}")
        c.topics.setdefault(tid, p["topic"])
        c.topic_ids.setdefault(p["topic"], tid)
        reps = list(p["replicas"])
        c.partitions[(tid, int(p["partition"]))] = Partition(
            tid, int(p["partition"]), reps, list(p.get("isr", reps)), int(p.get("leader", reps[0] if reps else -1)),
            int(p.get("leaderEpoch", 0)), int(p.get("partitionEpoch", 0)), list(p.get("removingReplicas") or []),
            list(p.get("addingReplicas") or []), list(p.get("eligibleLeaderReplicas") or []),
            list(p.get("lastKnownElr") or []), int(p.get("leaderRecoveryState", 0)),
            replica_dirs(p.get("directories"), len(reps)))
    return c


def partition_json(c: Cluster, p: Partition) -> dict:
    dirs = [] if all(d == MIGRATING for d in p.directories) else list(p.directories)
    return {"topic": c.topics.get(p.topic_id), "topicId": p.topic_id, "partition": p.partition_id,
            "replicas": p.replicas, "isr": p.isr, "eligibleLeaderReplicas": sorted(p.elr),
            "lastKnownElr": p.last_known_elr, "leader": p.leader, "leaderEpoch": p.leader_epoch,
            "partitionEpoch": p.partition_epoch, "leaderRecoveryState": p.lrs, "addingReplicas": p.adding,
            "removingReplicas": p.removing, "directories": dirs}


def broker_json(b: Broker) -> dict:
    return {"epoch": b.epoch, "incarnationId": b.incarnation_id, "fenced": b.fenced,
            "inControlledShutdown": b.in_controlled_shutdown, "logDirs": b.log_dirs}


# ------------------------------------------------------------------------------------- the run
class Run:
    """Applies events to an image, collecting the records the controller writes."""

    def __init__(self, c: Cluster):
        self.c = c
        self.records: list[dict] = []
        self.errors: dict[str, str] = {}
        self.next_epoch = max([b.epoch for b in c.brokers.values()] + [0]) + 1

    # --- writing records (applied to the image as the controller's replay would)
    def write(self, rtype: str, version: int, data: dict) -> None:
        # through the codec: Kafka's key order, tagged defaults left out, and proof it is encodable
        rdef = BY_TYPE_NAME[rtype]
        body = encode_body(rdef.fields, version, data)
        data = decode_body(body, 0, len(body), rdef.fields, version)
        self.records.append({"type": rtype, "version": version, "data": data})
        self.c.apply(rtype, data)

    def change_version(self) -> int:
        mv = self.c.metadata_version
        return 2 if mv >= MV_4_0_IV1 else 1 if mv >= MV_3_7_IV2 else 0

    def write_change(self, p: Partition, change: dict | None) -> None:
        if change:
            data = {"partitionId": p.partition_id, "topicId": p.topic_id, **change}
            self.write("PARTITION_CHANGE_RECORD", self.change_version(), data)

    def inputs(self, p: Partition, election: str, **kw):
        """The trigger inputs for ``p`` with the controller's default directory for new replicas (B10)."""
        return TR.inputs(self.c, p, election, default_dir=self.c.default_dir, **kw)

    def broker(self, b: int) -> Broker:
        if b not in self.c.brokers:
            raise WhatIfError(f"broker {b} is not registered")
        return self.c.brokers[b]

    def fence_record(self, b: int) -> None:
        br = self.broker(b)
        if self.c.metadata_version >= MV_3_3_IV2:
            self.write("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": br.epoch, "fenced": 1})
        else:
            self.write("FENCE_BROKER_RECORD", 0, {"id": b, "epoch": br.epoch})

    def key(self, p: Partition) -> str:
        return f"{self.c.topics.get(p.topic_id, p.topic_id)}-{p.partition_id}"

    def sorted_partitions(self, pred) -> list[Partition]:
        return sorted((p for p in self.c.partitions.values() if pred(p)),
                      key=lambda p: (self.c.topics.get(p.topic_id, ""), p.partition_id))

    def remove_broker_from_partitions(self, b: int, unclean: bool = False) -> None:
        """Partitions with b in the ISR, then (unclean / unregister) those with b in the ELR."""
        make = TR.unclean_shutdown if unclean else TR.broker_removed
        for p in self.sorted_partitions(lambda p: b in p.isr):
            self.write_change(p, build(p, make(self.c, p, b, default_dir=self.c.default_dir)))

    def remove_broker_from_elr(self, b: int, unclean: bool = False) -> None:
        make = TR.unclean_shutdown if unclean else TR.broker_removed
        for p in self.sorted_partitions(lambda p: b in p.elr and b not in p.isr):
            self.write_change(p, build(p, make(self.c, p, b, default_dir=self.c.default_dir)))

    # --- events
    def fence_broker(self, ev):
        b = int(ev["broker"])
        self.broker(b)
        self.remove_broker_from_partitions(b)
        self.fence_record(b)

    def controlled_shutdown(self, ev):
        b = int(ev["broker"])
        br = self.broker(b)
        leads = any(p.leader == b for p in self.c.partitions.values())
        if not leads:  # §1.5-4: nothing to move, fenced directly
            return self.fence_broker(ev)
        if self.c.metadata_version >= MV_3_3_IV3 and not br.in_controlled_shutdown:
            self.write("BROKER_REGISTRATION_CHANGE_RECORD", 1,
                       {"brokerId": b, "brokerEpoch": br.epoch, "inControlledShutdown": 1})
        self.remove_broker_from_partitions(b)
        self.fence_record(b)  # it now leads nothing: the next heartbeat fences it

    def unfence_broker(self, ev):
        b = int(ev["broker"])
        br = self.broker(b)
        if self.c.metadata_version >= MV_3_3_IV2:
            self.write("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": br.epoch, "fenced": -1})
        else:
            self.write("UNFENCE_BROKER_RECORD", 0, {"id": b, "epoch": br.epoch})
        for p in self.sorted_partitions(lambda p: p.leader == NO_LEADER):
            self.write_change(p, build(p, TR.unfenced(self.c, p, b, default_dir=self.c.default_dir)))

    def register_broker(self, ev, unclean_default: bool = False):
        b = int(ev["broker"])
        prev = self.c.brokers.get(b)
        new = bool(ev.get("newIncarnation", True)) or prev is None
        if new and prev is not None and self.c.metadata_version >= MV_4_0_IV1:
            # §1.6: unclean restart -> out of ISR and ELR before the registration; with ELR off
            # ([LATER]) the broker is removed from ISRs as in a fence
            unclean = self.c.elr_enabled
            self.remove_broker_from_partitions(b, unclean=unclean)
            if unclean:
                self.remove_broker_from_elr(b, unclean=True)
        epoch = int(ev.get("brokerEpoch", self.next_epoch)) if new else prev.epoch
        self.next_epoch = max(self.next_epoch, epoch + 1)
        data = {"brokerId": b, "isMigratingZkBroker": False,
                "incarnationId": ev.get("incarnationId") or (prev.incarnation_id if prev and not new else
                                                             _fresh_incarnation(b, epoch)),
                "brokerEpoch": epoch, "endPoints": [], "features": [], "rack": prev.rack if prev else None,
                "fenced": True if new else prev.fenced,
                "inControlledShutdown": False if new else prev.in_controlled_shutdown,
                "logDirs": list(ev.get("logDirs") or (prev.log_dirs if prev else []))}
        self.write("REGISTER_BROKER_RECORD", 3, data)

    def unclean_shutdown(self, ev):
        self.register_broker({**ev, "newIncarnation": True})

    def unregister_broker(self, ev):
        b = int(ev["broker"])
        br = self.broker(b)
        self.remove_broker_from_partitions(b)
        self.remove_broker_from_elr(b)
        self.write("UNREGISTER_BROKER_RECORD", 0, {"brokerId": b, "brokerEpoch": br.epoch})

    def _partition(self, topic, partition) -> Partition | None:
        tid = self.c.topic_ids.get(topic)
        return None if tid is None else self.c.partitions.get((tid, int(partition)))

    def alter_partition(self, ev):
        """§2.8 validation, first failure wins, then the builder with the requested ISR.

        The event may name the request ``version`` (AlterPartition v0-3, default 3): v2+ address the topic
        by id (an unknown topic is UNKNOWN_TOPIC_ID), answer INELIGIBLE_REPLICA rather than
        OPERATION_NOT_ATTEMPTED and NEW_LEADER_ELECTED rather than FENCED_LEADER_EPOCH; only v3 carries the
        members' broker epochs; v0 carries no leader recovery state (RECOVERED)."""
        version = int(ev.get("version", 3))
        if not 0 <= version <= 3:
            raise WhatIfError(f"AlterPartition version must be 0-3, not {version}")
        k = f"{ev['topic']}-{ev['partition']}"
        tid = self.c.topic_ids.get(ev["topic"])
        p = None if tid is None else self.c.partitions.get((tid, int(ev["partition"])))
        if ev.get("brokerId") is not None or p is not None:  # the sender's epoch is checked first
            sender = int(ev["brokerId"]) if ev.get("brokerId") is not None else p.leader
            br = self.c.brokers.get(sender)
            if br is None or int(ev.get("brokerEpoch", br.epoch)) != br.epoch:
                self.errors[k] = "STALE_BROKER_EPOCH"
                return
        if tid is None:
            self.errors[k] = "UNKNOWN_TOPIC_ID" if version >= 2 else "UNKNOWN_TOPIC_OR_PARTITION"
            return
        if p is None:
            self.errors[k] = "UNKNOWN_TOPIC_OR_PARTITION"
            return
        le, pe = int(ev.get("leaderEpoch", p.leader_epoch)), int(ev.get("partitionEpoch", p.partition_epoch))
        members = [m["brokerId"] if isinstance(m, dict) else m for m in ev["isr"]]
        member_epochs = {m["brokerId"]: m.get("brokerEpoch") for m in ev["isr"] if isinstance(m, dict)
                         and version >= 3}
        lrs = int(ev.get("leaderRecoveryState", p.lrs)) if version >= 1 else RECOVERED
        err = None
        if le > p.leader_epoch or pe > p.partition_epoch:
            err = "NOT_CONTROLLER"
        elif le < p.leader_epoch:
            err = "FENCED_LEADER_EPOCH"
        elif sender != p.leader:
            err = "INVALID_REQUEST"
        elif pe < p.partition_epoch:
            err = "INVALID_UPDATE_VERSION"
        elif any(m < 0 for m in members) or len(set(members)) != len(members) or not set(members) <= set(p.replicas):
            err = "INVALID_REQUEST"
        elif p.leader not in members:
            err = "INVALID_REQUEST"
        elif lrs == RECOVERING and len(members) > 1:
            err = "INVALID_REQUEST"
        elif p.lrs == RECOVERED and lrs == RECOVERING:
            err = "INVALID_REQUEST"
        else:
            for m in members:  # every member active, at the epoch it was registered with (v3+)
                if (not self.c.active(m)
                        or (member_epochs.get(m) is not None and member_epochs[m] != self.c.brokers[m].epoch)):
                    err = "INELIGIBLE_REPLICA" if version >= 2 else "OPERATION_NOT_ATTEMPTED"
                    break
        if err:
            self.errors[k] = err
            return
        change = build(p, self.inputs(p, TR.topic_mode(self.c, p), target_isr=members, target_lrs=lrs))
        self.write_change(p, change)
        if change and change.get("leader", sender) != sender:
            # §2.7-3: the new ISR completed a reassignment that removed the leader; the record is written and
            # a new leader elected, yet the sender is told to refetch metadata
            self.errors[k] = "NEW_LEADER_ELECTED" if version >= 2 else "FENCED_LEADER_EPOCH"

    def elect_leaders(self, ev):
        kind = ev.get("electionType", "PREFERRED").upper()
        if kind not in (PREFERRED, UNCLEAN):
            raise WhatIfError(f"electionType must be PREFERRED or UNCLEAN, not {kind!r}")
        listed = ev.get("partitions")
        if listed is None:
            targets = [(self.c.topics[p.topic_id], p.partition_id) for p in self.sorted_partitions(lambda p: True)]
        else:
            targets = [(x["topic"], x["partition"]) for x in listed]
        for topic, part in targets:
            p = self._partition(topic, part)
            k = f"{topic}-{part}"
            if p is None:
                self.errors[k] = "UNKNOWN_TOPIC_OR_PARTITION"
                continue
            not_needed = (p.replicas and p.leader == p.replicas[0]) if kind == PREFERRED else p.leader != NO_LEADER
            if not_needed:
                if listed is not None:
                    self.errors[k] = "ELECTION_NOT_NEEDED"
                continue
            change = build(p, self.inputs(p, kind))
            if not change or change.get("leader", p.leader) == p.leader:
                self.errors[k] = "PREFERRED_LEADER_NOT_AVAILABLE" if kind == PREFERRED else "ELIGIBLE_LEADERS_NOT_AVAILABLE"
                if not change:
                    continue
            self.write_change(p, change)

    def reassign(self, ev):
        """§2.7: start (and, if the ISR already covers the target, complete) a reassignment."""
        p = self._partition(ev["topic"], ev["partition"])
        k = f"{ev['topic']}-{ev['partition']}"
        target = [int(x) for x in ev["replicas"]]
        if p is None:
            self.errors[k] = "UNKNOWN_TOPIC_OR_PARTITION"
            return
        if not target or len(set(target)) != len(target) or any(b not in self.c.brokers for b in target):
            self.errors[k] = "INVALID_REPLICA_ASSIGNMENT"
            return
        removing = sorted(set(p.replicas) - set(target))
        adding = sorted(set(target) - set(p.replicas))
        kw = {"target_replicas": target + removing}
        if removing:
            kw["target_removing"] = removing
        if adding:
            kw["target_adding"] = adding
        self.write_change(p, build(p, self.inputs(p, "ONLINE", **kw)))

    def cancel_reassignment(self, ev):
        p = self._partition(ev["topic"], ev["partition"])
        k = f"{ev['topic']}-{ev['partition']}"
        if p is None:
            self.errors[k] = "UNKNOWN_TOPIC_OR_PARTITION"
            return
        if not p.adding and not p.removing:
            self.errors[k] = "NO_REASSIGNMENT_IN_PROGRESS"
            return
        reps = [b for b in p.replicas if b not in p.adding]
        isr = [b for b in p.isr if b not in p.adding]
        election = TR.topic_mode(self.c, p)
        if not isr:
            if not self.c.unclean_enabled(p.topic_id):
                self.errors[k] = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
                return
            isr, election = [reps[0]], UNCLEAN
        self.write_change(p, build(p, self.inputs(p, election, target_replicas=reps, target_isr=isr,
                                                 target_removing=[], target_adding=[])))

    def create_partition(self, ev):
        """§1.2-5: ISR = the active replicas in replica order, leader = its first member; directories by B10."""
        topic = ev["topic"]
        tid = self.c.topic_ids.get(topic)
        k = f"{topic}-{ev['partition']}"
        if tid is None:
            tid = ev.get("topicId") or _fresh_topic_id(topic)
            self.write("TOPIC_RECORD", 0, {"name": topic, "topicId": tid})
        reps = [int(b) for b in ev["replicas"]]
        if (tid, int(ev["partition"])) in self.c.partitions:
            self.errors[k] = "INVALID_PARTITIONS"
            return
        if len(set(reps)) != len(reps) or any(b not in self.c.brokers for b in reps):
            self.errors[k] = "INVALID_REPLICA_ASSIGNMENT"
            return
        isr = [b for b in reps if self.c.active(b)]
        if not isr:
            self.errors[k] = "INVALID_REPLICA_ASSIGNMENT"
            return
        mv = self.c.metadata_version
        version = 2 if mv >= MV_4_0_IV1 else 1 if mv >= MV_3_7_IV2 else 0
        data = {"partitionId": int(ev["partition"]), "topicId": tid, "replicas": reps, "isr": isr,
                "removingReplicas": [], "addingReplicas": [], "leader": isr[0], "leaderEpoch": 0, "partitionEpoch": 0}
        if version >= 1:  # B10: each replica in its broker's default directory (none written below 3.7-IV2)
            data["directories"] = [self.c.default_dir(b) for b in reps]
        self.write("PARTITION_RECORD", version, data)

    def delete_topic(self, ev):
        tid = self.c.topic_ids.get(ev["topic"])
        if tid is None:
            self.errors[ev["topic"]] = "UNKNOWN_TOPIC_OR_PARTITION"
            return
        self.write("REMOVE_TOPIC_RECORD", 0, {"topicId": tid})

    def set_config(self, ev):
        resource = ev.get("resource", "cluster")
        rtype = TOPIC if resource == "topic" else BROKER
        name = "" if resource == "cluster" else str(ev.get("name", ""))
        if resource == "topic" and name not in self.c.topic_ids:
            self.errors[name] = "UNKNOWN_TOPIC_OR_PARTITION"
            return
        for key, value in ev.get("configs", {}).items():
            self.write("CONFIG_RECORD", 0, {"resourceType": rtype, "resourceName": name, "name": key,
                                            "value": None if value is None else str(value)})
        if MIN_ISR in ev.get("configs", {}) and self.c.elr_enabled:
            # [LATER] §1.3-5: a ClearElrRecord follows a min.insync.replicas change while ELR is on
            self.write("CLEAR_ELR_RECORD", 0, {"topicName": name if resource == "topic" else ""})

    def sequence(self, ev):
        for sub in ev["events"]:
            self.apply(sub)

    def apply(self, ev: dict) -> None:
        if not isinstance(ev, dict) or ev.get("kind") not in _KINDS:
            raise WhatIfError(f"event kind must be one of {sorted(_KINDS)}, not {ev!r:.80}")
        try:
            getattr(self, ev["kind"])(ev)
        except KeyError as exc:
            raise WhatIfError(f"event {ev['kind']!r} lacks {exc}") from None


def _fresh_incarnation(b: int, epoch: int) -> str:
    from controller_core.codec.message import uuid_to_str
    return uuid_to_str((b.to_bytes(4, "big") + epoch.to_bytes(8, "big") + b"inc!")[:16])


def _fresh_topic_id(name: str) -> str:
    import hashlib
    from controller_core.codec.message import uuid_to_str
    return uuid_to_str(hashlib.sha256(name.encode()).digest()[:16])


_KINDS = {"fence_broker", "unfence_broker", "controlled_shutdown", "unclean_shutdown", "unregister_broker",
          "alter_partition", "elect_leaders", "reassign", "cancel_reassignment", "create_partition",
          "register_broker", "delete_topic", "set_config", "sequence"}


def what_if(spec: dict) -> dict:
    """The controller's answer to ``spec["event"]`` on the image ``spec`` describes."""
    c = load_cluster(spec)
    run = Run(c)
    run.apply(spec.get("event"))
    return {"records": run.records, "errors": run.errors,
            "partitions": [partition_json(c, p) for p in run.sorted_partitions(lambda p: True)],
            "brokers": {str(b): broker_json(br) for b, br in sorted(c.brokers.items())}}

