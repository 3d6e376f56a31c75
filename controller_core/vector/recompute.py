"""Vectorized recomputation of PartitionChangeRecords: the change builder over whole columns.

For every change record at once: the state before it (from :mod:`controller_core.vector.fold`), the cluster
context at its offset (brokers and topic settings from :mod:`controller_core.timelines`, looked up with
``searchsorted``) and its *primary* trigger (the broker event in its own batch, else AlterPartition or
an election) give the builder's inputs; the steps of controller-rules §2.1 then run as NumPy
operations over the records, one function or method per step named as in the spec (``b2_elr_target``,
``_b3_election``, ...), in the order of :func:`controller_core.rules.builder.build`.

This is a fast path, not a second opinion: a record whose recomputed fields equal the recorded ones
is explained; every other record (or one outside what this path models: reassignments, ELR members
that are not replicas, directory changes, several broker events in one batch) is handed to the scalar
reference (:mod:`controller_core.rules.verify`), which tries every candidate trigger.  Divergences are
therefore exactly the scalar reference's; the property test holds this path to the scalar builder.

Layout: a set of replica positions (the ISR members among the replicas, the ELR target, the acceptable
replicas, ...) is one small unsigned integer per record, bit j = replica position j, so set algebra,
"first acceptable replica" (lowest set bit) and set equality are single NumPy operations over the
records; ordered lists (the ISR) are kept as one int32 column per position.  Only loops over replica
positions (w = replication factor) run in Python.  Beyond 16 replica positions the same steps run on
(n x w) boolean matrices, where "first acceptable replica" is an ``argmax``.
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


def count_below(sorted_keys: np.ndarray, q: np.ndarray, upto: bool = False):
    """Number of keys < q, per query (``searchsorted``; a table over the queries' range when that
    range is dense: random queries make a binary search mispredict at every step).  ``upto``: also
    the number of keys <= q."""
    if not len(q) or not len(sorted_keys):
        zero = np.zeros(len(q), np.int64)
        return (zero, zero) if upto else zero
    lo, hi = int(q.min()), int(q.max())
    if hi - lo > 4 * len(q) + (1 << 20):
        below = np.searchsorted(sorted_keys, q, side="left")
        return (below, np.searchsorted(sorted_keys, q, side="right")) if upto else below
    below = below_table(sorted_keys, lo, hi)
    at = q - lo
    return (below[at], below[at + 1]) if upto else below[at]


def below_table(sorted_keys: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``t[k]``: the number of keys < lo + k, for k in 0 .. hi - lo + 1 (a table over a dense range of queries)."""
    base = int(np.searchsorted(sorted_keys, lo, side="left"))
    inside = sorted_keys[base:np.searchsorted(sorted_keys, hi, side="right")] - lo
    dt = np.int32 if base + len(inside) < 2**31 else np.int64
    below = np.full(hi - lo + 2, base, dt)
    below[1:] += np.cumsum(np.bincount(inside, minlength=hi - lo + 1), dtype=dt)
    return below


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


# ---- the change builder (controller-rules §2.1) over whole columns
#
# ``_build`` runs the builder's steps in the spec's order, like rules/builder.build.  The sets of replica
# positions the steps work on (the ISR members among the replicas, the ELR target, the acceptable replicas)
# have two representations with the same step names, so the two read side by side: ``_BitSets`` (a small
# integer per record, up to 16 replicas; the fast one) and ``_MatrixSets`` (n x w boolean matrices, any
# replication factor).  Steps that only touch per-record scalars are written once, as functions.


def _recompute_bits(before: dict, rec: dict, ctx: Context) -> Result:
    """:func:`recompute` on replica-position bitmasks (up to 16 replica positions)."""
    return _build(_BitSets(before), before, rec, ctx)


def _recompute_matrix(before: dict, rec: dict, ctx: Context) -> Result:
    """:func:`recompute` over (n x w) boolean matrices: any replication factor (the bitmask form
    covers up to 16 replica positions)."""
    return _build(_MatrixSets(before), before, rec, ctx)


