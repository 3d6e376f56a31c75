"""The change builder of controller-rules §2.1 in one compiled loop (numba), one PartitionChangeRecord at a time.

:func:`recompute` judges every change record exactly as :func:`controller_core.vector.recompute.recompute`
(the NumPy form over whole columns, which stays the reference the tests hold this loop to) -- same
``matched`` / ``modelled`` for every record, quirks included -- but reads its inputs where they already are,
with no padded matrices built first:

* the state before each record: the fold's history row before it (its lists where they are: on the layout's tape
  for the compiled fold's rows, in the history's Arrow list columns otherwise; null rows empty);
* the record as written: the dense layout's row of it (:mod:`.layout`: its leader / recovery-state words and
  (start, length) of its lists on the tape);
* the cluster context, per record: the primary trigger and its broker, the topic's metadata version, ELR
  switch and effective min ISR, and the broker table ``explain`` builds (each broker's active state after
  every broker row), so "is replica j active just before this record" is two array reads.

The loop also finishes the primary trigger (B0 of ``explain``): a record with no broker event in its batch is
an unclean election if it has the shape of one (a single-member ISR equal to the new leader, recovering), a
preferred election if it moves the leader without an ISR, else AlterPartition.

Sets of replica positions are one uint64 per record (bit j = position j), as the NumPy form's bitmasks; the
caller sends inputs with more than 64 replica positions to the NumPy form.  ``width`` is the widest replica
list among the records, as the NumPy form pads every record to it: padding positions take part where it
compares a broker id that may be -1 with the padded replicas.  A map broker id -> replica position (``posof``,
-1 elsewhere) holds the record's replicas while it is judged, so "is x a replica, at which position" is one
read; it is made again only when the state's replicas are another list on the tape than the record before's (once
a partition, nearly: a partition's change records come one after another).  A record whose replicas repeat a broker or hold an id the map cannot index is not judged here: it is
flagged, and the caller judges those (a log Kafka would not write) with the NumPy form.

The judgement of one record is :func:`_judge` (with :func:`_map` / :func:`_unmap`, the replica map), inlined
into this loop and into the findings-only replay's one pass (:mod:`.judge_pass`), which judges each record where
the fold reaches it.  It takes the commonest records, an AlterPartition and a preferred leader election without
a broker event, by a short path (:func:`_short_path`: the general judgement worked out for those shapes, held to it
by a property test) and every other one through the general path, :func:`_judge_general` (45.6 -> 31 ns a change
on the benchmark's fleet, 99 in 100 of whose records take the short path).  Every array those helpers take is a
borrowed view: numba counts references to every array a helper receives, and those atomic counts cost more than the
judgement itself (three quarters of the loop's time when the set operations were helpers on owned arrays;
kernels/borrow.py has the same story).  The layout rows are
fetched ahead (:mod:`.prefetch`): the history comes grouped by partition, the layout in log order, and waiting for
each row was half of what remained.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.numba_cache import read_only
from controller_core.image import MV_3_2_IV0, MV_3_6_IV0, NO_LEADER, RECOVERING
from controller_core.kernels.borrow import borrow
from controller_core.kernels.borrow import keep as hold  # (``keep`` is the election's name for the leader staying)
from controller_core.kernels.layout import AD, E, I, K, R, RM
from controller_core.kernels.prefetch import prefetch
from controller_core.vector.recompute import (ALTER, FENCE, PREFERRED_ELECTION, UNCLEAN_ELECTION,
                                              UNCLEAN_SHUTDOWN, UNFENCE)

MAX_POSITIONS = 64  # replica positions a uint64 holds

_AHEAD = 256  # records between fetching a layout row and reading it (128: the loop 48.7-50.3 ns a record, 256: 46.3)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = ~np.uint64(0)


@njit(cache=True, inline="always")
def _bit(j):
    return _ONE << np.uint64(j)


@njit(cache=True, inline="always")
def _first(w):
    """Positions 0 .. w-1 (w <= 64)."""
    return _ZERO if w <= 0 else _ALL >> np.uint64(64 - w)


@njit(cache=True, inline="always")
def _lowest(bits):
    """The lowest set bit (0 if none): "first in replica order"."""
    return bits & (~bits + _ONE)


@njit(cache=True, inline="always")
def _pos(single):
    """The position of a one-bit mask."""
    j = 0
    while single > _ONE:
        single >>= _ONE
        j += 1
    return j


@njit(cache=True, inline="always")
def _positions(posof, vals, s, n):
    """(the replica positions of the brokers in ``vals[s:s + n]``, every broker there (>= 0) is a replica), with
    ``posof`` the record's map broker id -> replica position.  Callers pass borrowed views (kernels/borrow.py):
    arrays with an owner would be reference-counted at every call."""
    bits = _ZERO
    within = True
    for q in range(n):
        x = vals[s + q]
        j = posof[x] if 0 <= x < len(posof) else -1
        if j >= 0:
            bits |= _bit(j)
        elif x >= 0:
            within = False
    return bits, within


def recompute(prev, pos, width, *arrays):
    """:func:`_recompute` (see there) with every input array read-only and ``trig`` (written) as given: numba
    compiles one machine function per combination of array flags, and Arrow's buffers arrive read-only while
    arrays made here are not -- one combination keeps the first call of a command on numba's disk cache
    (:func:`warm`) instead of compiling a new one."""
    fixed = [read_only(a) if k != _TRIG and isinstance(a, np.ndarray) else a for k, a in enumerate(arrays)]
    return _recompute(prev, pos, width, *fixed)


_TRIG = 8  # the position of ``trig`` among ``arrays`` (after prev, pos, width)


@njit(cache=True, inline="always")
def _map(posof, vals, rs, w):
    """Enter the replicas ``vals[rs:rs + w]`` into the map broker id -> replica position; False, with nothing left
    in the map, where one repeats or is an id the map cannot index (the caller's NumPy form judges those)."""
    L = len(posof)
    for j in range(w):
        x = vals[rs + j]
        if x < 0 or x >= L or posof[x] >= 0:
            for q in range(j):
                posof[vals[rs + q]] = -1
            return False
        posof[x] = j
    return True


@njit(cache=True, inline="always")
def _unmap(posof, vals, rs, w):
    for j in range(w):
        posof[vals[rs + j]] = -1


@njit(cache=True, inline="always")
def _active_positions(vals, rs, w, act_table, base, act_lut):
    """The positions of the replicas ``vals[rs:rs + w]`` active just before the record, as bits: read from the broker
    table :func:`controller_core.brokers.active_table` builds (``act_table[base + act_lut[b]]``, the one definition of
    broker availability), not decided here."""
    acc = _ZERO
    for j in range(w):
        if act_table[base + act_lut[vals[rs + j]]]:
            acc |= _bit(j)
    return acc


@njit(cache=True, inline="always")
def _judge(posof, vals, tape, ti, rs, w, is_, pil, es, pel, ks, pkl, adl, rml, PL, plrs, ints, lists, p, t, B, e_on,
           v, mis, act_table, base, act_lut, width):
    """Judge one change record (:func:`_judge_general`, whose arguments these are), the commonest kinds by a short
    path first (:func:`_short_path`); what it does not decide goes the general way."""
    done, t2, ok = _short_path(posof, vals, tape, rs, w, is_, pil, pel, pkl, adl, rml, PL, ints, lists, p, t, B, e_on,
                               v, mis, act_table, base, act_lut, width)
    if done:
        return t2, ok, True
    return _judge_general(posof, vals, tape, ti, rs, w, is_, pil, es, pel, ks, pkl, adl, rml, PL, plrs, ints, lists,
                          p, t, B, e_on, v, mis, act_table, base, act_lut, width)


@njit(cache=True, inline="always")
def _short_path(posof, vals, tape, rs, w, is_, pil, pel, pkl, adl, rml, PL, ints, lists, p, t, B, e_on, v, mis,
                act_table, base, act_lut, width):
    """The commonest change records without a broker event, of a partition with no ELR, LastKnownElr or
    reassignment, that write no ELR, LastKnownElr, recovery state or assignment field: an AlterPartition, which
    writes the ISR and maybe the leader (:func:`_alter_isr`; with ELR on, an ISR of at least the min ISR ``mis``:
    below it the controller moves replicas into the ELR, B2), and a preferred leader election, which writes only the
    leader (B0; :func:`_preferred`).  Every change record of the benchmark's fleet but its fences' is one of them.
    Returns (decided, trigger, matched) -- modelled, where decided -- as :func:`_judge_general` would."""
    if not (t == ALTER and B == -1 and pel == 0 and pkl == 0 and adl == 0 and rml == 0 and ints[p, 3] == -1
            and ints[p, 4] < 0 and lists[p, 2 * E + 1] < 0 and lists[p, 2 * K + 1] < 0 and lists[p, 2 * R + 1] < 0
            and lists[p, 2 * RM + 1] < 0 and lists[p, 2 * AD + 1] < 0):
        return False, t, False
    r_leader = ints[p, 0]
    ril = lists[p, 2 * I + 1]
    if ril >= 0:
        if 1 <= ril <= width and (not e_on or ril >= mis):
            done, ok = _alter_isr(posof, vals, tape, rs, w, is_, pil, PL, lists[p, 2 * I], ril, r_leader, v, act_table,
                                  base, act_lut)
            return done, t, ok
    elif r_leader != -2:
        done, node = _preferred(posof, vals, rs, w, is_, pil, PL, act_table, base, act_lut)
        return done, PREFERRED_ELECTION, done and node != PL and r_leader == node
    return False, t, False


@njit(cache=True, inline="always")
def _preferred(posof, vals, rs, w, is_, pil, PL, act_table, base, act_lut):
    """The leader :func:`_judge_general` elects for a preferred election :func:`_short_path` sends here, worked out
    for that shape: the first replica if it is active and in the ISR, else the leader ``PL`` if it is, else the
    first replica after the first that is (B3; the ISR and ELR stay, B7); NO_LEADER if none.  Returns (decided,
    that leader); not decided -- the general path judges it -- where the ISR is not within the replicas (not
    modelled) or holds a negative id (written again), or there are no replicas."""
    inPI, within = _positions(posof, vals, is_, pil)
    if not within or w < 1:
        return False, NO_LEADER
    for q in range(pil):
        if vals[is_ + q] < 0:
            return False, NO_LEADER
    acc = _active_positions(vals, rs, w, act_table, base, act_lut)
    valid = acc & inPI
    if (valid & _ONE) != _ZERO:
        return True, vals[rs]
    jL = posof[PL] if 0 <= PL < len(posof) else -1
    if jL >= 0 and (valid & _bit(jL)) != _ZERO:
        return True, PL
    rest = valid & ~_ONE
    return True, (vals[rs + _pos(_lowest(rest))] if rest != _ZERO else NO_LEADER)


@njit(cache=True, inline="always")
def _alter_isr(posof, vals, tape, rs, w, is_, pil, PL, ris, ril, r_leader, v, act_table, base, act_lut):
    """What :func:`_judge_general` decides of the AlterPartition :func:`_short_path` sends here (the ISR it requests,
    ``tape[ris:ris + ril]``, of 1 to ``width`` ids; the leader it writes ``r_leader``, -2 for none; the state's ISR
    ``vals[is_:is_ + pil]``, its leader ``PL``), worked out for that shape: the leader stays where it is active and
    in the requested ISR, else the first replica that is takes over (B3; NO_LEADER if none); the controller writes
    the requested ISR when it differs from the state's (B7), and the leader when it changes or, before 3.6, when the
    ISR shrinks (B8).  Returns (decided, matched); not decided -- the general path judges it -- where the state's
    ISR is not within the replicas (not modelled) or the requested ISR holds a negative id."""
    L = len(posof)
    inPI, within = _positions(posof, vals, is_, pil)
    if not within:
        return False, False
    inTI = _ZERO
    differs = ril != pil
    for q in range(ril):
        x = tape[ris + q]
        if x < 0:
            return False, False
        j = posof[x] if x < L else -1
        if j >= 0:
            inTI |= _bit(j)
        if q >= pil or x != vals[is_ + q]:
            differs = True
    if not differs:  # an ISR the controller would not write again
        return True, False
    jL = posof[PL] if 0 <= PL < L else -1
    if jL >= 0 and (inTI & _bit(jL)) != _ZERO and act_table[base + act_lut[PL]]:
        node = PL
    else:
        valid = _active_positions(vals, rs, w, act_table, base, act_lut) & inTI
        node = vals[rs + _pos(_lowest(valid))] if valid != _ZERO else NO_LEADER
    if node != PL:
        return True, r_leader == node
    return True, r_leader == (PL if v < MV_3_6_IV0 and (inPI & ~inTI) != _ZERO else -2)


@njit(cache=True, inline="always")
def _judge_general(posof, vals, tape, ti, rs, w, is_, pil, es, pel, ks, pkl, adl, rml, PL, plrs, ints, lists, p, t, B,
                   e_on, v, mis, act_table, base, act_lut, width):
    """Judge one change record against the state before it, its replicas in the map ``posof`` (:func:`_map`).  The
    state's lists are on ``vals`` ((start, length): replicas ``rs, w``, ISR ``is_, pil``, ELR ``es, pel``,
    LastKnownElr ``ks, pkl``; adding / removing lengths ``adl``, ``rml``), its leader ``PL`` and recovery state
    ``plrs``; the record is layout row ``p`` (lists on ``tape``).  ``t``: the broker event's trigger (ALTER
    without one, -1 when two could explain it); ``B`` its broker; ``e_on``, ``v``, ``mis``: the topic's ELR switch,
    metadata version and effective min ISR; broker b is active just before the record iff
    ``act_table[base + act_lut[b]]``.  ``ti``: a buffer of at least ``max(width, 1) + 64`` entries.  Every array
    a borrowed view (kernels/borrow.py).  Returns (the trigger completed (B0), matched, modelled)."""
    L = len(posof)
    cap = len(ti)
    present = _first(w)
    pad = _first(width) & ~present
    k0 = vals[ks] if pkl > 0 else -1
    # the record as written
    r_leader = ints[p, 0]
    r_lrs = ints[p, 3]
    ris, ril = lists[p, 2 * I], lists[p, 2 * I + 1]
    r_isr_ok = ril >= 0
    if not r_isr_ok:
        ril = 0
    res, rel = lists[p, 2 * E], lists[p, 2 * E + 1]
    r_elr_ok = rel >= 0
    if not r_elr_ok:
        rel = 0
    rks, rkl = lists[p, 2 * K], lists[p, 2 * K + 1]
    r_lke_ok = rkl >= 0
    if not r_lke_ok:
        rkl = 0
    other = (lists[p, 2 * R + 1] >= 0) | (lists[p, 2 * RM + 1] >= 0) | (lists[p, 2 * AD + 1] >= 0) | (
        ints[p, 4] >= 0)
    # B0: the primary trigger of a record without a broker event
    if t == ALTER and r_leader != -2:
        if r_isr_ok and ril == 1 and tape[ris] == r_leader and r_lrs == 1:
            t = UNCLEAN_ELECTION
        elif not r_isr_ok:
            t = PREFERRED_ELECTION
    if t < 0:
        return t, False, False
    check = v >= 22
    fence_like = t == FENCE or t == UNCLEAN_SHUTDOWN
    isr_given = t == ALTER and r_isr_ok
    U = B if t == UNCLEAN_SHUTDOWN else -1
    target_lrs = r_lrs if (t == ALTER and r_lrs != -1) else plrs

    # modelled: no reassignment or assignment field, the ISR and ELR within the replicas; their positions
    modelled = not other and adl == 0 and rml == 0 and not (isr_given and ril > width)
    inPI, isr_within = _positions(posof, vals, is_, pil)
    inPE, elr_within = _positions(posof, vals, es, pel)
    modelled = modelled and isr_within and elr_within
    if not modelled:  # matched needs modelled: the rest of the judgement could not change the result
        return t, False, False

    # the target ISR: the ISR without the broker (fence-like), the requested ISR (AlterPartition), or the ISR
    tin = 0
    if isr_given:
        for q in range(ril):
            ti[q] = tape[ris + q]
        tin = ril
    else:
        for q in range(pil):
            x = vals[is_ + q]
            if fence_like and (x == B or x < 0):
                continue
            ti[tin] = x
            tin += 1
    ti_len = 0
    inTI = _ZERO
    for q in range(tin):
        x = ti[q]
        if x >= 0:
            ti_len += 1
            j = posof[x] if x < L else -1
            if j >= 0:
                inTI |= _bit(j)
    # the positions holding U, B, the leader and the last known leader (-1 also matches the padding)
    jU = posof[U] if 0 <= U < L else -1
    eqU = (pad if U == -1 else _ZERO) | (_bit(jU) if jU >= 0 else _ZERO)
    jB = posof[B] if 0 <= B < L else -1
    eqB = (pad if B == -1 else _ZERO) | (_bit(jB) if jB >= 0 else _ZERO)
    jL = posof[PL] if 0 <= PL < L else -1
    eqPL = (pad if PL == -1 else _ZERO) | (_bit(jL) if jL >= 0 else _ZERO)
    jK = posof[k0] if 0 <= k0 < L else -1
    eqK = (pad if k0 == -1 else _ZERO) | (_bit(jK) if jK >= 0 else _ZERO)
    # B2: the ELR target
    if e_on:
        Eb = _ZERO if ti_len >= mis else (inPE | inPI) & ~inTI & ~eqU & present
    else:
        Eb = inPE
    # B3: the candidates and the election (§2.3)
    acc = _active_positions(vals, rs, w, act_table, base, act_lut)
    if fence_like:
        acc &= ~eqB
    if t == UNFENCE:
        acc |= eqB
    ti_empty = ti_len == 0
    valid = acc & (inTI | (Eb if ti_empty else _ZERO))
    keep = eqPL != _ZERO and PL >= 0 and (valid & _lowest(eqPL)) != _ZERO
    # the replica at the lowest position of a set (-1: none, or a padding position)
    j = _pos(_lowest(valid)) if valid != _ZERO else 64
    first_valid = vals[rs + j] if j < w else NO_LEADER
    r0_valid = (valid & _ONE) != _ZERO
    r0 = vals[rs] if w > 0 else -1
    j = _pos(_lowest(valid & ~_ONE)) if (valid & ~_ONE) != _ZERO and width > 1 else 64
    rest_valid = vals[rs + j] if j < w else NO_LEADER
    j = _pos(_lowest(acc)) if acc != _ZERO else 64
    first_acceptable = vals[rs + j] if j < w else NO_LEADER
    k0_in_r = eqK != _ZERO
    k0_acceptable = k0_in_r and (acc & _lowest(eqK)) != _ZERO
    lkl_known = not (pkl == 1 and not k0_in_r and check)
    lkl_ok = e_on and ti_empty and Eb == _ZERO and pkl == 1 and (not check or k0_acceptable)
    if t == PREFERRED_ELECTION:
        node = r0 if r0_valid else (PL if keep else rest_valid)
        unclean = node == NO_LEADER and lkl_ok
        if unclean:
            node = k0
    else:
        node = PL if keep else first_valid
        unclean = node == NO_LEADER and lkl_ok
        if unclean:
            node = k0
        if node == NO_LEADER and t == UNCLEAN_ELECTION and acc != _ZERO:
            node = first_acceptable
            unclean = True
    # B4: apply the election
    leader_w = node != PL
    leader_v = node if leader_w else -2
    isr_w = leader_w and unclean
    isr_l = 1 if isr_w else 0
    lrs_w = isr_w and plrs != RECOVERING and v >= MV_3_2_IV0
    lrs_v = RECOVERING if lrs_w else -1
    jN = posof[node] if 0 <= node < L else -1
    eqN = (pad if node == -1 else _ZERO) | (_bit(jN) if jN >= 0 else _ZERO)
    if leader_w and (Eb & _lowest(eqN)) != _ZERO:  # an ELR winner: the sole ISR member, out of the ELR
        ti[0] = node
        tin = 1
        ti_len = 1
        inTI = eqN & present
        Eb &= ~eqN
    # B6: the ELR field
    if isr_w or not e_on:
        Eb = _ZERO
    elr_w = Eb != inPE
    # B7: the ISR field (with ELR off an empty target ISR is never written: the last member stays)
    differs = ti_len != pil
    if not differs:
        for q in range(max(tin, pil)):
            a = ti[q] if q < tin else -1
            b = vals[is_ + q] if q < pil else -1
            if a != b:
                differs = True
                break
    from_ti = not isr_w and (ti_len > 0 or e_on) and differs
    if from_ti:
        isr_l = ti_len
        isr_w = True
    # B8: before 3.6 a shrink bumps the leader epoch (the leader is written again); the ISR is within the
    # replicas (modelled), each broker at one position
    if v < MV_3_6_IV0 and not leader_w and (inPI & ~inTI) != _ZERO:
        leader_v = PL
        leader_w = True
    # B9: LastKnownElr in production mode
    pk_is_pl = pkl == 1 and k0 == PL
    lke_leader = e_on and isr_w and isr_l == 0 and not pk_is_pl
    lke_cleared = e_on and not lke_leader and pkl > 0 and (
        (leader_w and leader_v >= 0) or (PL != NO_LEADER and not (leader_w and leader_v == NO_LEADER)))
    # B10: the recovery state the leader requests
    if target_lrs != plrs:
        lrs_v = target_lrs
        lrs_w = True
    # judged against the record
    ok = r_leader == (leader_v if leader_w else -2)
    ok = ok and r_isr_ok == isr_w
    if ok and isr_w:
        ok = ril == isr_l
        for q in range(max(ril, tin)):
            if not ok:
                break
            want = (ti[q] if q < tin else -1) if from_ti else (node if q == 0 else -1)
            ok = (tape[ris + q] if q < ril else -1) == want
    mask, rec_elr_known = _positions(posof, tape, res, rel)
    rec_elr_w = r_elr_ok and not (mask == inPE and pel > 0)
    ok = ok and rec_elr_w == elr_w and (not elr_w or mask == Eb)
    ok = ok and r_lke_ok == (lke_leader or lke_cleared)
    ok = ok and (not lke_leader or (rkl == 1 and tape[rks] == PL))
    ok = ok and (not lke_cleared or rkl == 0)
    ok = ok and r_lrs == (lrs_v if lrs_w else -1)
    modelled = lkl_known and rec_elr_known
    return t, ok and modelled, modelled


@njit(cache=True, nogil=True)
def _recompute(prev, pos, width, h_src, h_off, h_vals, h_leader, h_lrs, ints, lists, tape, trig, broker, mv, elr_on,
               min_isr, act_table, act_at, act_lut):
    """Judge change record i (history row ``prev[i]`` before it, layout row ``pos[i]`` as written) with
    :func:`_judge`.  The history rows' lists (layout.LISTS order): list f of row h starts at ``h_vals[h_src[h, f]]``
    and is ``h_off[f, h + 1] - h_off[f, h]`` long (:func:`controller_core.vector.explain.before_lists`).  ``trig``:
    the broker event's trigger, ALTER without one, -1 when two events could explain it; completed in place
    (elections).  Returns (matched, modelled, unjudged): matched and modelled are False where ``trig`` is -1 and
    where ``unjudged`` (replicas the map cannot hold: the caller judges those)."""
    n = len(prev)
    matched = np.zeros(n, np.bool_)
    modelled_out = np.zeros(n, np.bool_)
    unjudged = np.zeros(n, np.bool_)
    # the target ISR (ordered): at most the ISR before, or a recorded ISR no longer than the replicas (a longer one
    # is not modelled, and left before the buffer is written)
    ti = np.empty(max(width, 1) + 64, np.int64)
    cap = len(ti)
    posof = np.full(len(act_lut), -1, np.int8)  # broker id -> replica position of the record at hand, -1 elsewhere
    pmap, vals, rec, buf = borrow(posof), borrow(h_vals), borrow(tape), borrow(ti)
    b_ints, b_lists, b_table, b_lut = borrow(ints), borrow(lists), borrow(act_table), borrow(act_lut)
    mapped_rs, mapped_w = -1, -1  # the replicas in the map: (tape start, length); -1: none
    for i in range(n):
        # the records' layout rows come in log order, not the history's: fetched ahead (their lists' rows some
        # records ahead, their recorded ISR once that row is in)
        if i + _AHEAD < n:
            q = pos[i + _AHEAD]
            prefetch(lists, q * lists.shape[1])
            prefetch(ints, q * ints.shape[1])
            prefetch(h_src, prev[i + _AHEAD] * h_src.shape[1])
        if i + _AHEAD // 2 < n:
            prefetch(tape, lists[pos[i + _AHEAD // 2], 2 * I])
            hq = prev[i + _AHEAD // 2]  # its lists before (the fold's rows point into the log-ordered tape)
            prefetch(h_vals, h_src[hq, R])
            prefetch(h_vals, h_src[hq, I])
        h = prev[i]
        rs = h_src[h, R]
        w = h_off[R, h + 1] - h_off[R, h]
        # an ISR longer than the buffer (repeats), replicas repeating a broker or beyond the map: the NumPy form
        if h_off[I, h + 1] - h_off[I, h] >= cap:
            unjudged[i] = True
            continue
        # the map holds the replicas of the record before, which are these when the state's replicas are the same
        # list on the tape (a partition's change records follow one another: the map is made once a partition, not
        # once a record -- 4 of the loop's 29 ns a record on the benchmark's fleet)
        # (written out here and in judge_pass: as one inline helper the loop took 25.5-26.7 ns a record, not 23.9)
        if rs != mapped_rs or w != mapped_w:
            if mapped_w >= 0:
                _unmap(pmap, vals, mapped_rs, mapped_w)
                mapped_w = -1
            if not _map(pmap, vals, rs, w):
                unjudged[i] = True
                continue
            mapped_rs, mapped_w = rs, w
        if mapped_w != w:
            unjudged[i] = True
            continue
        t, ok, modelled = _judge(pmap, vals, rec, buf, rs, w, h_src[h, I], h_off[I, h + 1] - h_off[I, h], h_src[h, E],
                                 h_off[E, h + 1] - h_off[E, h], h_src[h, K], h_off[K, h + 1] - h_off[K, h],
                                 h_off[AD, h + 1] - h_off[AD, h], h_off[RM, h + 1] - h_off[RM, h], h_leader[h],
                                 h_lrs[h], b_ints, b_lists, pos[i], trig[i], broker[i], elr_on[i], mv[i], min_isr[i],
                                 b_table, act_at[i], b_lut, width)
        trig[i] = t
        matched[i] = ok
        modelled_out[i] = modelled
    hold(posof, ti)
    return matched, modelled_out, unjudged


def warm() -> None:
    """Compile the loop (or load it from numba's cache) with the argument types of a real run."""
    i64, i32 = np.zeros(1, np.int64), np.zeros(1, np.int32)
    recompute(i64, i64, 1, np.zeros((1, 7), np.int32), np.zeros((7, 2), np.int32), i32, i32, i32,
              np.zeros((1, 5), np.int32), np.full((1, 12), -1, np.int32), i32, np.zeros(1, np.int8), i32,
              np.zeros(1, np.int16), np.zeros(1, np.bool_), i32, np.zeros(1, np.bool_), i64, i32)
