"""Vectorized recomputation of PartitionChangeRecords: the change builder over whole columns.

For every change record at once: the state before it (from :mod:`controller_core.fold`), the cluster
context at its offset (brokers and topic settings from :mod:`controller_core.timelines`, looked up with
``searchsorted``) and its *primary* trigger (the broker event in its own batch, else AlterPartition or
an election) give the builder's inputs; steps B2-B9 of controller-rules §2.1 then run as NumPy
operations on padded replica matrices, where "first acceptable replica in replica order" is an
``argmax`` over a boolean matrix.

This is a fast path, not a second opinion: a record whose recomputed fields equal the recorded ones
is explained; every other record (or one outside what this path models: reassignments, ELR members
that are not replicas, directory changes, several broker events in one batch) is handed to the scalar
reference (:mod:`controller_core.verify`), which tries every candidate trigger.  Divergences are
therefore exactly the scalar reference's; the property test holds this path to the scalar builder.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from controller_core.state import MV_3_2_IV0, MV_3_6_IV0, NO_LEADER, RECOVERING

# primary trigger codes
ALTER, FENCE, UNFENCE, UNCLEAN_SHUTDOWN, PREFERRED_ELECTION, UNCLEAN_ELECTION = range(6)
TRIGGER_NAMES = ["alter_partition", "fence", "unfence", "unclean_shutdown", "preferred_election", "unclean_election"]
BIG = np.int64(1) << 40


def padded(arr, width: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A list<int32> column as (n x width matrix padded with -1, lengths, valid mask)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False)) if arr.null_count else np.ones(n, bool)
    offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), np.int64)
    lens = np.diff(offs)
    lens = np.where(valid, lens, 0)
    w = int(lens.max(initial=0)) if width is None else width
    out = np.full((n, max(w, 1)), -1, np.int32)
    vals = np.asarray(arr.values.to_numpy(zero_copy_only=False), np.int32)
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    src = np.repeat(offs[:-1], lens) + cols
    keep = cols < out.shape[1]
    out[rows[keep], cols[keep]] = vals[src[keep]]
    return out, lens, valid


def member(mat: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b[i] in row i of mat (padding -1 never matches a broker id >= 0)."""
    return ((mat == b[:, None]) & (b[:, None] >= 0)).any(axis=1)


