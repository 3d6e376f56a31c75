"""The cluster image a metadata log describes, and how each record changes it (scalar reference).

Reads like controller-rules.md §1: one place per record type says how it is applied.  Records are
given in Kafka's JSON form (``type``, ``version``, ``data``), as the decoders produce them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from controller_core.brokers import in_image

# reserved directory ids (§1.1)
MIGRATING = "AAAAAAAAAAAAAAAAAAAAAA"
UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAQ"
LOST = "AAAAAAAAAAAAAAAAAAAAAg"

NO_LEADER = -1
LEADER_UNCHANGED = -2
RECOVERED, RECOVERING = 0, 1

# metadata.version feature levels (MetadataVersion.java)
MV_NAMES = {
    "3.0-IV1": 1, "3.1-IV0": 2, "3.2-IV0": 3, "3.3-IV0": 4, "3.3-IV1": 5, "3.3-IV2": 6, "3.3-IV3": 7,
    "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12, "3.6-IV1": 13, "3.6-IV2": 14,
    "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17, "3.7-IV3": 18, "3.7-IV4": 19, "3.8-IV0": 20, "3.9-IV0": 21,
    "4.0-IV0": 22, "4.0-IV1": 23, "4.0-IV2": 24, "4.0-IV3": 25, "4.1-IV0": 26, "4.1-IV1": 27, "4.2-IV0": 28,
    "4.2-IV1": 29,
}
MV_3_2_IV0, MV_3_3_IV2, MV_3_3_IV3, MV_3_6_IV0, MV_3_7_IV2, MV_4_0_IV1 = 3, 6, 7, 12, 17, 23
MV_4_1_IV0 = 26  # only a 4.1+ controller can write it: unclean-shutdown handling only for unclean restarts (§1.6-3)

TOPIC, BROKER = 2, 4  # ConfigResource types in ConfigRecord.resourceType
MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"
# Topic configs that make a topic leaderless / diskless: its data lives in object storage, not in the
# replicas' logs (KIP-1150 "Diskless Topics", as Aiven's Inkless fork implements it: ``diskless.enable=true``,
# set at creation).  Kafka's own schemas and controller-rules.md name no such config; this is the one place
# the names are recognised (value ``true``, case-insensitive, resolved as any topic config).  The ISR rules
# do not judge such a topic (audit/violations.py: DISKLESS_TOPIC).
DISKLESS_CONFIGS = ("diskless.enable",)
ELR_FEATURE = "eligible.leader.replicas.version"
METADATA_VERSION = "metadata.version"


def min_isr_value(text: str | None) -> int:
    """A min.insync.replicas config value as the rules use it: absent or empty means 1, and so does a value
    that is not a number (the controller refuses to write one; a damaged log must not stop the replay)."""
    if not text:
        return 1
    try:
        return int(text)
    except ValueError:
        return 1


def parse_mv(value) -> int:
    """A metadata.version given as a feature level or a name such as "4.0-IV1"."""
    if isinstance(value, int):
        return value
    if str(value).isdigit():
        return int(value)
    return MV_NAMES[str(value)]


@dataclass
class Partition:
    """One partition's registration (metadata/PartitionRegistration)."""

    topic_id: str
    partition_id: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing: list[int] = field(default_factory=list)
    adding: list[int] = field(default_factory=list)
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    lrs: int = RECOVERED
    directories: list[str] = field(default_factory=list)

    def copy(self) -> "Partition":
        # lists are the only mutable fields: copy them, share the rest (deepcopy costs ~100 us)
        return Partition(self.topic_id, self.partition_id, list(self.replicas), list(self.isr), self.leader,
                         self.leader_epoch, self.partition_epoch, list(self.removing), list(self.adding),
                         list(self.elr), list(self.last_known_elr), self.lrs, list(self.directories))


