"""Vectorized recomputation of PartitionChangeRecords: the change builder over whole columns.

For every change record at once: the state before it (from :mod:`controller_core.vector.fold`), the cluster
context at its offset (brokers and topic settings from :mod:`controller_core.timelines`, looked up with
``searchsorted``) and its *primary* trigger (the broker event in its own batch, else AlterPartition or
an election) give the builder's inputs; steps B2-B9 of controller-rules §2.1 then run as NumPy
operations on padded replica matrices, where "first acceptable replica in replica order" is an
``argmax`` over a boolean matrix.

This is a fast path, not a second opinion: a record whose recomputed fields equal the recorded ones
is explained; every other record (or one outside what this path models: reassignments, ELR members
that are not replicas, directory changes, several broker events in one batch) is handed to the scalar
reference (:mod:`controller_core.rules.verify`), which tries every candidate trigger.  Divergences are
therefore exactly the scalar reference's; the property test holds this path to the scalar builder.

Layout: a set of replica positions (the ISR members among the replicas, the ELR target, the acceptable
replicas, ...) is one small unsigned integer per record, bit j = replica position j, so set algebra,
"first acceptable replica" (lowest set bit) and set equality are single NumPy operations over the
records; ordered lists (the ISR) are kept as one int32 column per position.  Only loops over replica
positions (w = replication factor) run in Python.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from controller_core.image import MV_3_2_IV0, MV_3_6_IV0, NO_LEADER, RECOVERING

# primary trigger codes
ALTER, FENCE, UNFENCE, UNCLEAN_SHUTDOWN, PREFERRED_ELECTION, UNCLEAN_ELECTION = range(6)
TRIGGER_NAMES = ["alter_partition", "fence", "unfence", "unclean_shutdown", "preferred_election", "unclean_election"]
BIG = np.int64(1) << 40


def padded(arr, width: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A list<int32> column as (n x width matrix padded with -1, lengths, valid mask)."""
    out, lens, valid = padded_rows(arr, None, width)
    return np.ascontiguousarray(out), lens, valid