def _build(S, before: dict, rec: dict, ctx: Context) -> Result:
    """The builder with the primary trigger's inputs (§2.2), judged against the recorded change; ``S`` is
    the state before each record in one of the two set representations."""
    PL, plrs, k0, pkl = before["leader"], before["lrs"], before["lke"][:, 0], before["lke_len"]
    t = _trigger_inputs(before, rec, ctx)
    modelled = _modelled(before, rec) & S.state_modelled() & ~(t.isr_given & (rec["isr_len"] > S.w))

    # B1 reassignment completion: nothing to complete, as no reassignment is in progress or written
    TI, TI_len = S.target_isr(t, rec, ctx)
    E, inTI = S.b2_elr_target(TI, TI_len, t.unclean_shutdown, ctx)
    node, unclean, lkl_known = _b3_election(S.b3_candidates(TI_len, inTI, E, t, ctx), PL, k0, pkl, ctx)
    ch = _b4_apply_election(node, unclean, PL, plrs, ctx.mv)
    TI, TI_len, E = S.b4_leader_from_elr(node, ch.leader_w, TI, TI_len, E)
    ch.isr_v = S.single_isr(node, ch.isr_w)
    # B5 replica-loss bump: never, as the target replicas are the replicas (records writing them are not
    # modelled)
    ch.elr, ch.elr_w = S.b6_elr_field(E, ch.isr_w | ~ctx.elr_on)
    S.b7_isr_field(ch, TI, TI_len, ctx.elr_on)
    _b8_old_mv_shrink_bump(ch, S.shrinks(TI), PL, ctx.mv)
    _b9_last_known_elr(ch, PL, k0, pkl, ctx.elr_on)
    # B10 assignment: only the leader recovery state (replicas, removing / adding and directories are not
    # modelled)
    _b10_recovery_state(ch, t.target_lrs, plrs)
    # B11 has no step: the record exists, and a recomputation writing nothing matches only a record with
    # none of these fields
    ok, rec_elr_known = _as_recorded(S, ch, before, rec)
    modelled &= lkl_known & rec_elr_known
    return Result(matched=ok & modelled, modelled=modelled)


def _modelled(before: dict, rec: dict) -> np.ndarray:
    """Records without reassignment (B1, B5) or assignment fields (B10): those go to the scalar reference."""
    return ~rec["other_written"] & (before["adding_len"] == 0) & (before["removing_len"] == 0)


@dataclass
class _TriggerInputs:
    """What the primary trigger hands the builder besides the acceptability test (§2.2)."""

    fence_like: np.ndarray  # the broker leaves the ISR (fence, controlled shutdown, unclean shutdown)
    isr_given: np.ndarray  # AlterPartition: the recorded ISR is the requested one
    unclean_shutdown: np.ndarray  # the broker of U (-1: none)
    target_lrs: np.ndarray


def _trigger_inputs(before: dict, rec: dict, ctx: Context) -> _TriggerInputs:
    trig, B = ctx.trigger, ctx.broker
    return _TriggerInputs(
        fence_like=(trig == FENCE) | (trig == UNCLEAN_SHUTDOWN),
        isr_given=(trig == ALTER) & rec["isr_valid"],
        unclean_shutdown=np.where(trig == UNCLEAN_SHUTDOWN, B, B.dtype.type(-1)),
        target_lrs=np.where((trig == ALTER) & (rec["lrs"] != -1), rec["lrs"], before["lrs"]))


@dataclass
class _Candidates:
    """The replicas §2.3's election rules choose from, per record (-1: none)."""

    ti_empty: np.ndarray
    elr_empty: np.ndarray
    keep: np.ndarray  # the current leader is valid
    first_valid: np.ndarray  # in replica order
    r0_valid: np.ndarray
    r0: np.ndarray
    rest_valid: np.ndarray  # the first valid replica after R[0]
    any_acceptable: np.ndarray
    first_acceptable: np.ndarray
    k0_in_r: np.ndarray  # the LastKnownElr member is a replica
    k0_acceptable: np.ndarray


