"""A small metadata log written batch by batch with the real batch encoder: the per-rule invariant tests
and the property tests of the compiled invariant pass build their logs with it."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from controller_core.codec.batch import raw_record
from controller_core.codec.message import encode_body
from controller_core.records import BY_TYPE_NAME
from simulator.writer import write_log


def uuid(name: str) -> str:
    """A deterministic 22-character base64url uuid."""
    return base64.urlsafe_b64encode(hashlib.md5(name.encode()).digest()).decode().rstrip("=")


CHANGE_KEYS = {"isr": "isr", "leader": "leader", "replicas": "replicas", "removing": "removingReplicas",
               "adding": "addingReplicas", "lrs": "leaderRecoveryState", "dirs": "directories",
               "elr": "eligibleLeaderReplicas", "lke": "lastKnownElr"}


class Log:
    """A metadata log under construction.  The constructor writes the usual start of a cluster: the
    feature levels (none for a pre-3.3 log, ``mv=None``), then each broker's registration, then one batch
    unfencing them all.  ``add`` appends one batch and returns the offsets of its records."""

    def __init__(self, mv: int | None = 25, *, elr: bool = False, brokers=(1, 2, 3)):
        self.mv = mv
        self.batches: list[tuple[int, list]] = []
        self.next_offset = 0
        self.generation: dict[int, int] = {}
        self.epoch: dict[int, int] = {}
        self.incarnation: dict[int, str] = {}
        feats = []
        if mv is not None:
            feats.append(self.feature("metadata.version", mv))
        if elr:
            feats.append(self.feature("eligible.leader.replicas.version", 1))
        if feats:
            self.add(*feats)
        for b in brokers:
            self.add(self.register(b))
        if brokers:
            self.add(*[self.unfence(b) for b in brokers])

    @property
    def version(self) -> int:
        """Partition / PartitionChange record version Kafka uses at this metadata.version (§1.3-4)."""
        mv = self.mv or 0
        return 2 if mv >= 23 else 1 if mv >= 17 else 0

    def add(self, *records) -> list[int]:
        base = self.next_offset
        self.batches.append((base, list(records)))
        self.next_offset += len(records)
        return list(range(base, base + len(records)))

    # ---------------------------------------------------------------------------------- records
    @staticmethod
    def feature(name: str, level: int):
        return ("FEATURE_LEVEL_RECORD", 0, {"name": name, "featureLevel": level})

    @staticmethod
    def config(name: str, value: str | None, resource_type: int = 4, resource: str = ""):
        return ("CONFIG_RECORD", 0, {"resourceType": resource_type, "resourceName": resource, "name": name,
                                     "value": value})

    def register(self, b: int, *, new: bool = True, fenced: bool = True, cs: bool = False):
        if new or b not in self.incarnation:
            n = self.generation[b] = self.generation.get(b, 0) + 1
            self.incarnation[b] = uuid(f"broker-{b}-{n}")
            self.epoch[b] = 1000 * n + b
        data = {"brokerId": b, "incarnationId": self.incarnation[b], "brokerEpoch": self.epoch[b],
                "fenced": fenced, "inControlledShutdown": cs}
        return ("REGISTER_BROKER_RECORD", 0 if self.mv is None else 1, data)

    def _old_fencing(self) -> bool:
        return self.mv is None or self.mv < 6  # Fence/UnfenceBrokerRecord before 3.3-IV2 (§1.5)

    def unfence(self, b: int, epoch: int | None = None):
        e = self.epoch.get(b, 0) if epoch is None else epoch
        if self._old_fencing():
            return ("UNFENCE_BROKER_RECORD", 0, {"id": b, "epoch": e})
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": e, "fenced": -1})

    def fence(self, b: int, epoch: int | None = None):
        e = self.epoch.get(b, 0) if epoch is None else epoch
        if self._old_fencing():
            return ("FENCE_BROKER_RECORD", 0, {"id": b, "epoch": e})
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": e, "fenced": 1})

    def shutdown(self, b: int, value: int = 1):
        """Enter controlled shutdown (BrokerRegistrationChangeRecord v1)."""
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 1,
                {"brokerId": b, "brokerEpoch": self.epoch[b], "inControlledShutdown": value})

    @staticmethod
    def topic(name: str, topic_id: str | None = None):
        return ("TOPIC_RECORD", 0, {"name": name, "topicId": topic_id or uuid("topic-" + name)})

    def partition(self, name: str, p: int, replicas, isr=None, leader=None, *, le=0, pe=0, version=None,
                  topic_id: str | None = None, **fields):
        isr = list(replicas) if isr is None else isr
        data = {"partitionId": p, "topicId": topic_id or uuid("topic-" + name), "replicas": list(replicas),
                "isr": list(isr), "leader": (isr[0] if isr else -1) if leader is None else leader,
                "leaderEpoch": le, "partitionEpoch": pe}
        for k, v in fields.items():
            data[CHANGE_KEYS[k]] = v
        return ("PARTITION_RECORD", self.version if version is None else version, data)

    def change(self, name: str, p: int, *, version=None, **fields):
        data = {"partitionId": p, "topicId": uuid("topic-" + name)}
        for k, v in fields.items():
            data[CHANGE_KEYS[k]] = v
        return ("PARTITION_CHANGE_RECORD", self.version if version is None else version, data)

    def create(self, name: str, *assignments) -> list[int]:
        """One topic-creation batch: every replica active, ISR = replicas, leader = first replica."""
        return self.add(self.topic(name), *[self.partition(name, i, r) for i, r in enumerate(assignments)])

    # ---------------------------------------------------------------------------------- output
    def write(self, data_dir: Path) -> Path:
        write_log(data_dir, [recs for _, recs in self.batches], timestamp=lambda base: 1_700_000_000_000 + base)
        return data_dir


# ------------------------------------------------------------------------------------------ newer Kafka
PCR = BY_TYPE_NAME["PARTITION_CHANGE_RECORD"]
DIRS = [uuid("dir-a"), uuid("dir-b")]
EXTRA_TAG = 42
EXTRA_BYTES = b"\x07\x01\x02"


def newer_log(tmp_path: Path) -> tuple[Path, dict]:
    """Issue 14's "Newer Kafka" acceptance log (README "Newer Kafka"): a 3-broker cluster with topic orders, then
    a RegisterBrokerRecord v4 with a cordoned dir (KIP-1066), a PartitionChangeRecord v3 (above the newest
    declared) with the unknown tag EXTRA_TAG, a record of the unknown apiKey 99, a hand-built
    UnregisterControllerRecord (apiKey 29), a BrokerRegistrationChangeRecord v3 uncordoning and one changing
    nothing.  Returns its data directory and the offset of each hand-built record."""
    log = Log(25)
    log.create("orders", [1, 2, 3])
    at = {}
    [at["register_v4"]] = log.add(("REGISTER_BROKER_RECORD", 4, {
        "brokerId": 4, "incarnationId": uuid("broker-4"), "brokerEpoch": 400, "fenced": False, "logDirs": DIRS,
        "cordonedLogDirs": [DIRS[1]]}))
    body = encode_body(PCR.fields, 2, {"partitionId": 0, "topicId": uuid("topic-orders"), "isr": [1, 2]},
                       extra_tags={EXTRA_TAG: EXTRA_BYTES})
    [at["pcr_v3"]] = log.add(raw_record(5, 3, body))
    [at["api_key_99"]] = log.add(raw_record(99, 0, b"\x00vendor"))
    [at["unregister_controller"]] = log.add(raw_record(29, 0, b"\x00\x00\x00\x03\x00"))  # controllerId 3, no tags
    [at["uncordon"]] = log.add(("BROKER_REGISTRATION_CHANGE_RECORD", 3, {
        "brokerId": 4, "brokerEpoch": 400, "cordonedLogDirs": []}))
    [at["no_change"]] = log.add(("BROKER_REGISTRATION_CHANGE_RECORD", 3, {"brokerId": 4, "brokerEpoch": 400}))
    return log.write(tmp_path / "data"), at


