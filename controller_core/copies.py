"""Several copies of one metadata log (each controller and broker keeps its own replica of
``__cluster_metadata``): do they agree, where does one stop or diverge, which is the most complete?

Raft replicates batches byte for byte: two healthy copies hold, for every offset both have, the same batch
-- same base offset, same leader epoch, same CRC.  A copy may legitimately be shorter (a node that was down
or lagging: a *prefix*), but two copies holding different batches at one offset means a Raft safety
violation, or a copy restored from somewhere else (*diverged*).

The comparison reads only batch headers (61 bytes per batch) with a compiled walk; a damaged batch ends that
copy's readable range (reported with its file and byte position) instead of failing the comparison.

Pure NumPy/numba; never imports Spark, Delta or the audit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core import logdir
from controller_core.quorum import meta_properties

HEADER_SIZE, LOG_OVERHEAD, CRC_OFFSET = 61, 12, 17
IDENTICAL, PREFIX, INCOMPLETE, DIVERGED, DISJOINT = "identical", "prefix", "incomplete", "diverged", "disjoint"
# how one batch of a copy relates to the batches another copy (or the lake) holds: relate_batches
SAME, NEW, DIFFERS = 0, 1, 2
# the quarantine reason of a span of a copy that an ingest does not take: it differs from the log bronze holds
COPY_DIVERGED = "COPY_DIVERGED"
UNKNOWN_CRC = -1  # a batch whose CRC is not known (bronze rows ingested before the CRC was kept)


@njit(cache=True, nogil=True)
def _headers(a, out):
    """The batch headers of one segment, in file order, until the first batch that cannot be a batch (bad
    magic or length, running past the end): rows (position, base offset, last offset, leader epoch, crc);
    returns (rows, position where reading stopped)."""
    pos = 0
    n = 0
    end = len(a)
    while end - pos >= HEADER_SIZE:
        blen = (np.int64(a[pos + 8]) << 24) | (np.int64(a[pos + 9]) << 16) | (np.int64(a[pos + 10]) << 8) | a[pos + 11]
        if blen >= 1 << 31:
            blen -= 1 << 32
        if a[pos + 16] != 2 or blen < HEADER_SIZE - LOG_OVERHEAD or pos + blen + LOG_OVERHEAD > end:
            break
        base = np.int64(0)
        for k in range(8):
            base = (base << 8) | np.int64(a[pos + k])
        epoch = np.int64(0)
        for k in range(4):
            epoch = (epoch << 8) | np.int64(a[pos + 12 + k])
        if epoch >= 1 << 31:
            epoch -= 1 << 32
        crc = np.int64(0)
        for k in range(4):
            crc = (crc << 8) | np.int64(a[pos + CRC_OFFSET + k])
        delta = np.int64(0)
        for k in range(4):
            delta = (delta << 8) | np.int64(a[pos + 23 + k])
        if delta >= 1 << 31:
            delta -= 1 << 32
        out[n, 0] = pos
        out[n, 1] = base
        out[n, 2] = base + delta
        out[n, 3] = epoch
        out[n, 4] = crc
        n += 1
        pos += blen + LOG_OVERHEAD
    return n, pos


@dataclass
class Copy:
    """One node's copy: its segments' batches in offset order and what could not be read."""

    path: str
    node_id: str | None  # meta.properties node.id, when present
    base: np.ndarray  # per batch: base offset
    last: np.ndarray  # last offset
    epoch: np.ndarray  # partition leader epoch (the Raft epoch it was written in)
    crc: np.ndarray
    files: list  # per batch: index into segments
    segments: list[str]
    snapshots: list[str]
    unreadable: list[dict] = field(default_factory=list)  # {"file", "position"} where a segment stopped making sense
    position: np.ndarray | None = None  # per batch: byte position in its segment, when known

    @property
    def first_offset(self) -> int | None:
        return int(self.base[0]) if len(self.base) else None

    @property
    def last_offset(self) -> int | None:
        return int(self.last[-1]) if len(self.last) else None

    def to_json(self) -> dict:
        return {"path": self.path, "nodeId": self.node_id, "firstOffset": self.first_offset,
                "lastOffset": self.last_offset, "batches": int(len(self.base)),
                "lastEpoch": int(self.epoch[-1]) if len(self.epoch) else None,
                "segments": self.segments, "snapshots": self.snapshots, "unreadable": self.unreadable}


def read_copy(path: str | Path) -> Copy:
    """The batches of one copy (a data directory or its ``__cluster_metadata-0`` folder)."""
    data_dir, _ = logdir.resolve_log_dir(Path(path))
    files = logdir.discover(Path(path))
    segs = [f for f in files if f.kind == logdir.SEGMENT]
    snaps = [f.label for f in files if f.kind == logdir.SNAPSHOT]
    parts, where, bad = [], [], []
    for i, f in enumerate(segs):
        a = np.fromfile(f.path, np.uint8)
        out = np.empty((len(a) // HEADER_SIZE + 1, 5), np.int64)
        n, stop = _headers(a, out)
        if stop < len(a):
            bad.append({"file": f.label, "position": int(stop)})
        parts.append(out[:n])
        where.append(np.full(n, i, np.int64))
    rows = np.concatenate(parts) if parts else np.zeros((0, 5), np.int64)
    seg_of = np.concatenate(where) if where else np.zeros(0, np.int64)
    # one batch per base offset, the later segment's when two overlap (a segment rolled mid-copy)
    order = np.lexsort((np.arange(len(rows)), rows[:, 1]))
    rows, seg_of = rows[order], seg_of[order]
    keep = np.r_[rows[1:, 1] != rows[:-1, 1], True] if len(rows) else np.zeros(0, bool)
    rows, seg_of = rows[keep], seg_of[keep]
    return Copy(path=str(path), node_id=meta_properties(data_dir).get("node.id"), base=rows[:, 1], last=rows[:, 2], epoch=rows[:, 3],
                crc=rows[:, 4], files=seg_of.tolist(), segments=[f.label for f in segs], snapshots=snaps,
                unreadable=bad, position=rows[:, 0])


def of_batches(path: str, base, last, epoch, crc, position=None, files=None, segments=None) -> Copy:
    """A copy from batch columns known otherwise (the batches bronze already holds, those a decode yielded),
    in base offset order; ``crc`` may be :data:`UNKNOWN_CRC`.  ``files``: per batch an index into
    ``segments``."""
    order = np.argsort(np.asarray(base, np.int64), kind="stable")

    def col(v):
        return np.asarray(v, np.int64)[order]

    return Copy(path=path, node_id=None, base=col(base), last=col(last), epoch=col(epoch), crc=col(crc),
                files=col(files).tolist() if files is not None else [0] * len(order), segments=list(segments or []),
                snapshots=[], position=col(position) if position is not None else None)


def relate_batches(held: Copy, other: Copy) -> np.ndarray:
    """Per batch of ``other`` (its order): :data:`SAME` when ``held`` has the same batch (base offset, last
    offset, leader epoch and CRC; an :data:`UNKNOWN_CRC` on either side matches any), :data:`DIFFERS` when
    ``held`` has a batch over any of its offsets that is not the same one (another epoch, CRC or extent: the
    copies diverge there), :data:`NEW` when ``held`` has none of its offsets.  ``held``'s batches must not
    overlap each other (one batch per offset, as :func:`read_copy` keeps them)."""
    out = np.full(len(other.base), NEW, np.int8)
    if not len(held.base) or not len(other.base):
        return out
    # the batch of held with the greatest base offset <= the other batch's last offset: held's batches are
    # sorted and disjoint, so the other batch overlaps some batch of held iff it overlaps this one
    i = np.searchsorted(held.base, other.last, side="right") - 1
    j = np.maximum(i, 0)
    overlaps = (i >= 0) & (held.last[j] >= other.base)
    crc_ok = (held.crc[j] == other.crc) | (held.crc[j] == UNKNOWN_CRC) | (other.crc == UNKNOWN_CRC)
    same = (overlaps & (held.base[j] == other.base) & (held.last[j] == other.last)
            & (held.epoch[j] == other.epoch) & crc_ok)
    out[overlaps] = DIFFERS
    out[same] = SAME
    return out


def withheld_spans(relation: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """What an ingest takes from a copy whose batches relate to the lake's as ``relation`` (from
    :func:`relate_batches`, in the copy's offset order): (mask of the batches to add, [first, last] batch
    index spans withheld).  A copy adds its :data:`NEW` batches up to its first :data:`DIFFERS` one; from
    there on every batch that is not :data:`SAME` is withheld (a diverged copy's later history is another
    log's, even where bronze has nothing yet), consecutive ones as one span."""
    n = len(relation)
    differs = np.flatnonzero(relation == DIFFERS)
    cut = int(differs[0]) if len(differs) else n
    add = (relation == NEW) & (np.arange(n) < cut)
    held = np.flatnonzero((relation != SAME) & (np.arange(n) >= cut))
    runs = np.split(held, np.flatnonzero(np.diff(held) > 1) + 1) if len(held) else []
    return add, [(int(r[0]), int(r[-1])) for r in runs]


def _side(c: Copy, i: int | None) -> dict | None:
    if i is None:
        return None
    return {"epoch": int(c.epoch[i]), "crc": int(c.crc[i]), "lastOffset": int(c.last[i])}


def compare_pair(a: Copy, b: Copy) -> dict:
    """How copy ``b`` relates to copy ``a`` over the offsets both cover:

    * ``identical`` -- the same batches;
    * ``prefix`` -- one holds every batch of the other and more after it (a node that stopped or lagged);
    * ``incomplete`` -- no batch contradicts, but one lacks batches the other has inside the common range (a
      segment missing from a copy: ``missing`` lists the offset ranges);
    * ``diverged`` -- at some offset both hold a batch and the batches differ (epoch, CRC or extent): a Raft
      safety violation, or a copy of another log;
    * ``disjoint`` -- no offset in common.

    ``agreeUpTo``: the last offset up to which both hold the same batches; ``firstDifference``: the first offset
    of the common range where they do not (each side's batch there, or null)."""
    out = {"a": a.path, "b": b.path, "onlyInA": int(len(a.base)), "onlyInB": int(len(b.base)), "missing": None}
    if not len(a.base) or not len(b.base) or a.last[-1] < b.base[0] or b.last[-1] < a.base[0]:
        return dict(out, relation=DISJOINT, agreeUpTo=None, firstDifference=None)
    out["onlyInA"] = int(len(a.base) - np.isin(a.base, b.base).sum())  # batches the other copy lacks
    out["onlyInB"] = int(len(b.base) - np.isin(b.base, a.base).sum())
    lo, hi = max(a.base[0], b.base[0]), min(a.last[-1], b.last[-1])
    # the batches of each inside the common range, matched on their base offsets
    bases = np.union1d(a.base[(a.base >= lo) & (a.base <= hi)], b.base[(b.base >= lo) & (b.base <= hi)])
    pa_ = np.minimum(np.searchsorted(a.base, bases), len(a.base) - 1)
    pb_ = np.minimum(np.searchsorted(b.base, bases), len(b.base) - 1)
    in_a, in_b = a.base[pa_] == bases, b.base[pb_] == bases
    same = in_a & in_b & (a.epoch[pa_] == b.epoch[pb_]) & (a.crc[pa_] == b.crc[pb_]) & (a.last[pa_] == b.last[pb_])
    contradicts = in_a & in_b & ~same
    diff = np.flatnonzero(~same)
    if not len(diff):
        identical = out["onlyInA"] == out["onlyInB"] == 0
        return dict(out, relation=IDENTICAL if identical else PREFIX, agreeUpTo=int(hi), firstDifference=None)
    k = int(diff[0])
    first = {"offset": int(bases[k]), "a": _side(a, int(pa_[k]) if in_a[k] else None),
             "b": _side(b, int(pb_[k]) if in_b[k] else None)}
    # the last offset of the last batch both hold identically before it (none when the first shared one differs)
    agree = int(a.last[pa_[k - 1]]) if k and same[k - 1] else None
    # a batch over an offset the other holds in another batch (same base offset or not) contradicts it
    if contradicts.any() or (relate_batches(a, b) == DIFFERS).any():
        return dict(out, relation=DIVERGED, agreeUpTo=agree, firstDifference=first)

    def lacking(mask, other: Copy, at: np.ndarray) -> list[list[int]]:
        """Offset ranges [first, last] of the other copy's batches a copy lacks (``mask``: per common base)."""
        idx = np.flatnonzero(mask)
        runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1) if len(idx) else []
        return [[int(bases[r[0]]), int(other.last[at[r[-1]]])] for r in runs]

    return dict(out, relation=INCOMPLETE, agreeUpTo=agree, firstDifference=first,
                missing={"a": lacking(~in_a, b, pb_), "b": lacking(~in_b, a, pa_)})


def most_complete(copies: list[Copy]) -> Copy | None:
    """The copy a replay should trust: the newest Raft epoch at its end (a diverged tail of an older epoch
    is what Raft truncates), then the most offsets, then the most batches."""
    readable = [c for c in copies if len(c.base)]
    if not readable:
        return None
    return max(readable, key=lambda c: (int(c.epoch[-1]), int(c.last[-1]), len(c.base), -len(c.unreadable)))


def compare(paths: list[str | Path]) -> dict:
    copies = [read_copy(p) for p in paths]
    pairs = [compare_pair(copies[i], copies[j]) for i in range(len(copies)) for j in range(i + 1, len(copies))]
    best = most_complete(copies)
    return {"copies": [c.to_json() for c in copies], "pairs": pairs, "mostComplete": best.path if best else None,
            "diverged": any(p["relation"] == DIVERGED for p in pairs)}