@dataclass
class Broker:
    broker_id: int
    epoch: int
    incarnation_id: str
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: list[str] = field(default_factory=list)
    rack: str | None = None
    # KIP-1066 (Kafka 4.3): the log directories cordoned (no new replicas placed on them); None = the
    # records never said (before RegisterBrokerRecord v4 / BrokerRegistrationChangeRecord v3)
    cordoned_log_dirs: list[str] | None = None


class ReplayError(Exception):
    """A record that cannot be applied to the image (the log is invalid at that point)."""


def replica_dirs(dirs, n: int) -> list[str]:
    """§1.2-4: absent, empty or all-MIGRATING directories mean MIGRATING for every replica (B10: the default
    directory below MV 3.7-IV2), so a partition always has one directory per replica."""
    if not dirs or all(d == MIGRATING for d in dirs):
        return [MIGRATING] * n
    return list(dirs)


_dirs = replica_dirs


@dataclass
class Cluster:
    """The image: topics, partitions, brokers, configs, features, active controller."""

    topics: dict[str, str] = field(default_factory=dict)  # topic id -> name
    topic_ids: dict[str, str] = field(default_factory=dict)  # name -> topic id
    partitions: dict[tuple[str, int], Partition] = field(default_factory=dict)
    brokers: dict[int, Broker] = field(default_factory=dict)
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    controller_id: int = -1  # active controller (raft leader) from LeaderChange
    elr_evidence: bool = False  # a non-empty ELR or an ISR written as [] was seen (§1.8 auditor rule)
    elr_override: bool | None = None  # the user says whether eligible.leader.replicas.enable was on
    last_offset: int = -1

    # ---------------------------------------------------------------------------------- queries
    @property
    def metadata_version(self) -> int:
        return self.features.get(METADATA_VERSION, 0)

    @property
    def elr_enabled(self) -> bool:
        """§1.8: the feature level if written; else, at MV >= 4.0-IV1, the override or the evidence."""
        if self.metadata_version < MV_4_0_IV1:
            return False
        if ELR_FEATURE in self.features:
            return self.features[ELR_FEATURE] >= 1
        if self.elr_override is not None:
            return self.elr_override
        return self.elr_evidence

    active = in_image  # ``active(b)`` of controller-rules.md, read off this image (controller_core/brokers)

    def topic_config(self, topic: str, key: str) -> str | None:
        """§1.7 resolution: topic, active controller's node, cluster default (static config: unknown)."""
        for resource in ((TOPIC, topic), (BROKER, str(self.controller_id)), (BROKER, "")):
            value = self.configs.get(resource, {}).get(key)
            if value is not None:
                return value
        return None

    def min_isr(self, topic_id: str) -> int:
        """Effective min ISR m: resolved min.insync.replicas capped by partition 0's replica count."""
        name = self.topics.get(topic_id, "")
        configured = min_isr_value(self.topic_config(name, MIN_ISR))
        p0 = self.partitions.get((topic_id, 0))
        if p0 is None:
            return configured
        return min(configured, len(set(p0.replicas) | set(p0.adding) | set(p0.removing)))

    def diskless(self, topic_id: str) -> str | None:
        """The config (of :data:`DISKLESS_CONFIGS`) that makes the topic leaderless / diskless, or None."""
        name = self.topics.get(topic_id, "")
        for key in DISKLESS_CONFIGS:
            value = self.topic_config(name, key)
            if value is not None and value.strip().lower() == "true":
                return key
        return None

    def unclean_enabled(self, topic_id: str) -> bool:
        value = self.topic_config(self.topics.get(topic_id, ""), UNCLEAN)
        return value is not None and value.strip().lower() == "true"

    def dir_online(self, b: int, directory: str | None) -> bool:
        """§1.5-6 DirectoryId.isOnline."""
        if directory is None or directory in (UNASSIGNED, MIGRATING):
            return True
        if directory == LOST:
            return False
        br = self.brokers.get(b)
        if br is None or not br.log_dirs:
            return True
        return directory in br.log_dirs

    def default_dir(self, b: int) -> str:
        """B10 (``ClusterControlManager.defaultDir`` behind ``KRaftClusterDescriber``): the directory the
        controller gives a replica it places on broker ``b`` -- a new partition's replica or one a
        reassignment adds.  MIGRATING below MV 3.7-IV2; UNASSIGNED if ``b`` is not registered; MIGRATING if
        its registration lists no log directories; its only directory if it lists one; UNASSIGNED (the
        broker picks one and reports it later) if it lists several."""
        if self.metadata_version < MV_3_7_IV2:
            return MIGRATING
        br = self.brokers.get(b)
        if br is None:
            return UNASSIGNED
        if not br.log_dirs:
            return MIGRATING
        if len(br.log_dirs) == 1:
            return br.log_dirs[0]
        return UNASSIGNED

    def partition_dir(self, p: Partition, b: int) -> str | None:
        if p.directories and b in p.replicas:
            return p.directories[p.replicas.index(b)]
        return None

    # ---------------------------------------------------------------------------------- replay
    def apply(self, rtype: str, data: dict, offset: int = -1) -> None:
        """Apply one record (§1.2-1.5)."""
        handler = _APPLY.get(rtype)
        if handler is not None:
            handler(self, data)
        if offset >= 0:
            self.last_offset = offset

    def _topic(self, d):
        if d["name"] in self.topic_ids:
            raise ReplayError(f"TopicRecord for live topic name {d['name']!r}")
        self.topics[d["topicId"]] = d["name"]
        self.topic_ids[d["name"]] = d["topicId"]

    def _remove_topic(self, d):
        tid = d["topicId"]
        name = self.topics.pop(tid, None)
        if name is None:
            raise ReplayError(f"RemoveTopicRecord for unknown topic id {tid}")
        self.topic_ids.pop(name, None)
        for key in [k for k in self.partitions if k[0] == tid]:
            del self.partitions[key]
        self.configs.pop((TOPIC, name), None)

    def _partition(self, d):
        tid = d["topicId"]
        if tid not in self.topics:
            raise ReplayError(f"PartitionRecord for unknown topic id {tid}")
        reps = list(d["replicas"])
        self.partitions[(tid, d["partitionId"])] = Partition(
            topic_id=tid, partition_id=d["partitionId"], replicas=reps, isr=list(d["isr"]), leader=d["leader"],
            leader_epoch=d["leaderEpoch"], partition_epoch=d["partitionEpoch"],
            removing=list(d.get("removingReplicas") or []), adding=list(d.get("addingReplicas") or []),
            elr=list(d.get("eligibleLeaderReplicas") or []), last_known_elr=list(d.get("lastKnownElr") or []),
            lrs=d.get("leaderRecoveryState", RECOVERED), directories=_dirs(d.get("directories"), len(reps)))
        if d.get("eligibleLeaderReplicas") or d["isr"] == []:
            self.elr_evidence = True

    def _partition_change(self, d):
        key = (d["topicId"], d["partitionId"])
        p = self.partitions.get(key)
        if p is None:
            raise ReplayError(f"PartitionChangeRecord for unknown partition {key}")
        self.partitions[key] = merge(p, d)
        if d.get("eligibleLeaderReplicas") or d.get("isr") == []:
            self.elr_evidence = True

    def _clear_elr(self, d):
        names = [d["topicName"]] if d.get("topicName") else list(self.topic_ids)
        for name in names:
            tid = self.topic_ids.get(name)
            for key, p in list(self.partitions.items()):
                if key[0] == tid and (p.elr or p.last_known_elr):
                    self.partitions[key] = merge(p, {"eligibleLeaderReplicas": [], "lastKnownElr": []})

    def _register(self, d):
        self.brokers[d["brokerId"]] = Broker(
            broker_id=d["brokerId"], epoch=d["brokerEpoch"], incarnation_id=d["incarnationId"],
            fenced=d.get("fenced", True), in_controlled_shutdown=d.get("inControlledShutdown", False),
            log_dirs=list(d.get("logDirs") or []), rack=d.get("rack"),
            cordoned_log_dirs=None if d.get("cordonedLogDirs") is None else list(d["cordonedLogDirs"]))

    def _broker(self, bid, epoch, what) -> Broker:
        br = self.brokers.get(bid)
        if br is None:
            raise ReplayError(f"{what} for unregistered broker {bid}")
        return br

    def _registration_change(self, d):
        br = self._broker(d["brokerId"], d["brokerEpoch"], "BrokerRegistrationChangeRecord")
        f = d.get("fenced", 0)
        if f == 1:
            br.fenced = True
        elif f == -1:
            br.fenced = False
        if d.get("inControlledShutdown", 0) == 1:
            br.in_controlled_shutdown = True
        if d.get("logDirs"):
            br.log_dirs = list(d["logDirs"])
        if d.get("cordonedLogDirs") is not None:  # KIP-1066: null = no change, [] = none cordoned any more
            br.cordoned_log_dirs = list(d["cordonedLogDirs"])

    def _fence(self, d):
        self._broker(d["id"], d["epoch"], "FenceBrokerRecord").fenced = True

    def _unfence(self, d):
        self._broker(d["id"], d["epoch"], "UnfenceBrokerRecord").fenced = False

    def _unregister(self, d):
        self.brokers.pop(d["brokerId"], None)

    def _config(self, d):
        res = self.configs.setdefault((d["resourceType"], d["resourceName"]), {})
        if d.get("value") is None:
            res.pop(d["name"], None)
        else:
            res[d["name"]] = d["value"]

    def _feature(self, d):
        self.features[d["name"]] = d["featureLevel"]

    def _leader_change(self, d):
        self.controller_id = d["leaderId"]


