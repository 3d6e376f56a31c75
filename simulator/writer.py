"""Files of a simulated KRaft data directory: log segments rolled by size, snapshots, side files.

Batches are streamed to the open segment as they are produced, so memory stays bounded whatever the
length of the log.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from controller_core.codec.batch import encode_batch
from simulator.fastcodec import encode_batch_fast

META_DIR = "__cluster_metadata-0"
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"

# The file that says a directory holds the simulator's own output: written before anything else, so a
# simulation may overwrite it again; a non-empty directory without it is never written into (it may be a
# real broker's data directory).  After a complete run it lists the files the run wrote (``files``);
# the next run into the directory removes exactly those (or, when a run was interrupted before the list,
# the files named like the simulator's output), never anything else.
MARKER = ".kraft-audit-simulated"
# what the simulator writes, for a marker without its list (relative paths, fnmatch-style)
OWN_PATTERNS = (f"{META_DIR}/*.log", f"{META_DIR}/*.checkpoint", f"{META_DIR}/quorum-state",
                f"{META_DIR}/leader-epoch-checkpoint", f"{META_DIR}/partition.metadata", "bootstrap.checkpoint",
                "meta.properties", "ground_truth.json", "log-info/broker-*.json")


class OutputError(Exception):
    """The output directory cannot be written without destroying what it holds (exit 2)."""


def _files(out: Path) -> set[str]:
    """Every non-directory entry under ``out`` (symbolic links not followed), as relative POSIX paths."""
    found = set()
    for root, dirs, names in os.walk(out):
        rel = Path(root).relative_to(out)
        found.update((rel / n).as_posix() for n in names)
        found.update((rel / d).as_posix() for d in dirs if os.path.islink(os.path.join(root, d)))
    return found


def _own_files(out: Path) -> set[str]:
    """The files an earlier simulation into ``out`` wrote (``out`` holds the marker)."""
    try:
        listed = json.loads((out / MARKER).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None
    present = _files(out)
    if isinstance(listed, list):  # only plain relative paths inside out: a marker never deletes elsewhere
        return {f for f in listed if isinstance(f, str) and f in present}
    from fnmatch import fnmatchcase
    return {f for f in present if any(fnmatchcase(f, pat) for pat in OWN_PATTERNS)}


def check_output(out) -> set[str]:
    """Refuse (OutputError) an output directory the simulator may not write into: an existing path that is not
    a directory, or a non-empty directory without the marker.  Returns the files already there that the
    simulator did not write (kept, and left out of the marker's list)."""
    out = Path(out)
    if not out.exists() and not out.is_symlink():
        return set()
    if not out.is_dir():
        raise OutputError(f"not a directory (-o {out})")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return set()
    if MARKER not in entries:
        held = (f"a Kafka data directory ({META_DIR})" if META_DIR in entries
                else f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} (e.g. {entries[0]})")
        raise OutputError(f"refusing to write into a non-empty directory simulate did not create: it holds {held}; "
                          f"choose a new or empty directory, or one an earlier simulate wrote (-o {out})")
    return _files(out) - _own_files(out) - {MARKER}


def claim_output(out: Path) -> None:
    """Make ``out`` the simulator's: checked (check_output), the earlier simulation's files removed, the
    marker written before any output."""
    check_output(out)
    out.mkdir(parents=True, exist_ok=True)
    if (out / MARKER).exists():
        for rel in sorted(_own_files(out)):
            (out / rel).unlink()
    _write_marker(out, None)


def seal_output(out, kept: set[str]) -> list[str]:
    """After a complete run: the marker lists the files the run wrote (everything but ``kept``)."""
    out = Path(out)
    files = sorted(_files(out) - set(kept) - {MARKER})
    _write_marker(out, files)
    return files


def _write_marker(out: Path, files: list[str] | None) -> None:
    doc = {"writtenBy": "kraft-audit simulate",
           "note": "this directory holds simulated output; kraft-audit simulate -o may overwrite it",
           "files": files}
    tmp = out / (MARKER + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / MARKER)


class LogWriter:
    def __init__(self, out: Path, segment_bytes: int):
        self.out = Path(out)
        self.meta = self.out / META_DIR
        claim_output(self.out)  # never into a directory it did not write: its segments would be deleted
        self.meta.mkdir(parents=True, exist_ok=True)
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