def _b3_election(c: _Candidates, PL, k0, pkl, ctx: Context):
    """B3 (§2.3): (new leader, unclean?, is the last known leader's acceptability known?)."""
    trig = ctx.trigger
    # a last known leader that is not a replica: its acceptability needs the broker table
    lkl_known = ~((pkl == 1) & ~c.k0_in_r & ctx.check_lkl)
    # step 3: the single last-known leader (LastKnownElr stored as a list of one)
    lkl_ok = ctx.elr_on & c.ti_empty & c.elr_empty & (pkl == 1) & (~ctx.check_lkl | c.k0_acceptable)
    # ONLINE / UNCLEAN order
    online = np.where(c.keep, PL, c.first_valid)
    lkl_used = (online == NO_LEADER) & lkl_ok
    online = np.where(lkl_used, k0, online)
    unclean_used = (online == NO_LEADER) & (trig == UNCLEAN_ELECTION) & c.any_acceptable
    online = np.where(unclean_used, c.first_acceptable, online)
    # PREFERRED order (never step 4)
    pref = np.where(c.r0_valid, c.r0, np.where(c.keep, PL, c.rest_valid))
    pref_lkl = (pref == NO_LEADER) & lkl_ok
    pref = np.where(pref_lkl, k0, pref)
    preferred = trig == PREFERRED_ELECTION
    return np.where(preferred, pref, online), np.where(preferred, pref_lkl, lkl_used | unclean_used), lkl_known


@dataclass
class _Change:
    """The fields the builder writes (``*_w``: written?); the ISR and ELR in the representation of the
    sets."""

    leader_w: np.ndarray
    leader_v: np.ndarray  # -2 where not written
    isr_w: np.ndarray
    isr_l: np.ndarray
    lrs_w: np.ndarray
    lrs_v: np.ndarray  # -1 where not written
    isr_v: object = None
    elr: object = None
    elr_w: np.ndarray | None = None
    lke_leader: np.ndarray | None = None  # lastKnownElr := [P.L]
    lke_cleared: np.ndarray | None = None  # lastKnownElr := []


def _b4_apply_election(node, unclean, PL, plrs, mv) -> _Change:
    """B4, the fields written; the ELR winner's move into the ISR is the sets' ``b4_leader_from_elr``."""
    changed = node != PL
    isr_w = changed & unclean
    lrs_w = isr_w & (plrs != RECOVERING) & (mv >= MV_3_2_IV0)
    return _Change(leader_w=changed, leader_v=np.where(changed, node, -2), isr_w=isr_w,
                   isr_l=isr_w.astype(np.int32), lrs_w=lrs_w,
                   lrs_v=np.where(lrs_w, np.int32(RECOVERING), np.int32(-1)))


def _b7_writes(isr_w, TI_len, elr_on, differs) -> np.ndarray:
    # with ELR off an empty target ISR is never written: the last member stays
    return ~isr_w & ((TI_len > 0) | elr_on) & differs


def _b8_old_mv_shrink_bump(ch: _Change, shrinks, PL, mv) -> None:
    b8 = (mv < MV_3_6_IV0) & ~ch.leader_w & shrinks
    ch.leader_v = np.where(b8, PL, ch.leader_v)
    ch.leader_w = ch.leader_w | b8


def _b9_last_known_elr(ch: _Change, PL, k0, pkl, elr_on) -> None:
    """B9 in production mode (the last known leader)."""
    pk_is_pl = (pkl == 1) & (k0 == PL)
    ch.lke_leader = elr_on & ch.isr_w & (ch.isr_l == 0) & ~pk_is_pl
    ch.lke_cleared = elr_on & ~ch.lke_leader & (pkl > 0) & (
        (ch.leader_w & (ch.leader_v >= 0)) | ((PL != NO_LEADER) & ~(ch.leader_w & (ch.leader_v == NO_LEADER))))


def _b10_recovery_state(ch: _Change, target_lrs, plrs) -> None:
    """The part of B10 this path models: the recovery state the leader requests (overrides B4)."""
    b10 = target_lrs != plrs
    ch.lrs_v = np.where(b10, target_lrs, ch.lrs_v)
    ch.lrs_w = ch.lrs_w | b10


