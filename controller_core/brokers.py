"""Broker availability: the one definition of ``active(b)`` (controller-rules.md, top).

A broker is *active* when it is registered, not fenced and not in controlled shutdown.  It is what the
controller's ``LeaderAcceptor`` asks (with the directory check, §2.2), what AlterPartition demands of
every ISR member (§2.8) and what a new partition's ISR is filtered by (§1.2-5).  A broker in controlled
shutdown is still unfenced, but the controller is moving leadership *away* from it, so it may not lead.

Every part of kraft-audit that asks "could broker b lead?" calls :func:`active` (scalars, or NumPy
boolean arrays for the vectorized replay), :func:`rule` (the compiled invariant pass compiles it as it is),
:func:`in_image` (the scalar image's ``Cluster.active``) or one of the table forms below -- per broker state row, at an offset, or per record and replica just before
each record (the change builders) -- so the replay, the audit, recovery, plans and what-if cannot disagree
about it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec.arrowutil import column_ints
from controller_core.kernels.lookup import count_below

# broker_state_history writes nulls for an unregistered broker's state (no registration to read them
# from): null registered / fenced / in_controlled_shutdown read as "not registered", "fenced", "not
# in controlled shutdown", which all make the broker inactive or leave the answer to the others.
_NULL_AS = {"registered": False, "fenced": True, "in_controlled_shutdown": False}


def active(registered, fenced, in_controlled_shutdown):
    """registered ∧ ¬fenced ∧ ¬in_controlled_shutdown, for bools or element-wise for NumPy bool arrays.

    Python bools take the plain-Python branch: the scalar replay asks this once per replica per
    election, where a NumPy ufunc call would cost thirty times as much.  Both branches state the same rule
    (tests/controller_core/test_brokers.py checks them against each other)."""
    if isinstance(registered, np.ndarray) or isinstance(fenced, np.ndarray) or isinstance(in_controlled_shutdown,
                                                                                          np.ndarray):
        return (np.asarray(registered, bool) & ~np.asarray(fenced, bool)
                & ~np.asarray(in_controlled_shutdown, bool))
    return rule(registered, fenced, in_controlled_shutdown)


def rule(registered: bool, fenced: bool, in_controlled_shutdown: bool) -> bool:
    """The rule for one broker, plain enough for the compiled passes to compile as it is
    (``numba.njit(brokers.rule)``)."""
    return bool(registered) and not fenced and not in_controlled_shutdown


def in_image(image, b: int) -> bool:
    """``active(b)`` in a scalar cluster image (:class:`controller_core.image.Cluster`, whose ``active`` method this
    is): a broker in the image is registered, an UnregisterBrokerRecord removes it."""
    br = image.brokers.get(b)
    return br is not None and rule(True, br.fenced, br.in_controlled_shutdown)


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = pc.fill_null(table.column(name), _NULL_AS[name])
    return np.asarray(col.to_numpy(zero_copy_only=False), bool)


def active_rows(table: pa.Table) -> np.ndarray:
    """Per row of a table with ``registered``, ``fenced`` and ``in_controlled_shutdown`` columns
    (broker_state_history, or one row per broker at a point): whether that broker state is active."""
    return active(_column(table, "registered"), _column(table, "fenced"), _column(table, "in_controlled_shutdown"))


def active_broker_ids(table: pa.Table) -> set[int]:
    """The active brokers of a table holding one state row per broker (the state at one point)."""
    ids = table.column("broker_id").to_numpy(zero_copy_only=False)
    return {int(b) for b in ids[active_rows(table)]}


def active_at(history: pa.Table, at_offset: int | None = None) -> set[int]:
    """The active brokers after offset ``at_offset`` (default: the end) of a broker_state_history table:
    each broker's last row at or before that offset decides."""
    if at_offset is not None:
        history = history.filter(pc.less_equal(history.column("offset"), at_offset))
    if not history.num_rows:
        return set()
    ids = column_ints(history.column("broker_id"))
    offs = column_ints(history.column("offset"))
    order = np.lexsort((offs, ids))
    last = order[np.r_[ids[order][1:] != ids[order][:-1], True]]  # each broker's latest row
    return active_broker_ids(history.take(pa.array(last)))


def active_matrix(history: pa.Table, R: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """(n x w): replica j of each record's partition belongs to a broker that is registered, unfenced
    and not in controlled shutdown just before the record.

    The broker timeline is small: a table of every broker's state after each of its rows (one row of
    the table per broker row, in offset order) is indexed by the number of broker rows before the
    record and by the replica's broker (:func:`active_table`)."""
    from controller_core.vector import recompute as V  # (here: vector.recompute imports the image, which imports us)

    n, w = R.shape
    active = np.zeros((n, w), bool, order="F")
    if not history.num_rows:
        return active
    lookup = active_table(history, offset, int(R.min(initial=-1)), int(R.max(initial=-1)))
    if lookup is None:  # a huge broker timeline or broker ids too large to index: one search per replica
        b_id = column_ints(history.column("broker_id"))
        b_off = column_ints(history.column("offset"))
        order = np.lexsort((b_off, b_id))
        keys = b_id[order] * V.BIG + b_off[order]
        q = np.where(R >= 0, R.astype(np.int64), 0) * V.BIG + offset[:, None]
        jb = V.lookup(keys, q.ravel()).reshape(q.shape)
        okb = (jb >= 0) & (b_id[order][np.maximum(jb, 0)] == R)
        return okb & active_rows(history)[order][np.maximum(jb, 0)] & (R >= 0)
    table, at, lut, none = lookup
    for j in range(w):
        r = R[:, j]
        active[:, j] = table[at + lut[r]] & (r >= 0)  # r -1 (padding): lut's last entry, the inactive column
    return active


def active_table(history: pa.Table, offset: np.ndarray, r_lo: int, r_hi: int):
    """(table, at, lut, none): broker b is active just before record i iff ``table[at[i] + lut[b]]`` (a flat
    (broker rows + 1) x (brokers + 1) table of every broker's state after each broker row, in offset order;
    ``at[i]``: the table row of record i; ``lut``: broker id -> column, of length > ``r_hi`` + 1 with -1 and
    unknown ids on ``none``, the always-inactive column).  None when the table would be huge or the replica ids
    (in [r_lo, r_hi]) cannot index ``lut``."""
    from controller_core.vector import recompute as V

    b_id = column_ints(history.column("broker_id"))
    b_off = column_ints(history.column("offset"))
    alive = active_rows(history)
    ids, code = np.unique(b_id, return_inverse=True)
    nb = len(ids) + 1  # the last column: not a broker (always inactive)
    E = len(b_id)
    top = max(int(ids[-1]) if len(ids) else -1, r_hi)
    if (E + 1) * nb > 64_000_000 or (len(ids) and ids[0] < 0) or top >= (1 << 22) or r_lo < -1:
        return None
    so = np.argsort(b_off, kind="stable")
    last = np.full((E + 1, nb), -1, np.int32)  # per table row: each broker's latest row so far
    last[np.arange(1, E + 1), code[so]] = np.arange(E, dtype=np.int32)
    np.maximum.accumulate(last, axis=0, out=last)
    table = (alive[so][np.maximum(last, 0)] & (last >= 0)).ravel() if E else np.zeros(nb, bool)
    at = count_below(b_off[so], offset) * nb  # (offsets in the history's order: kernels/lookup.py)
    lut = np.full(top + 2, nb - 1, np.int32)  # index -1 (padding) and unknown ids: the inactive column
    lut[ids] = np.arange(len(ids))
    return table, at, lut, nb - 1