_APPLY = {
    "TOPIC_RECORD": Cluster._topic,
    "REMOVE_TOPIC_RECORD": Cluster._remove_topic,
    "PARTITION_RECORD": Cluster._partition,
    "PARTITION_CHANGE_RECORD": Cluster._partition_change,
    "CLEAR_ELR_RECORD": Cluster._clear_elr,
    "REGISTER_BROKER_RECORD": Cluster._register,
    "BROKER_REGISTRATION_CHANGE_RECORD": Cluster._registration_change,
    "FENCE_BROKER_RECORD": Cluster._fence,
    "UNFENCE_BROKER_RECORD": Cluster._unfence,
    "UNREGISTER_BROKER_RECORD": Cluster._unregister,
    "CONFIG_RECORD": Cluster._config,
    "FEATURE_LEVEL_RECORD": Cluster._feature,
    "LEADER_CHANGE": Cluster._leader_change,
}


def merge(p: Partition, d: dict) -> Partition:
    """§1.3 PartitionRegistration.merge: the state after one PartitionChangeRecord (given in JSON
    form, absent keys = unchanged).  PE +1 always; LE +1 whenever the leader field is present."""
    q = p.copy()
    if d.get("isr") is not None:
        q.isr = list(d["isr"])
    leader = d.get("leader", LEADER_UNCHANGED)
    if leader != LEADER_UNCHANGED:
        q.leader = leader
        q.leader_epoch += 1
    if d.get("replicas") is not None:
        q.replicas = list(d["replicas"])
    if d.get("removingReplicas") is not None:
        q.removing = list(d["removingReplicas"])
    if d.get("addingReplicas") is not None:
        q.adding = list(d["addingReplicas"])
    lrs = d.get("leaderRecoveryState", -1)
    if lrs != -1:
        q.lrs = lrs
    if d.get("directories") is not None:
        q.directories = _dirs(d["directories"], len(q.replicas))
    elif d.get("replicas") is not None and len(q.directories) != len(q.replicas):
        q.directories = _dirs(None, len(q.replicas))
    if d.get("eligibleLeaderReplicas") is not None:
        q.elr = list(d["eligibleLeaderReplicas"])
    if d.get("lastKnownElr") is not None:
        q.last_known_elr = list(d["lastKnownElr"])
    q.partition_epoch += 1
    return q