def _as_recorded(S, ch: _Change, before: dict, rec: dict) -> tuple[np.ndarray, np.ndarray]:
    """(the recomputed change equals the recorded one, the recorded ELR is within the replicas)."""
    ok = rec["leader"] == np.where(ch.leader_w, ch.leader_v, -2)
    ok &= rec["isr_valid"] == ch.isr_w
    ok &= ~ch.isr_w | S.isr_as_recorded(rec, ch)
    # ELR as sets over replica positions; a written ELR equal to the current one (non-empty) is a
    # re-ordering Kafka may emit: treated as not written, as the scalar reference does
    same_as_before, same_as_new, rec_elr_known = S.elr_as_recorded(rec, ch.elr)
    rec_elr_w = rec["elr_valid"] & ~(same_as_before & (before["elr_len"] > 0))
    ok &= rec_elr_w == ch.elr_w
    ok &= ~ch.elr_w | same_as_new
    # LastKnownElr: [P.L] or []
    ok &= rec["lke_valid"] == (ch.lke_leader | ch.lke_cleared)
    ok &= ~ch.lke_leader | ((rec["lke_len"] == 1) & (rec["lke"][:, 0] == before["leader"]))
    ok &= ~ch.lke_cleared | (rec["lke_len"] == 0)
    ok &= rec["lrs"] == np.where(ch.lrs_w, ch.lrs_v, np.int32(-1))  # -1 on both sides: not written
    return ok, rec_elr_known


