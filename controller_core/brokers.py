"""Broker availability: the one definition of ``active(b)`` (controller-rules.md, top).

A broker is *active* when it is registered, not fenced and not in controlled shutdown.  It is what the
controller's ``LeaderAcceptor`` asks (with the directory check, §2.2), what AlterPartition demands of
every ISR member (§2.8) and what a new partition's ISR is filtered by (§1.2-5).  A broker in controlled
shutdown is still unfenced, but the controller is moving leadership *away* from it, so it may not lead.

Every part of kraft-audit that asks "could broker b lead?" calls :func:`active` (scalars, or NumPy
boolean arrays for the vectorized replay) or one of the table forms below, so the replay, the audit,
recovery, plans and what-if cannot disagree about it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    ids = history.column("broker_id").to_numpy(zero_copy_only=False).astype(np.int64)
    offs = history.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((offs, ids))
    last = order[np.r_[ids[order][1:] != ids[order][:-1], True]]  # each broker's latest row
    return active_broker_ids(history.take(pa.array(last)))