def in_rows(values: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """(n x w): values[i, j] in row i of sets."""
    return ((values[:, :, None] == sets[:, None, :]) & (values[:, :, None] >= 0)).any(axis=2)


def compact(mat: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Rows of mat keeping only ``keep`` entries, order kept, padded with -1."""
    order = np.argsort(~keep, axis=1, kind="stable")
    out = np.take_along_axis(np.where(keep, mat, -1), order, axis=1)
    return out


def first_true(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first True per row, any True?)."""
    return mask.argmax(axis=1), mask.any(axis=1)


def lookup(keys_sorted: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of the last key < query (-1 if none): the state just before a record."""
    return np.searchsorted(keys_sorted, query, side="left") - 1


@dataclass
class Context:
    """Per change record: what the builder needs besides the partition (all arrays of length n)."""

    trigger: np.ndarray  # primary trigger code
    broker: np.ndarray  # the trigger's broker (-1 if none)
    mv: np.ndarray
    elr_on: np.ndarray
    min_isr: np.ndarray
    check_lkl: np.ndarray  # [LATER] last known leader must be acceptable
    active: np.ndarray  # (n x w) replica j active just before the record


@dataclass
class Result:
    matched: np.ndarray  # the primary trigger's recomputation equals the record
    modelled: np.ndarray  # the record is within what this path models (else: straight to the scalar)


def recompute(before: dict, rec: dict, ctx: Context) -> Result:
    """before: partition state before each record -- replicas/isr/elr/lke as padded matrices
    (``padded``), leader, lrs, removing/adding lengths; rec: the recorded change -- isr matrix+len+valid,
    leader (-2 = absent), elr matrix+len+valid, lke matrix+len+valid, lrs (-1 = absent), and
    ``other_written`` (replicas/removing/adding/directories present)."""
    R = before["replicas"]
    PI, pil = before["isr"], before["isr_len"]
    PE, pel = before["elr"], before["elr_len"]
    PK, pkl = before["lke"], before["lke_len"]
    PL, plrs = before["leader"], before["lrs"]
    n, w = R.shape
    trig, B = ctx.trigger, ctx.broker
    elr_on, mv, m = ctx.elr_on, ctx.mv, ctx.min_isr

    # what this path models
    modelled = ~rec["other_written"] & (before["adding_len"] == 0) & (before["removing_len"] == 0)
    elr_in_r = (in_rows(PE, R) | (PE < 0)).all(axis=1)
    isr_in_r = (in_rows(PI, R) | (PI < 0)).all(axis=1)
    modelled &= elr_in_r & isr_in_r

    # ---- targets
    fence_like = (trig == FENCE) | (trig == UNCLEAN_SHUTDOWN)
    TI = np.where(fence_like[:, None], compact(PI, (PI != B[:, None]) & (PI >= 0)), PI)
    rec_isr_given = (trig == ALTER) & rec["isr_valid"]
    TI = np.where(rec_isr_given[:, None], _fit(rec["isr"], w), TI)
    TI_len = (TI >= 0).sum(axis=1)
    modelled &= ~(rec_isr_given & (rec["isr_len"] > w))
    U = np.where(trig == UNCLEAN_SHUTDOWN, B, -1)
    t_lrs = np.where((trig == ALTER) & (rec["lrs"] != -1), rec["lrs"], plrs)

    # ---- B2 ELR target (as a mask over replica positions)
    inPI = in_rows(R, PI)
    inPE = in_rows(R, PE)
    inTI = in_rows(R, TI)
    below = (inPE | inPI) & ~inTI & (R != U[:, None]) & (R >= 0)
    E = np.where(elr_on[:, None], np.where((TI_len >= m)[:, None], False, below), inPE)

    # ---- B3 election
    acc = ctx.active & (R >= 0)
    acc &= ~(fence_like[:, None] & (R == B[:, None]))
    acc |= (trig == UNFENCE)[:, None] & (R == B[:, None])
    TI_empty = TI_len == 0
    valid = acc & (inTI | (TI_empty[:, None] & E))
    posL, hasL = first_true(R == PL[:, None])
    keep = hasL & (PL >= 0) & valid[np.arange(n), posL]
    fv, any_v = first_true(valid)
    first_valid = np.where(any_v, R[np.arange(n), fv], NO_LEADER)
    # step 3: the single last-known leader (LastKnownElr stored as a list of one)
    k0 = PK[:, 0]
    pk_in_r, pk_has = first_true(R == k0[:, None])
    k0_acc = pk_has & acc[np.arange(n), pk_in_r]
    modelled &= ~((pkl == 1) & ~pk_has & ctx.check_lkl)  # its acceptability needs the broker table
    lkl_ok = elr_on & TI_empty & ~E.any(axis=1) & (pkl == 1) & (~ctx.check_lkl | k0_acc)
    fa, any_a = first_true(acc)
    first_acc = np.where(any_a, R[np.arange(n), fa], NO_LEADER)

    preferred = trig == PREFERRED_ELECTION
    unclean_mode = trig == UNCLEAN_ELECTION
    r0_valid = valid[:, 0]
    rest_v, any_rest = first_true(valid[:, 1:]) if w > 1 else (np.zeros(n, int), np.zeros(n, bool))
    node = np.full(n, NO_LEADER, np.int64)
    unclean = np.zeros(n, bool)
    # ONLINE / UNCLEAN order
    online_node = np.where(keep, PL, np.where(any_v, first_valid, NO_LEADER))
    lkl_used = (online_node == NO_LEADER) & lkl_ok
    online_node = np.where(lkl_used, k0, online_node)
    unc_used = (online_node == NO_LEADER) & unclean_mode & any_a
    online_node = np.where(unc_used, first_acc, online_node)
    # PREFERRED order
    pref_node = np.where(r0_valid, R[:, 0], np.where(keep, PL, np.where(
        any_rest, R[np.arange(n), 1 + rest_v] if w > 1 else NO_LEADER, NO_LEADER)))
    pref_lkl = (pref_node == NO_LEADER) & lkl_ok
    pref_node = np.where(pref_lkl, k0, pref_node)
    node = np.where(preferred, pref_node, online_node)
    unclean = np.where(preferred, pref_lkl, lkl_used | unc_used)

    # ---- B4 apply the election
    changed = node != PL
    node_pos, node_in_r = first_true(R == node[:, None])
    from_elr = changed & node_in_r & E[np.arange(n), node_pos]
    TI = np.where(from_elr[:, None], _single(node, w), TI)
    TI_len = np.where(from_elr, 1, TI_len)
    E = E & ~(from_elr[:, None] & (R == node[:, None]))
    leader_w = changed
    leader_v = np.where(changed, node, -2)
    isr_w = changed & unclean
    isr_v = np.where(isr_w[:, None], _single(node, w), -1)
    isr_l = np.where(isr_w, 1, 0)
    lrs_w = isr_w & (plrs != RECOVERING) & (mv >= MV_3_2_IV0)
    lrs_v = np.where(lrs_w, RECOVERING, -1)

    # ---- B6 ELR field (as sets)
    E = np.where((isr_w | ~elr_on)[:, None], False, E)
    elr_w = (E != inPE).any(axis=1)

    # ---- B7 ISR field
    differs = (TI_len != pil) | (TI != PI).any(axis=1)
    b7 = ~isr_w & ((TI_len > 0) | elr_on) & differs
    isr_v = np.where(b7[:, None], TI, isr_v)
    isr_l = np.where(b7, TI_len, isr_l)
    isr_w = isr_w | b7

    # ---- B8 old-MV shrink bump
    shrink = ~(in_rows(PI, TI) | (PI < 0)).all(axis=1)
    b8 = (mv < MV_3_6_IV0) & ~leader_w & shrink
    leader_v = np.where(b8, PL, leader_v)
    leader_w = leader_w | b8

    # ---- B9 LastKnownElr (the last known leader)
    pk_is_pl = (pkl == 1) & (k0 == PL)
    lke_a = elr_on & isr_w & (isr_l == 0) & ~pk_is_pl
    lke_b = elr_on & ~lke_a & (pkl > 0) & ((leader_w & (leader_v >= 0)) | ((PL != NO_LEADER) & ~(leader_w & (leader_v == NO_LEADER))))

    # ---- B10 leader recovery state requested by the leader
    b10 = t_lrs != plrs
    lrs_v = np.where(b10, t_lrs, lrs_v)
    lrs_w = lrs_w | b10

    # ---- compare with the record
    ok = (np.where(rec["leader"] != -2, rec["leader"], -2) == np.where(leader_w, leader_v, -2))
    rec_isr_w = rec["isr_valid"]
    ok &= rec_isr_w == isr_w
    ok &= ~isr_w | ((rec["isr_len"] == isr_l) & (_fit(rec["isr"], w) == np.where(isr_w[:, None], isr_v, -1)).all(axis=1))
    # ELR: compare as sets over replica positions; a written ELR equal to the current one (non-empty)
    # is a re-ordering Kafka may emit: treated as not written, as the scalar reference does
    rec_elr_mask = in_rows(R, rec["elr"]) if rec["elr"].shape[1] else np.zeros((n, w), bool)
    rec_elr_in_r = (in_rows(rec["elr"], R) | (rec["elr"] < 0)).all(axis=1)
    modelled &= rec_elr_in_r
    rec_elr_w = rec["elr_valid"] & ~((rec_elr_mask == inPE).all(axis=1) & (pel > 0))
    ok &= rec_elr_w == elr_w
    ok &= ~elr_w | (rec_elr_mask == E).all(axis=1)
    # LastKnownElr: [PL] or []
    rec_lke_w = rec["lke_valid"]
    ok &= rec_lke_w == (lke_a | lke_b)
    ok &= ~lke_a | ((rec["lke_len"] == 1) & (rec["lke"][:, 0] == PL))
    ok &= ~lke_b | (rec["lke_len"] == 0)
    ok &= np.where(rec["lrs"] != -1, rec["lrs"], -1) == np.where(lrs_w, lrs_v, -1)
    return Result(matched=ok & modelled, modelled=modelled)


def _fit(mat: np.ndarray, w: int) -> np.ndarray:
    if mat.shape[1] == w:
        return mat
    if mat.shape[1] > w:
        return mat[:, :w]
    return np.pad(mat, ((0, 0), (0, w - mat.shape[1])), constant_values=-1)


def _single(node: np.ndarray, w: int) -> np.ndarray:
    out = np.full((len(node), w), -1, np.int32)
    out[:, 0] = node
    return out