class _BitSets:
    """The state before each record with sets of replica positions as bitmasks (bit j = position j)
    and ordered lists (the ISR) as one column per position."""

    def __init__(self, before: dict):
        self.pos = pos = _Positions(before["replicas"])
        self.n, self.w = pos.n, pos.w
        self.wi = max(pos.w, before["isr"].shape[1])  # ISR columns
        self.PI = _columns(before["isr"], self.wi)
        self.PE = _members(before["elr"])
        self.pil, self.PL, self.k0 = before["isr_len"], before["leader"], before["lke"][:, 0]
        self.present = pos.pack(pos.present)
        self.inPI = pos.within(self.PI)
        self.inPE = pos.within(self.PE)

    def state_modelled(self) -> np.ndarray:
        """ISR and ELR members are replicas."""
        return self.pos.subset(self.PE) & self.pos.subset(self.PI)

    def target_isr(self, t: _TriggerInputs, rec: dict, ctx: Context):
        TI = _without(self.PI, ctx.broker, t.fence_like)
        if t.isr_given.any():
            TI = [np.where(t.isr_given, x, c) for x, c in zip(_columns(rec["isr"], self.wi), TI)]
        return TI, _count_present(TI)

    def b2_elr_target(self, TI, TI_len, U, ctx: Context):
        pos = self.pos
        inTI = pos.within(TI)
        below = (self.inPE | self.inPI) & ~inTI & ~pos.eq(U) & self.present
        return np.where(ctx.elr_on, np.where(TI_len >= ctx.min_isr, pos.none, below), self.inPE), inTI

    def b3_candidates(self, TI_len, inTI, E, t: _TriggerInputs, ctx: Context) -> _Candidates:
        pos, zero = self.pos, self.pos.none
        acc = pos.pack([np.asarray(ctx.active[:, j], bool) for j in range(self.w)]) & self.present
        eqB = pos.eq(ctx.broker)
        acc &= ~np.where(t.fence_like, eqB, zero)
        acc |= np.where(ctx.trigger == UNFENCE, eqB, zero)
        ti_empty = TI_len == 0
        valid = acc & (inTI | np.where(ti_empty, E, zero))
        eqPL = pos.eq(self.PL)
        eqK = pos.eq(self.k0)
        k0_in_r = eqK != 0
        return _Candidates(
            ti_empty=ti_empty, elr_empty=E == 0,
            keep=(eqPL != 0) & (self.PL >= 0) & ((valid & _lowest(eqPL)) != 0),
            first_valid=pos.at(_lowest(valid), NO_LEADER),
            r0_valid=(valid & pos.dt(1)) != 0, r0=pos.r[0],
            rest_valid=pos.at(_lowest(valid & ~pos.dt(1)), NO_LEADER) if self.w > 1 else np.full(self.n, NO_LEADER),
            any_acceptable=acc != 0, first_acceptable=pos.at(_lowest(acc), NO_LEADER),
            k0_in_r=k0_in_r, k0_acceptable=k0_in_r & ((acc & _lowest(eqK)) != 0))

    def b4_leader_from_elr(self, node, changed, TI, TI_len, E):
        """An ELR winner becomes the sole ISR member and leaves the ELR."""
        eqN = self.pos.eq(node)
        from_elr = changed & ((E & _lowest(eqN)) != 0)
        if from_elr.any():
            TI = [np.where(from_elr, node if j == 0 else -1, c) for j, c in enumerate(TI)]
            TI_len = np.where(from_elr, 1, TI_len)
            E = E & ~np.where(from_elr, eqN, self.pos.none)
        return TI, TI_len, E

    def single_isr(self, node, where):
        """isr := [node] where ``where`` (B4's unclean election), else empty."""
        return [np.where(where, node, -1)] + [np.full(self.n, -1, np.int32)] * (self.wi - 1)

    def b6_elr_field(self, E, clear):
        E = np.where(clear, self.pos.none, E)
        return E, E != self.inPE

    def b7_isr_field(self, ch: _Change, TI, TI_len, elr_on) -> None:
        differs = TI_len != self.pil
        for c, p in zip(TI, self.PI):
            differs |= c != p
        b7 = _b7_writes(ch.isr_w, TI_len, elr_on, differs)
        ch.isr_v = [np.where(b7, c, v) for c, v in zip(TI, ch.isr_v)]
        ch.isr_l = np.where(b7, TI_len, ch.isr_l)
        ch.isr_w = ch.isr_w | b7

    def shrinks(self, TI) -> np.ndarray:
        """The target ISR misses a member of the ISR (B8)."""
        out = np.zeros(self.n, bool)
        for p in self.PI:
            out |= (p >= 0) & ~_any_eq(p, TI)
        return out

    def isr_as_recorded(self, rec: dict, ch: _Change) -> np.ndarray:
        ok = rec["isr_len"] == ch.isr_l
        for x, v in zip(_columns(rec["isr"], self.wi), ch.isr_v):
            ok &= x == v
        return ok

    def elr_as_recorded(self, rec: dict, E):
        """(recorded ELR as a set == the current ELR, == E, every member a replica)."""
        RE = _members(rec["elr"])
        mask = self.pos.within(RE)
        return mask == self.inPE, mask == E, self.pos.subset(RE)


