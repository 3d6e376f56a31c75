"""A replay's files decoded on every core it may use: each large file cut at batch boundaries into ranges that
threads decode at once, the results put back in file order.

Threads, not processes: the decoder's loops are compiled without the GIL (``codec/walk.py``, ``framing.py``,
``flat.py``, ``placed.py``) and NumPy and Arrow release it in their kernels, so two threads decode a 60 MB
segment in about half the time of one, and the results need no copying between processes.

Why the rows equal the one-pass decoder's (``logfile.iter_chunks`` over the whole file): a range's reader knows
nothing of the offsets before it (the offset-sequence check, ``logfile.check_offsets``, starts afresh) and its
windows start elsewhere than one pass's.  On a file where nothing was quarantined and every row's offset is one
after the row before, across the ranges too, the sequence check kept every batch whatever it knew before and
wherever the windows started, so neither matters.  Any other file is decoded again in one pass: every
quarantine entry, its message and every judgement of a damaged offset stay the one-pass decoder's.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np

from controller_core import threads as _threads
from controller_core.codec.logfile import DecodedChunk, Quarantine, iter_chunks, split_points

T = TypeVar("T")

# a file is cut into ranges of at least this many bytes (smaller ranges gain nothing on the threads' start)
MIN_RANGE_BYTES = 8 << 20


@dataclass
class FileDecode:
    """One file's decoding: the spans quarantined and ``fn`` of each non-empty chunk, in file order."""

    quarantine: list[Quarantine] = field(default_factory=list)
    results: list = field(default_factory=list)


@dataclass
class _Range(FileDecode):
    first: int | None = None  # offset of the range's first row
    last: int | None = None  # offset of its last row
    contiguous: bool = True  # every row one offset after the row before


def decode_files(files: list[tuple[str, str, int | None]], fn: Callable[[DecodedChunk], T],
                 threads: int | None = None, min_range_bytes: int | None = None) -> list[FileDecode]:
    """Decode ``files`` [(path, label, first offset or None)] with ``fn`` applied to every non-empty chunk,
    on ``threads`` threads (default: :func:`controller_core.threads.available`); one :class:`FileDecode` per
    file, equal to iterating ``logfile.iter_chunks(path, label, first_offset=...)`` over each file in turn (see
    the module docstring).  ``fn`` runs in the worker threads; a file is cut into ranges of at least
    ``min_range_bytes`` (default :data:`MIN_RANGE_BYTES`)."""
    threads = _threads.available() if threads is None else max(1, threads)
    min_range_bytes = MIN_RANGE_BYTES if min_range_bytes is None else min_range_bytes
    if threads == 1:
        return [_decode(path, label, 0, None, first, fn, check=False) for path, label, first in files]
    units = []  # (file index, start, end)
    for i, (path, _, _) in enumerate(files):
        size = os.path.getsize(path)
        cut = max(min_range_bytes, -(-size // (2 * threads)))  # two ranges a thread: a slow one is not left alone
        points = split_points(path, cut) if size >= 2 * min_range_bytes else [0]
        units += [(i, start, end) for start, end in zip(points, points[1:] + [None])]
    split = {i for i, start, _ in units if start > 0}

    def work(unit) -> _Range:
        i, start, end = unit
        path, label, first = files[i]
        return _decode(path, label, start, end, first if start == 0 else None, fn, check=i in split)

    by_file: dict[int, list[_Range]] = {}
    done = _threads.pool(threads).map(work, units) if len(units) > 1 else map(work, units)  # one: no handover
    for (i, _, _), r in zip(units, done):
        by_file.setdefault(i, []).append(r)
    out = [FileDecode() for _ in files]
    for i, parts in by_file.items():
        if i in split and not _stitched(parts):
            path, label, first = files[i]
            parts = [_decode(path, label, 0, None, first, fn, check=False)]
        for r in parts:
            out[i].quarantine += r.quarantine
            out[i].results += r.results
    return out


def _decode(path: str, label: str, start: int, end: int | None, first_offset: int | None, fn,
            check: bool) -> _Range:
    """One range [start, end) of a file; with ``check``, what :func:`_stitched` needs to know of its rows."""
    r = _Range()
    for chunk in iter_chunks(path, label, start=start, end=end, first_offset=first_offset):
        r.quarantine += chunk.quarantine
        if not len(chunk):
            continue
        if check:
            off = chunk.offset
            if (r.last is not None and int(off[0]) != r.last + 1) or \
                    (len(off) > 1 and not bool(np.all(off[1:] - off[:-1] == 1))):
                r.contiguous = False
            if r.first is None:
                r.first = int(off[0])
            r.last = int(off[-1])
        r.results.append(fn(chunk))
    return r


def _stitched(parts: list[_Range]) -> bool:
    """The ranges of one file together are what one pass decodes: nothing quarantined, no range empty, every
    range's rows contiguous and each range starting one offset after the one before ends."""
    if any(r.quarantine or not r.contiguous or r.first is None for r in parts):
        return False
    return all(b.first == a.last + 1 for a, b in zip(parts, parts[1:]))
