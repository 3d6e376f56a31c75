"""The decode paths a fuzz input goes through: every way the pipeline turns bytes into records.

``decode_bytes(data, workdir)`` writes ``data`` as a segment and runs it through

* the full decoder (``logfile.iter_chunks``) with the NumPy/Python batch and record walk and with the
  compiled one (``codec/walk.py``), each with the default window (every chunk turned into bronze rows,
  ``bronze.records_table``) and with small windows (so batches straddle window boundaries);
* the threads' decoder of a replay (``codec/ranges.py``: the file cut into ranges of a kilobyte decoded at once),
  which must find exactly the one-pass decoder's records and quarantine;
* the ``decode --summary`` reader (``iter_chunks`` with ``walk.SummaryWalk``);
* the compiled walk on its own (``walk.walk`` with per-batch and per-record rows);
* the segment walk of ``collect-log-info`` (``audit.loginfo.segment_log_end_offset``).

``read_log_info_bytes(data, workdir)`` runs ``audit.loginfo.read_log_info`` on ``data`` as a JSON file.

Each raises only if a decode path does (a bug: bad input must become quarantine rows, never an
exception).  Used by ``fuzz/run.py`` (random mutation), ``fuzz/atheris_target.py`` (coverage-guided)
and the regression tests in ``tests/reliability/test_fuzz_corpus.py``.
"""
from __future__ import annotations

import os
from pathlib import Path

from audit import loginfo
import numpy as np

from controller_core.codec import bronze, logfile, ranges, walk

SMALL_WINDOW = 4096


def _full(path: str, compiled: bool, chunk_bytes: int, first_offset, rows: bool = True) -> int:
    saved = logfile._use_compiled
    logfile._use_compiled = lambda size: compiled
    try:
        n = 0
        for chunk in logfile.iter_chunks(path, "fuzz.log", chunk_bytes=chunk_bytes, first_offset=first_offset):
            n += len(chunk)
            if rows and len(chunk):
                t = bronze.records_table(chunk, "fuzz", "fuzz.log", "segment")
                assert t.num_rows == len(chunk)
        return n
    finally:
        logfile._use_compiled = saved


def _ranges(path: str, first_offset) -> int:
    got = ranges.decode_files([(path, "fuzz.log", first_offset)], lambda c: c.offset, threads=3,
                              min_range_bytes=1024)[0]
    one = list(logfile.iter_chunks(path, "fuzz.log", first_offset=first_offset))
    offsets = np.concatenate(got.results) if got.results else np.zeros(0, np.int64)
    assert offsets.tolist() == [o for c in one for o in c.offset.tolist()]
    assert got.quarantine == [q for c in one for q in c.quarantine]
    return len(offsets)


def _summary(path: str, first_offset) -> int:
    n = 0
    for item in logfile.iter_chunks(path, "fuzz.log", first_offset=first_offset, fast=walk.SummaryWalk()):
        n += item.records if isinstance(item, walk.WindowSummary) else len(item)
    return n


def decode_bytes(data: bytes, workdir: str | Path, first_offset: int | None = None) -> dict:
    """Run every decode path over ``data``; returns the records each path found (for cross-checks)."""
    path = os.path.join(str(workdir), "00000000000000000000.log")
    with open(path, "wb") as fh:
        fh.write(data)
    out = {
        "numpy": _full(path, False, logfile.DEFAULT_CHUNK_BYTES, first_offset),
        "compiled": _full(path, True, logfile.DEFAULT_CHUNK_BYTES, first_offset),
        "numpy_small": _full(path, False, SMALL_WINDOW, first_offset, rows=False),
        "compiled_small": _full(path, True, SMALL_WINDOW, first_offset, rows=False),
        "summary": _summary(path, first_offset),
        "ranges": _ranges(path, first_offset),
    }
    w = walk.walk(data, records=True, prev_last=None if first_offset is None else first_offset - 1)
    out["walk_regular"] = w.regular
    loginfo.segment_log_end_offset(data, 0 if first_offset is None else first_offset)
    return out


def read_log_info_bytes(data: bytes, workdir: str | Path) -> int:
    path = os.path.join(str(workdir), "broker-1.json")
    with open(path, "wb") as fh:
        fh.write(data)
    rows, bad = loginfo.read_log_info(path)
    return rows.num_rows + bad.num_rows