class _MatrixSets:
    """The state before each record with sets of replica positions as (n x w) boolean matrices and
    ordered lists (the ISR) as padded matrices."""

    def __init__(self, before: dict):
        self.R = R = before["replicas"]
        self.n, self.w = R.shape
        self.rows = np.arange(self.n)
        self.PI, self.pil, self.PE = before["isr"], before["isr_len"], before["elr"]
        self.PL, self.k0 = before["leader"], before["lke"][:, 0]
        self.inPI = in_rows(R, self.PI)
        self.inPE = in_rows(R, self.PE)

    def state_modelled(self) -> np.ndarray:
        """ISR and ELR members are replicas."""
        elr_in_r = (in_rows(self.PE, self.R) | (self.PE < 0)).all(axis=1)
        isr_in_r = (in_rows(self.PI, self.R) | (self.PI < 0)).all(axis=1)
        return elr_in_r & isr_in_r

    def target_isr(self, t: _TriggerInputs, rec: dict, ctx: Context):
        PI, B = self.PI, ctx.broker
        TI = np.where(t.fence_like[:, None], compact(PI, (PI != B[:, None]) & (PI >= 0)), PI)
        TI = np.where(t.isr_given[:, None], _fit(rec["isr"], self.w), TI)
        return TI, (TI >= 0).sum(axis=1)

    def b2_elr_target(self, TI, TI_len, U, ctx: Context):
        R = self.R
        inTI = in_rows(R, TI)
        below = (self.inPE | self.inPI) & ~inTI & (R != U[:, None]) & (R >= 0)
        return np.where(ctx.elr_on[:, None], np.where((TI_len >= ctx.min_isr)[:, None], False, below), self.inPE), inTI

    def b3_candidates(self, TI_len, inTI, E, t: _TriggerInputs, ctx: Context) -> _Candidates:
        R, rows, B = self.R, self.rows, ctx.broker
        acc = ctx.active & (R >= 0)
        acc &= ~(t.fence_like[:, None] & (R == B[:, None]))
        acc |= (ctx.trigger == UNFENCE)[:, None] & (R == B[:, None])
        ti_empty = TI_len == 0
        valid = acc & (inTI | (ti_empty[:, None] & E))
        posL, hasL = first_true(R == self.PL[:, None])
        fv, any_v = first_true(valid)
        fa, any_a = first_true(acc)
        pk_in_r, k0_in_r = first_true(R == self.k0[:, None])
        if self.w > 1:
            rest_v, any_rest = first_true(valid[:, 1:])
            rest = np.where(any_rest, R[rows, 1 + rest_v], NO_LEADER)
        else:
            rest = np.full(self.n, NO_LEADER)
        return _Candidates(
            ti_empty=ti_empty, elr_empty=~E.any(axis=1),
            keep=hasL & (self.PL >= 0) & valid[rows, posL],
            first_valid=np.where(any_v, R[rows, fv], NO_LEADER),
            r0_valid=valid[:, 0], r0=R[:, 0], rest_valid=rest,
            any_acceptable=any_a, first_acceptable=np.where(any_a, R[rows, fa], NO_LEADER),
            k0_in_r=k0_in_r, k0_acceptable=k0_in_r & acc[rows, pk_in_r])

    def b4_leader_from_elr(self, node, changed, TI, TI_len, E):
        """An ELR winner becomes the sole ISR member and leaves the ELR."""
        node_pos, node_in_r = first_true(self.R == node[:, None])
        from_elr = changed & node_in_r & E[self.rows, node_pos]
        TI = np.where(from_elr[:, None], _single(node, self.w), TI)
        TI_len = np.where(from_elr, 1, TI_len)
        E = E & ~(from_elr[:, None] & (self.R == node[:, None]))
        return TI, TI_len, E

    def single_isr(self, node, where):
        """isr := [node] where ``where`` (B4's unclean election), else empty."""
        return np.where(where[:, None], _single(node, self.w), -1)

    def b6_elr_field(self, E, clear):
        E = np.where(clear[:, None], False, E)
        return E, (E != self.inPE).any(axis=1)

    def b7_isr_field(self, ch: _Change, TI, TI_len, elr_on) -> None:
        differs = (TI_len != self.pil) | (TI != self.PI).any(axis=1)
        b7 = _b7_writes(ch.isr_w, TI_len, elr_on, differs)
        ch.isr_v = np.where(b7[:, None], TI, ch.isr_v)
        ch.isr_l = np.where(b7, TI_len, ch.isr_l)
        ch.isr_w = ch.isr_w | b7

    def shrinks(self, TI) -> np.ndarray:
        """The target ISR misses a member of the ISR (B8)."""
        return ~(in_rows(self.PI, TI) | (self.PI < 0)).all(axis=1)

    def isr_as_recorded(self, rec: dict, ch: _Change) -> np.ndarray:
        return (rec["isr_len"] == ch.isr_l) & (
            _fit(rec["isr"], self.w) == np.where(ch.isr_w[:, None], ch.isr_v, -1)).all(axis=1)

    def elr_as_recorded(self, rec: dict, E):
        """(recorded ELR as a set == the current ELR, == E, every member a replica)."""
        RE = rec["elr"]
        mask = in_rows(self.R, RE) if RE.shape[1] else np.zeros((self.n, self.w), bool)
        in_r = (in_rows(RE, self.R) | (RE < 0)).all(axis=1)
        return (mask == self.inPE).all(axis=1), (mask == E).all(axis=1), in_r


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