def padded_rows(arr, rows: np.ndarray | None, width: int | None = None):
    """``padded(arr.take(rows))`` without the take (rows=None: every row), as a column-major
    (Fortran-order) matrix: each replica position is a contiguous column."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr) if rows is None else len(rows)
    if arr.null_count == len(arr):  # every list null (e.g. ELR columns before ELR exists)
        w = 1 if width is None else max(width, 1)
        return np.full((n, w), -1, np.int32, order="F"), np.zeros(n, np.int64), np.zeros(n, bool)
    offs = np.asarray(arr.offsets)  # into the unsliced child (arr.values)
    if rows is None:
        starts, lens = offs[:-1], np.diff(offs)
    else:
        starts = offs[rows]
        lens = offs[rows + 1] - starts
    if arr.null_count:
        valid = np.asarray(arr.is_valid())
        valid = valid if rows is None else valid[rows]
        lens = np.where(valid, lens, 0)
    else:
        valid = np.ones(n, bool)
    lens = lens.astype(np.int64, copy=False)
    w = int(lens.max(initial=0)) if width is None else width
    out = np.empty((n, max(w, 1)), np.int32, order="F")
    vals = arr.values
    vals = np.asarray(vals.to_numpy(zero_copy_only=False), np.int32) if len(vals) else np.zeros(0, np.int32)
    full = bool(n) and int(lens.min()) >= out.shape[1]
    for j in range(out.shape[1]):
        col = out[:, j]
        if not len(vals) or w <= j:
            col[:] = -1
            continue
        np.take(vals, starts + j, out=col, mode="clip")
        if not full:
            np.copyto(col, -1, where=lens <= j)
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
    n, w = before["replicas"].shape
    if w > 16:
        return _recompute_matrix(before, rec, ctx)
    if n <= _BLOCK:
        return _recompute_bits(before, rec, ctx)
    # blocks of rows: the temporaries of one block stay in the core's cache
    parts = [_recompute_bits({k: v[a:a + _BLOCK] for k, v in before.items()},
                             {k: v[a:a + _BLOCK] for k, v in rec.items()},
                             Context(**{f: getattr(ctx, f)[a:a + _BLOCK] for f in _CONTEXT_FIELDS}))
             for a in range(0, n, _BLOCK)]
    return Result(matched=np.concatenate([p.matched for p in parts]),
                  modelled=np.concatenate([p.modelled for p in parts]))


_BLOCK = 1 << 16  # rows per block (64 Ki)
_CONTEXT_FIELDS = ("trigger", "broker", "mv", "elr_on", "min_isr", "check_lkl", "active")


def _columns(mat: np.ndarray, width: int | None = None) -> list[np.ndarray]:
    """The columns of a padded matrix (``width``: cut or padded with -1)."""
    w = mat.shape[1] if width is None else width
    cols = [np.ascontiguousarray(mat[:, j]) for j in range(min(w, mat.shape[1]))]
    if len(cols) < w:
        pad = np.full(mat.shape[0], -1, mat.dtype)
        cols += [pad] * (w - len(cols))
    return cols


def _members(mat: np.ndarray) -> list[np.ndarray]:
    """The columns of a padded matrix used as a set: columns of padding only are left out."""
    cols = _columns(mat)
    while cols and not (cols[-1] >= 0).any():
        cols.pop()
    return cols


def _any_eq(x: np.ndarray, cols: list[np.ndarray]) -> np.ndarray:
    """x[i] == cols[k][i] for some k."""
    if not cols:
        return np.zeros(len(x), bool)
    out = x == cols[0]
    for c in cols[1:]:
        out |= x == c
    return out


class _Positions:
    """Sets of replica positions as bitmasks (bit j = position j of the replicas)."""

    def __init__(self, R: np.ndarray):
        self.n, self.w = R.shape
        self.dt = np.uint8 if self.w <= 8 else np.uint16
        self.r = _columns(R)
        self.present = [x >= 0 for x in self.r]
        self.none = np.zeros(self.n, self.dt)

    def pack(self, masks: list[np.ndarray]) -> np.ndarray:
        out = masks[0].astype(self.dt)
        for j in range(1, len(masks)):
            out |= masks[j].astype(self.dt) << self.dt(j)
        return out

    def eq(self, v: np.ndarray) -> np.ndarray:
        """R == v (padding positions included, as the matrix form compares them)."""
        return self.pack([x == v for x in self.r])

    def within(self, cols: list[np.ndarray]) -> np.ndarray:
        """in_rows(R, S): replica positions whose broker is in S."""
        if not cols:
            return self.none.copy()
        return self.pack([p & _any_eq(x, cols) for x, p in zip(self.r, self.present)])

    def subset(self, cols: list[np.ndarray]) -> np.ndarray:
        """Every entry of S is a replica (padding ignored)."""
        out = np.ones(self.n, bool)
        for c in cols:
            out &= (c < 0) | _any_eq(c, self.r)
        return out

    def at(self, single: np.ndarray, default) -> np.ndarray:
        """The replica at the position of a one-bit mask (``default`` where the mask is empty)."""
        out = np.full(self.n, default, self.r[0].dtype)
        for j, x in enumerate(self.r):
            np.copyto(out, x, where=(single & self.dt(1 << j)) != 0)
        return out


def _lowest(bits: np.ndarray) -> np.ndarray:
    """The lowest set bit of each mask (0 if none): "first in replica order"."""
    return bits & (~bits + bits.dtype.type(1))


def _recompute_bits(before: dict, rec: dict, ctx: Context) -> Result:
    R = before["replicas"]
    pos = _Positions(R)
    n, w = pos.n, pos.w
    zero = pos.none
    r = pos.r
    wi = max(w, before["isr"].shape[1])
    PI = _columns(before["isr"], wi)
    PE = _members(before["elr"])
    pil, pel, pkl = before["isr_len"], before["elr_len"], before["lke_len"]
    PL, plrs = before["leader"], before["lrs"]
    k0 = before["lke"][:, 0]
    trig, B = ctx.trigger, ctx.broker
    elr_on, mv, m = ctx.elr_on, ctx.mv, ctx.min_isr

    # what this path models
    modelled = ~rec["other_written"] & (before["adding_len"] == 0) & (before["removing_len"] == 0)
    modelled &= pos.subset(PE) & pos.subset(PI)

    # ---- targets: T_I as ordered columns
    fence_like = (trig == FENCE) | (trig == UNCLEAN_SHUTDOWN)
    TI = _without(PI, B, fence_like)
    rec_isr_given = (trig == ALTER) & rec["isr_valid"]
    if rec_isr_given.any():
        TI = [np.where(rec_isr_given, x, t) for x, t in zip(_columns(rec["isr"], wi), TI)]
    TI_len = _count_present(TI)
    modelled &= ~(rec_isr_given & (rec["isr_len"] > w))
    U = np.where(trig == UNCLEAN_SHUTDOWN, B, B.dtype.type(-1))
    t_lrs = np.where((trig == ALTER) & (rec["lrs"] != -1), rec["lrs"], plrs)

    # ---- B2 ELR target
    inPI = pos.within(PI)
    inPE = pos.within(PE)
    inTI = pos.within(TI)
    present = pos.pack(pos.present)
    below = (inPE | inPI) & ~inTI & ~pos.eq(U) & present
    E = np.where(elr_on, np.where(TI_len >= m, zero, below), inPE)

    # ---- B3 election
    acc = pos.pack([np.asarray(ctx.active[:, j], bool) for j in range(w)]) & present
    eqB = pos.eq(B)
    acc &= ~np.where(fence_like, eqB, zero)
    acc |= np.where(trig == UNFENCE, eqB, zero)
    TI_empty = TI_len == 0
    valid = acc & (inTI | np.where(TI_empty, E, zero))
    eqPL = pos.eq(PL)
    keep = (eqPL != 0) & (PL >= 0) & ((valid & _lowest(eqPL)) != 0)
    first_valid = pos.at(_lowest(valid), NO_LEADER)
    # step 3: the single last-known leader (LastKnownElr stored as a list of one)
    eqK = pos.eq(k0)
    pk_has = eqK != 0
    k0_acc = pk_has & ((acc & _lowest(eqK)) != 0)
    modelled &= ~((pkl == 1) & ~pk_has & ctx.check_lkl)  # its acceptability needs the broker table
    lkl_ok = elr_on & TI_empty & (E == 0) & (pkl == 1) & (~ctx.check_lkl | k0_acc)
    first_acc = pos.at(_lowest(acc), NO_LEADER)

    preferred = trig == PREFERRED_ELECTION
    unclean_mode = trig == UNCLEAN_ELECTION
    # ONLINE / UNCLEAN order
    online_node = np.where(keep, PL, first_valid)
    lkl_used = (online_node == NO_LEADER) & lkl_ok
    online_node = np.where(lkl_used, k0, online_node)
    unc_used = (online_node == NO_LEADER) & unclean_mode & (acc != 0)
    online_node = np.where(unc_used, first_acc, online_node)
    # PREFERRED order
    rest = pos.at(_lowest(valid & ~pos.dt(1)), NO_LEADER) if w > 1 else np.full(n, NO_LEADER)
    pref_node = np.where((valid & pos.dt(1)) != 0, r[0], np.where(keep, PL, rest))
    pref_lkl = (pref_node == NO_LEADER) & lkl_ok
    pref_node = np.where(pref_lkl, k0, pref_node)
    node = np.where(preferred, pref_node, online_node)
    unclean = np.where(preferred, pref_lkl, lkl_used | unc_used)

    # ---- B4 apply the election
    changed = node != PL
    eqN = pos.eq(node)
    from_elr = changed & ((E & _lowest(eqN)) != 0)
    if from_elr.any():
        TI = [np.where(from_elr, node if j == 0 else -1, t) for j, t in enumerate(TI)]
        TI_len = np.where(from_elr, 1, TI_len)
        E = E & ~np.where(from_elr, eqN, zero)
    leader_w = changed
    leader_v = np.where(changed, node, -2)
    isr_w = changed & unclean
    isr_v = [np.where(isr_w, node, -1)] + [np.full(n, -1, np.int32)] * (wi - 1)
    isr_l = isr_w.astype(np.int32)
    lrs_w = isr_w & (plrs != RECOVERING) & (mv >= MV_3_2_IV0)
    lrs_v = np.where(lrs_w, np.int32(RECOVERING), np.int32(-1))

    # ---- B6 ELR field (as sets)
    E = np.where(isr_w | ~elr_on, zero, E)
    elr_w = E != inPE

    # ---- B7 ISR field
    differs = TI_len != pil
    for t, p in zip(TI, PI):
        differs |= t != p
    b7 = ~isr_w & ((TI_len > 0) | elr_on) & differs
    isr_v = [np.where(b7, t, v) for t, v in zip(TI, isr_v)]
    isr_l = np.where(b7, TI_len, isr_l)
    isr_w = isr_w | b7

    # ---- B8 old-MV shrink bump
    shrink = np.zeros(n, bool)
    for p in PI:
        shrink |= (p >= 0) & ~_any_eq(p, TI)
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
    ok = rec["leader"] == np.where(leader_w, leader_v, -2)
    ok &= rec["isr_valid"] == isr_w
    isr_ok = rec["isr_len"] == isr_l
    for x, v in zip(_columns(rec["isr"], wi), isr_v):
        isr_ok &= x == v
    ok &= ~isr_w | isr_ok
    # ELR: compare as sets over replica positions; a written ELR equal to the current one (non-empty)
    # is a re-ordering Kafka may emit: treated as not written, as the scalar reference does
    RE = _members(rec["elr"])
    rec_elr_mask = pos.within(RE)
    modelled &= pos.subset(RE)
    rec_elr_w = rec["elr_valid"] & ~((rec_elr_mask == inPE) & (pel > 0))
    ok &= rec_elr_w == elr_w
    ok &= ~elr_w | (rec_elr_mask == E)
    # LastKnownElr: [PL] or []
    ok &= rec["lke_valid"] == (lke_a | lke_b)
    ok &= ~lke_a | ((rec["lke_len"] == 1) & (rec["lke"][:, 0] == PL))
    ok &= ~lke_b | (rec["lke_len"] == 0)
    ok &= rec["lrs"] == np.where(lrs_w, lrs_v, np.int32(-1))  # -1 on both sides: not written
    return Result(matched=ok & modelled, modelled=modelled)


def _without(cols: list[np.ndarray], b: np.ndarray, where: np.ndarray) -> list[np.ndarray]:
    """``compact`` over ordered columns: in the rows ``where``, drop b and padding, moving the rest
    up (order kept, padded with -1); other rows unchanged."""
    # rows where it changes anything: b is there, or padding comes before an entry
    todo = np.zeros(len(b), bool)
    for k, c in enumerate(cols):
        todo |= c == b
        if k:
            todo |= (cols[k - 1] < 0) & (c >= 0)
    rows = np.flatnonzero(todo & where)
    if not len(rows):
        return cols
    sub = [c[rows] for c in cols]
    bs = b[rows]
    out = [np.full(len(rows), -1, c.dtype) for c in cols]
    dest = np.zeros(len(rows), np.int32)
    for k, c in enumerate(sub):
        kept = (c != bs) & (c >= 0)
        for j in range(k + 1):
            np.copyto(out[j], c, where=kept & (dest == j))
        dest += kept
    res = [c.copy() for c in cols]
    for r, o in zip(res, out):
        r[rows] = o
    return res


def _count_present(cols: list[np.ndarray]) -> np.ndarray:
    out = np.zeros(len(cols[0]) if cols else 0, np.int32)
    for c in cols:
        out += c >= 0
    return out


def _recompute_matrix(before: dict, rec: dict, ctx: Context) -> Result:
    """:func:`recompute` over (n x w) boolean matrices: any replication factor (the bitmask form
    covers up to 16 replica positions)."""
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
    out = np.full((mat.shape[0], w), -1, mat.dtype, order="F" if mat.flags.f_contiguous else "C")
    out[:, :mat.shape[1]] = mat
    return out


def _single(node: np.ndarray, w: int) -> np.ndarray:
    out = np.full((len(node), w), -1, np.int32)
    out[:, 0] = node
    return out
