"""Files of a simulated KRaft data directory: log segments rolled by size, snapshots, side files.

Batches are streamed to the open segment as they are produced, so memory stays bounded whatever the
length of the log.
"""
from __future__ import annotations

import json
from pathlib import Path

from controller_core.codec.batch import encode_batch
from simulator.fastcodec import encode_batch_fast

META_DIR = "__cluster_metadata-0"
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


class LogWriter:
    def __init__(self, out: Path, segment_bytes: int):
        self.out = Path(out)
        self.meta = self.out / META_DIR
        self.meta.mkdir(parents=True, exist_ok=True)
        for old in list(self.meta.glob("*.log")) + list(self.meta.glob("*.checkpoint")):
            old.unlink()
        self.segment_bytes = segment_bytes
        self.next_offset = 0
        self.last_timestamp = 0
        self.bytes_written = 0
        self.batches = 0
        self._seg = None
        self._seg_size = 0
        self.segments: list[str] = []
        self.snapshots: list[str] = []

    def append(self, ts: int, raft_epoch: int, records: list[tuple[str, int, dict]]) -> int:
        """Write one batch; returns its base offset."""
        data = encode_batch_fast(self.next_offset, records, leader_epoch=raft_epoch, timestamp=ts)
        return self.append_encoded(ts, data, len(records))

    def append_encoded(self, ts: int, data: bytes, count: int) -> int:
        if self._seg is None or (self._seg_size and self._seg_size + len(data) > self.segment_bytes):
            self._roll()
        base = self.next_offset
        self._seg.write(data)
        self._seg_size += len(data)
        self.bytes_written += len(data)
        self.batches += 1
        self.next_offset += count
        self.last_timestamp = ts
        return base

    def _roll(self) -> None:
        if self._seg is not None:
            self._seg.close()
        name = f"{self.next_offset:020d}.log"
        self.segments.append(name)
        self._seg = open(self.meta / name, "wb")
        self._seg_size = 0

    def close(self) -> None:
        if self._seg is not None:
            self._seg.close()
            self._seg = None

    def snapshot(self, raft_epoch: int, ts: int, records, chunk: int = 2000) -> str:
        """Snapshot of the state after every record before ``next_offset`` (header, body, footer)."""
        name = f"{self.next_offset:020d}-{raft_epoch:010d}.checkpoint"
        with open(self.meta / name, "wb") as f:
            f.write(encode_batch(0, [("SNAPSHOT_HEADER", 0, {"version": 0,
                                                             "lastContainedLogTimestamp": self.last_timestamp})],
                                 leader_epoch=raft_epoch, timestamp=ts))
            off = 1
            part = []
            for rec in records:  # an iterable: the image is streamed, never held as one list
                part.append(rec)
                if len(part) == chunk:
                    f.write(encode_batch_fast(off, part, leader_epoch=raft_epoch, timestamp=ts + 1))
                    off += len(part)
                    part = []
            if part:
                f.write(encode_batch_fast(off, part, leader_epoch=raft_epoch, timestamp=ts + 1))
                off += len(part)
            f.write(encode_batch(off, [("SNAPSHOT_FOOTER", 0, {"version": 0})], leader_epoch=raft_epoch,
                                 timestamp=ts + 2))
        self.snapshots.append(name)
        return name


def checkpoint_bytes(batches, *, leader_epoch: int, timestamp: int, last_contained_timestamp: int = 0) -> bytes:
    """A checkpoint file as Kafka writes one (a snapshot, bootstrap.checkpoint): a SNAPSHOT_HEADER control batch
    at ``timestamp``, the ``batches`` of records from offset 1 (``timestamp`` + 1), a SNAPSHOT_FOOTER (+ 2)."""
    out = [encode_batch(0, [("SNAPSHOT_HEADER", 0, {"version": 0,
                                                    "lastContainedLogTimestamp": last_contained_timestamp})],
                        leader_epoch=leader_epoch, timestamp=timestamp)]
    off = 1
    for recs in batches:
        out.append(encode_batch(off, recs, leader_epoch=leader_epoch, timestamp=timestamp + 1))
        off += len(recs)
    out.append(encode_batch(off, [("SNAPSHOT_FOOTER", 0, {"version": 0})], leader_epoch=leader_epoch,
                            timestamp=timestamp + 2))
    return b"".join(out)


def write_bootstrap(out: Path, format_ms: int, features: list[tuple[str, int]]) -> None:
    """``bootstrap.checkpoint`` as ``kafka-storage.sh format`` leaves it beside the metadata folder."""
    recs = [("FEATURE_LEVEL_RECORD", 0, {"name": n, "featureLevel": v}) for n, v in features]
    Path(out, "bootstrap.checkpoint").write_bytes(checkpoint_bytes([recs], leader_epoch=0, timestamp=format_ms))


def write_log(out, batches, *, first_offset: int = 0, timestamp=None, leader_epoch: int = 1,
              snapshot=None, snapshot_epoch: int = 1) -> Path:
    """A data directory ``out`` whose metadata log is exactly ``batches`` (lists of (type, version, data), one
    batch each, consecutive offsets from ``first_offset``) in one segment; returns the segment's path.

    For the logs a simulation does not write: hand-picked records around one rule, a controller decision that is
    wrong on purpose, a broken invariant (the tests of the verifier, the invariants, the fold and the audit).
    ``timestamp(base_offset)`` is each batch's timestamp (default 0). ``snapshot``: batches of records written as
    the ``<first_offset>-<snapshot_epoch>.checkpoint`` the log continues from."""
    meta = Path(out) / META_DIR
    meta.mkdir(parents=True, exist_ok=True)
    if snapshot is not None:
        (meta / f"{first_offset:020d}-{snapshot_epoch:010d}.checkpoint").write_bytes(
            checkpoint_bytes(snapshot, leader_epoch=snapshot_epoch, timestamp=0))
    raw, offset = bytearray(), first_offset
    for recs in batches:
        raw += encode_batch(offset, recs, leader_epoch=leader_epoch,
                            timestamp=0 if timestamp is None else timestamp(offset))
        offset += len(recs)
    path = meta / f"{first_offset:020d}.log"
    path.write_bytes(bytes(raw))
    return path


def write_side_files(out: Path, *, node_id: int, directory_id: str, cluster_id: str, raft_leader: int,
                     raft_epoch: int, voters: list[int], epoch_starts: list[tuple[int, int]],
                     start_text: str) -> None:
    out = Path(out)
    meta = out / META_DIR
    (out / "meta.properties").write_text(
        f"#\n#{start_text}\nnode.id={node_id}\ndirectory.id={directory_id}\nversion=1\ncluster.id={cluster_id}\n",
        encoding="ascii", newline="\n")
    quorum = {"clusterId": "", "leaderId": raft_leader, "leaderEpoch": raft_epoch, "votedId": -1,
              "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in voters], "data_version": 0}
    (meta / "quorum-state").write_text(json.dumps(quorum, separators=(",", ":")), encoding="ascii", newline="\n")
    lines = ["0", str(len(epoch_starts))] + [f"{e} {o}" for e, o in epoch_starts]
    (meta / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n", encoding="ascii", newline="\n")
    (meta / "partition.metadata").write_text(f"version: 0\ntopic_id: {METADATA_TOPIC_ID}", encoding="ascii",
                                             newline="\n")
