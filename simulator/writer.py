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


def write_bootstrap(out: Path, format_ms: int, features: list[tuple[str, int]]) -> None:
    """``bootstrap.checkpoint`` as ``kafka-storage.sh format`` leaves it beside the metadata folder."""
    recs = [("FEATURE_LEVEL_RECORD", 0, {"name": n, "featureLevel": v}) for n, v in features]
    Path(out, "bootstrap.checkpoint").write_bytes(
        encode_batch(0, [("SNAPSHOT_HEADER", 0, {"version": 0, "lastContainedLogTimestamp": 0})],
                     leader_epoch=0, timestamp=format_ms)
        + encode_batch(1, recs, leader_epoch=0, timestamp=format_ms + 1)
        + encode_batch(1 + len(recs), [("SNAPSHOT_FOOTER", 0, {"version": 0})], leader_epoch=0,
                       timestamp=format_ms + 2))


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
