"""The §4 invariants of controller-rules.md in one compiled pass over the records (numba).

The same verdicts as the scalar reference :class:`controller_core.rules.invariants.InvariantChecker`
(tests compare them on every real log, every simulator scenario and the per-rule logs), reached
without Python objects: the cluster image lives in integer arrays (``layout.py`` made every string
and list an index), each record is checked against the state before it and then applied, and each
batch ends with the batch-level rules (min ISR windows, fences, unclean shutdowns).

A breach leaves the pass as integers on one output stream::

    rule, severity, row, partition, topic name at the time, payload length, payload...

where the payload holds what the breach's description needs (broker-id lists as ``[n, ids...]``);
:mod:`controller_core.kernels.breach_report` turns the stream into :class:`Breach` rows through the
same descriptions the scalar checker uses (:mod:`controller_core.rules.breaches`).

Not here, like in the scalar checker: INV-ELECTION-ORDER (a divergence of the recomputation).  Also not
here: INV-LEADER-EPOCH-STEP / INV-PARTITION-EPOCH-STEP, which guard the scalar image's ``merge``
(the epochs a change record leaves); this pass applies a change by those very rules, so it cannot
break them.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import List

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core import brokers
from controller_core.image import (
    LEADER_UNCHANGED, MV_3_2_IV0, MV_3_6_IV0, MV_4_0_IV1, MV_4_1_IV0, NO_LEADER, RECOVERED, RECOVERING,
)
from controller_core.kernels.borrow import borrow, keep
from controller_core.kernels.prefetch import prefetch
from controller_core.kernels.layout import (
    BROKER_RESOURCE, CFG_MIN_ISR, CHANGE, CLEAR_ELR, CONFIG, FEAT_ELR, FEAT_MV, FEATURE, FENCE,
    LEADER_CHANGE, MISSING, PARTITION, REG_CHANGE, REGISTER, REMOVE_TOPIC, TOPIC, TOPIC_RESOURCE, UNFENCE,
    UNREGISTER, ZK_MIGRATION,
)

# rule ids on the output stream (kernels/breach_report.py maps them back)
RULES = (
    "INV-TOPIC-UNIQUE", "INV-TOPIC-EXISTS", "INV-EPOCH-MONOTONIC", "INV-LRS-ENTRY", "INV-RECORD-NOOP",
    "INV-REPLICAS-DISTINCT", "INV-DIRS-LENGTH", "INV-ISR-SUBSET-REPLICAS", "INV-LEADER-IN-ISR",
    "INV-LEADER-IN-REPLICAS", "INV-ELR-DISJOINT", "INV-ELR-DISABLED-EMPTY", "INV-ISR-EMPTY-NEEDS-ELR",
    "INV-ELR-SUBSET-REPLICAS", "INV-LKE-SINGLETON", "INV-LKE-NEGATIVE", "INV-LKE-LEADERLESS", "INV-LRS-SINGLE-ISR",
    "INV-BUMP-ON-REPLICA-LOSS", "INV-BUMP-ON-SHRINK-OLDMV", "INV-NO-SPURIOUS-BUMP", "INV-LRS-EXIT",
    "INV-ISR-EXPAND-ACTIVE", "INV-UNCLEAN-ELECTION", "INV-UNCLEAN-CONFIG", "INV-LEADER-ACTIVE",
    "INV-BROKER-EPOCH-MATCH", "INV-CS-STICKY", "INV-REGISTER-UNCLEAN-BATCH", "INV-ELR-BELOW-MINISR",
    "INV-UNDER-MINISR", "INV-OFFLINE-NO-CANDIDATE", "INV-FENCE-REMOVES-ISR", "INV-ELR-UNCLEAN-REMOVED",
)
(TOPIC_UNIQUE, TOPIC_EXISTS, EPOCH_MONOTONIC, LRS_ENTRY, RECORD_NOOP, REPLICAS_DISTINCT, DIRS_LENGTH, ISR_SUBSET,
 LEADER_IN_ISR, LEADER_IN_REPLICAS, ELR_DISJOINT, ELR_DISABLED_EMPTY, ISR_EMPTY_NEEDS_ELR, ELR_SUBSET, LKE_SINGLETON,
 LKE_NEGATIVE, LKE_LEADERLESS, LRS_SINGLE_ISR, BUMP_REPLICA_LOSS, BUMP_SHRINK, SPURIOUS_BUMP, LRS_EXIT, ISR_EXPAND,
 UNCLEAN_ELECTION, UNCLEAN_CONFIG, LEADER_ACTIVE, BROKER_EPOCH, CS_STICKY, REGISTER_UNCLEAN, ELR_BELOW_MINISR,
 UNDER_MINISR, OFFLINE, FENCE_REMOVES_ISR, ELR_UNCLEAN_REMOVED) = range(len(RULES))
SEVERITIES = (None, "ERROR", "WARN", "INFO")  # 0: the rule's default severity
S_DEFAULT, S_ERROR, S_WARN, S_INFO = 0, 1, 2, 3
NO_KEY = -2  # "topic name" of a breach that names no partition


# partition state columns: live, leader, epochs, LRS, then (start, length) of each list in the tape
P_LIVE, P_LEADER, P_LE, P_PE, P_LRS = 0, 1, 2, 3, 4
P_LISTS = 5  # replicas 5-6, isr 7-8, removing 9-10, adding 11-12, elr 13-14, lke 15-16
P_UNDER, P_OFFLINE, P_M_AT, P_TSTAMP, P_LAST_T, P_MARK = 17, 18, 19, 20, 21, 22
P_FIELDS = 23
P_STATE = P_LISTS + 12  # the partition's own state; the fields after it are the pass's notes, read where they lie
# The state lines are int32 (92 bytes a partition, half the traffic of int64: the pass on group 0 of the 1 M-partition
# fleet 74-81 -> 63-68 ns a record) unless a field may not fit (:func:`narrow_fits`): each holds a Kafka int32 (leader,
# epochs), a list's tape position and length, a batch or touch number, a flag, or the m noted in P_M_AT, kept within
# int32 (:func:`_m_note`; M_UNSET: none).  The one field the pass computes beyond a record's own values is an epoch
# bumped past 2**31 - 1 (Kafka's epochs would wrap there, the scalar reference's do not): the pass says so
# (G_WIDE) and its caller runs it again on int64 lines.
I32_MAX = np.iinfo(np.int32).max
M_UNSET = np.iinfo(np.int32).min
LR, LI, LRM, LAD, LE, LK = 0, 1, 2, 3, 4, 5
# topics
T_LIVE, T_NAME, T_MB, T_MB_STAMP, T_M, T_M_STAMP = 0, 1, 2, 3, 4, 5  # T_M: m cached while a batch is closed
T_R_STAMP = 6  # the batch that listed the topic for re-evaluation (its partitions' m may have moved)
T_FIELDS = 7
# brokers
B_REG, B_EPOCH, B_INC, B_FENCED, B_CS, B_PEND_ROW, B_PEND_AT, B_PEND_LEN, B_DONE, B_PEND_LEFT = range(10)
B_FIELDS = 10
# globals
(G_MV, G_MV_PRESENT, G_ELRF_PRESENT, G_ELRF_LEVEL, G_EVIDENCE, G_OVERRIDE, G_CTRL_ID, G_CTRL_SLOT, G_ZK, G_DEFAULT_SLOT,
 G_POOL_ELR, G_WIDE) = range(12)
G_FIELDS = 12
# one touch: a partition record of the current batch (the scalar checker's _Touch)
(X_PART, X_ROW, X_HASB, X_BL, X_BI_S, X_BI_N, X_BE_S, X_BE_N, X_BK_S, X_BK_N, X_AI_S, X_AI_N, X_AE_S, X_AE_N,
 X_RL, X_RI_S, X_RI_N, X_RLRS) = range(18)
X_FIELDS = 18
# written-field bits of a change record
W_ISR, W_LEADER, W_REPLICAS, W_REMOVING, W_ADDING, W_DIRS, W_ELR, W_LKE, W_LRS = (1 << k for k in range(9))
W_ALL = (1 << 9) - 1

_active_rule = njit(cache=True)(brokers.rule)
# The functions every partition record goes through are inlined into the pass: a call hands numba's
# reference counting every array it passes (~13 ns each), which cost a third of the pass at 100 k partitions
# (2.0 s -> 1.4 s on 1.15 M records).
_PER_RECORD = {"cache": True, "inline": "always"}
# The small helpers the per-record checks call (list membership, a state line's list, a broker's state) are inlined
# too, now that the arrays they take are borrowed: called, each was a call with its arrays passed by value, several
# per record (the pass on a 1.15 M-record log 126 -> 102 ms; its first compilation 43 -> 73 s, paid once by
# scripts/bootstrap.sh).
_SMALL = {"cache": True, "inline": "always"}
_AHEAD = 256  # records between fetching a partition's state line and reading it


# ------------------------------------------------------------------------------------------ small list helpers
@njit(cache=True, inline="always")
def _has(tape, s, n, x):
    for j in range(n):
        if tape[s + j] == x:
            return True
    return False


@njit(**_SMALL)
def _is_only(tape, s, n, x):
    return n == 1 and tape[s] == x


@njit(**_SMALL)
def _subset(tape, s, n, s2, n2):
    """Every member of list 1 is in list 2."""
    for j in range(n):
        if not _has(tape, s2, n2, tape[s + j]):
            return False
    return True


@njit(**_SMALL)
def _meets(tape, s, n, s2, n2):
    for j in range(n):
        if _has(tape, s2, n2, tape[s + j]):
            return True
    return False


@njit(**_SMALL)
def _has_dups(tape, s, n):
    for j in range(1, n):
        if _has(tape, s, j, tape[s + j]):
            return True
    return False


@njit(**_SMALL)
def _any_negative(tape, s, n):
    for j in range(n):
        if tape[s + j] < 0:
            return True
    return False


@njit(cache=True, nogil=True)
def _distinct_assigned(tape, ps, p):
    """|replicas ∪ adding ∪ removing| of partition p (what caps its topic's min ISR when p is partition 0)."""
    lists = (LR, LAD, LRM)
    count = 0
    for i in range(3):
        s, n = ps[p, P_LISTS + 2 * lists[i]], ps[p, P_LISTS + 2 * lists[i] + 1]
        for j in range(n):
            x = tape[s + j]
            seen = _has(tape, s, j, x)
            # seen in a list visited before this one: by position in ``lists``, not by the lists' ids (LAD > LRM)
            for k in range(i):
                if seen:
                    break
                seen = _has(tape, ps[p, P_LISTS + 2 * lists[k]], ps[p, P_LISTS + 2 * lists[k] + 1], x)
            if not seen:
                count += 1
    return count


@njit(cache=True, nogil=True)
def _union_in(tape, a, b):
    """Every member of lists a[0..2] (starts and lengths interleaved) is in one of lists b[0..2]."""
    for k in range(3):
        for j in range(a[2 * k + 1]):
            x = tape[a[2 * k] + j]
            if not (_has(tape, b[0], b[1], x) or _has(tape, b[2], b[3], x) or _has(tape, b[4], b[5], x)):
                return False
    return True


# ------------------------------------------------------------------------------------------ output stream
# ``out`` is (buffer, count): borrowed int64 arrays, so passing it to a handler per record costs no reference
# count (a typed List did: two atomic operations per call and per level of handler, a quarter of the pass's time at
# 1 M partitions).  Words past the buffer are counted, not written; the caller runs the pass again with room
# for them (:func:`controller_core.kernels.invariants.check`).
@njit(cache=True, inline="always")
def _word(out, x):
    buf, cnt = out
    n = cnt[0]
    if n < len(buf):
        buf[n] = x
    cnt[0] = n + 1


@njit(cache=True, inline="always")
def _length(out):
    return out[1][0]


@njit(cache=True, nogil=True)
def _open(out, rule, sev, row, part, name):
    _word(out, rule)
    _word(out, sev)
    _word(out, row)
    _word(out, part)
    _word(out, name)
    _word(out, 0)
    return _length(out) - 1  # where the payload length goes


@njit(cache=True, nogil=True)
def _close(out, at):
    if at < len(out[0]):
        out[0][at] = _length(out) - at - 1


@njit(cache=True, nogil=True)
def _push2(out, x, y):
    _word(out, x)
    _word(out, y)


@njit(cache=True, nogil=True)
def _push3(out, x, y, z):
    _word(out, x)
    _word(out, y)
    _word(out, z)


@njit(cache=True, nogil=True)
def _append3(lst, x, y, z):
    """Three values onto a typed List (a batch's fences)."""
    lst.append(x)
    lst.append(y)
    lst.append(z)


@njit(cache=True, nogil=True)
def _put_list(out, tape, s, n):
    _word(out, n)
    for j in range(n):
        _word(out, tape[s + j])


@njit(cache=True, nogil=True)
def _put_state_list(out, tape, ps, p, which):
    _put_list(out, tape, ps[p, P_LISTS + 2 * which], ps[p, P_LISTS + 2 * which + 1])


@njit(**_SMALL)
def _name_now(ts, t):
    return ts[t, T_NAME] if ts[t, T_LIVE] == 1 else -1


# ------------------------------------------------------------------------------------------ image queries
@njit(**_SMALL)
def _broker_index(broker_ids, x):
    j = np.searchsorted(broker_ids, x)
    if j < len(broker_ids) and broker_ids[j] == x:
        return j
    return -1


@njit(**_SMALL)
def _row_active(bs, b):
    """``brokers.rule`` (the one definition of an active broker) read off row ``b`` of the broker states; -1, no row:
    not registered."""
    if b < 0:
        return False
    return _active_rule(bs[b, B_REG] == 1, bs[b, B_FENCED] == 1, bs[b, B_CS] == 1)


@njit(**_SMALL)
def _broker_state(bs, b):
    """0 not registered, 1 fenced, 2 in controlled shutdown (for a broker that is not active)."""
    if b < 0 or bs[b, B_REG] == 0:
        return 0
    return 1 if bs[b, B_FENCED] == 1 else 2


@njit(**_SMALL)
def _elr_enabled(g):
    """§1.8, as Cluster.elr_enabled."""
    if g[G_MV] < MV_4_0_IV1:
        return False
    if g[G_ELRF_PRESENT] == 1:
        return g[G_ELRF_LEVEL] >= 1
    if g[G_OVERRIDE] >= 0:
        return g[G_OVERRIDE] == 1
    return g[G_EVIDENCE] == 1


@njit(**_SMALL)
def _elr_flag(g):
    """(ELR in effect?, severity of an ELR-only state if not), as InvariantChecker._elr_flag."""
    if g[G_MV] < MV_4_0_IV1:
        return False, S_ERROR
    if g[G_ELRF_PRESENT] == 1:
        return (True, S_DEFAULT) if g[G_ELRF_LEVEL] >= 1 else (False, S_ERROR)
    if g[G_OVERRIDE] >= 0:
        return (True, S_DEFAULT) if g[G_OVERRIDE] == 1 else (False, S_ERROR)
    return (True, S_DEFAULT) if g[G_EVIDENCE] == 1 else (False, S_WARN)


@njit(cache=True, nogil=True)
def _config(tcfg, bcfg, g, name, absent):
    """§1.7 resolution of one key: the topic, the active controller's node, the cluster default."""
    if name >= 0 and tcfg[name] != absent:
        return tcfg[name]
    slot = g[G_CTRL_SLOT]
    if slot >= 0 and bcfg[slot] != absent:
        return bcfg[slot]
    if g[G_DEFAULT_SLOT] >= 0 and bcfg[g[G_DEFAULT_SLOT]] != absent:
        return bcfg[g[G_DEFAULT_SLOT]]
    return absent


@njit(cache=True, nogil=True)
def _min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t):
    """Cluster.min_isr: the resolved min.insync.replicas (1 if none) capped by partition 0's replicas."""
    m = _config(tcfg_min, bcfg_min, g, _name_now(ts, t), MISSING)
    if m == MISSING:
        m = 1
    p0 = topic_p0[t]
    if p0 < 0 or ps[p0, P_LIVE] == 0:
        return m
    return min(m, _distinct_assigned(tape, ps, p0))


@njit(cache=True, nogil=True)
def _min_isr_known(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t):
    if _config(tcfg_min, bcfg_min, g, _name_now(ts, t), MISSING) != MISSING:
        return True
    p0 = topic_p0[t]
    return p0 >= 0 and ps[p0, P_LIVE] == 1 and _distinct_assigned(tape, ps, p0) <= 1


@njit(**_SMALL)
def _unclean(tape, rl, ri_s, ri_n, rlrs, bi_s, bi_n, be_s, be_n):
    """§2.6-5 is_unclean_election on the record's leader / isr / LRS and the previous ISR and ELR."""
    if rl < 0 or not _is_only(tape, ri_s, ri_n, rl):
        return False
    if _has(tape, bi_s, bi_n, rl):
        return False
    if _has(tape, be_s, be_n, rl) and rlrs != RECOVERING:
        return False
    return True


@njit(cache=True, nogil=True)
def _still_in_isr(tape, ps, p, x, elr_on):
    """The fence / controlled-shutdown rule's offender test for broker id x on partition p."""
    if ps[p, P_LIVE] == 0:
        return False
    s, n = ps[p, P_LISTS + 2 * LI], ps[p, P_LISTS + 2 * LI + 1]
    if not _has(tape, s, n, x):
        return False
    return elr_on or not (n == 1 and ps[p, P_LEADER] == NO_LEADER)


# ------------------------------------------------------------------------------------------ record-level rules
@njit(**_SMALL)
def _ls(a, k):
    """(start, length) of list k of a state row."""
    return a[P_LISTS + 2 * k], a[P_LISTS + 2 * k + 1]


@njit(cache=True, nogil=True)
def _put(out, tape, a, k):
    s, n = _ls(a, k)
    _put_list(out, tape, s, n)


@njit(**_PER_RECORD)
def _check_state(out, tape, g, a, w, ndirs, row, p, nm):
    """Structural rules on the state ``a`` a partition record leaves, for the fields it wrote
    (InvariantChecker._check_state, in its order): assignment, directories, ISR, leader here, then ELR state."""
    rs, rn = _ls(a, LR)
    i_s, i_n = _ls(a, LI)
    ms, mn = _ls(a, LRM)
    ds, dn = _ls(a, LAD)
    L = a[P_LEADER]
    if w & (W_REPLICAS | W_REMOVING | W_ADDING):
        if (_has_dups(tape, rs, rn) or _any_negative(tape, rs, rn) or not _subset(tape, ms, mn, rs, rn)
                or not _subset(tape, ds, dn, rs, rn) or _meets(tape, ms, mn, ds, dn)):
            at = _open(out, REPLICAS_DISTINCT, S_DEFAULT, row, p, nm)
            _put(out, tape, a, LR)
            _put(out, tape, a, LRM)
            _put(out, tape, a, LAD)
            _close(out, at)
    if w & W_DIRS and ndirs > 0 and ndirs != rn:
        at = _open(out, DIRS_LENGTH, S_DEFAULT, row, p, nm)
        _word(out, ndirs)
        _word(out, rn)
        _close(out, at)
    if w & (W_ISR | W_REPLICAS):
        if _has_dups(tape, i_s, i_n) or _any_negative(tape, i_s, i_n) or not _subset(tape, i_s, i_n, rs, rn):
            at = _open(out, ISR_SUBSET, S_DEFAULT, row, p, nm)
            _put(out, tape, a, LI)
            _put(out, tape, a, LR)
            _close(out, at)
    if w & (W_LEADER | W_ISR) and L != NO_LEADER and not _has(tape, i_s, i_n, L):
        at = _open(out, LEADER_IN_ISR, S_DEFAULT, row, p, nm)
        _word(out, L)
        _put(out, tape, a, LI)
        _close(out, at)
    if w & (W_LEADER | W_REPLICAS) and L != NO_LEADER and not _has(tape, rs, rn, L):
        at = _open(out, LEADER_IN_REPLICAS, S_DEFAULT, row, p, nm)
        _word(out, L)
        _put(out, tape, a, LR)
        _close(out, at)
    _check_elr_state(out, tape, g, a, w, row, p, nm)


@njit(**_PER_RECORD)
def _check_elr_state(out, tape, g, a, w, row, p, nm):
    """ELR, LastKnownElr and leader recovery on the state ``a`` a partition record leaves."""
    rs, rn = _ls(a, LR)
    i_s, i_n = _ls(a, LI)
    es, en = _ls(a, LE)
    ks, kn = _ls(a, LK)
    L = a[P_LEADER]
    if w & (W_ELR | W_ISR) and _meets(tape, es, en, i_s, i_n):
        at = _open(out, ELR_DISJOINT, S_DEFAULT, row, p, nm)
        _put(out, tape, a, LI)
        _put(out, tape, a, LE)
        _close(out, at)
    if (w & W_ELR and en > 0) or (w & W_LKE and kn > 0):
        on, sev = _elr_flag(g)
        if not on:
            at = _open(out, ELR_DISABLED_EMPTY, sev, row, p, nm)
            _put(out, tape, a, LE)
            _put(out, tape, a, LK)
            _word(out, g[G_MV])
            _word(out, g[G_ELRF_PRESENT])
            _word(out, g[G_ELRF_LEVEL])
            _word(out, g[G_OVERRIDE])
            _close(out, at)
    if w & W_ISR and i_n == 0:
        on, sev = _elr_flag(g)
        if not on:
            at = _open(out, ISR_EMPTY_NEEDS_ELR, sev, row, p, nm)
            _put(out, tape, a, LI)
            _close(out, at)
    if w & (W_ELR | W_REPLICAS) and not _subset(tape, es, en, rs, rn):
        at = _open(out, ELR_SUBSET, S_DEFAULT, row, p, nm)
        _put(out, tape, a, LE)
        _put(out, tape, a, LR)
        _close(out, at)
    if w & W_LKE:
        if kn > 1:
            at = _open(out, LKE_SINGLETON, S_DEFAULT, row, p, nm)
            _put(out, tape, a, LK)
            _close(out, at)
        if _any_negative(tape, ks, kn):
            at = _open(out, LKE_NEGATIVE, S_DEFAULT, row, p, nm)
            _put(out, tape, a, LK)
            _close(out, at)
    if w & (W_LKE | W_LEADER) and kn > 0 and L != NO_LEADER:
        at = _open(out, LKE_LEADERLESS, S_DEFAULT, row, p, nm)
        _put(out, tape, a, LK)
        _word(out, L)
        _close(out, at)
    if (a[P_LRS] == RECOVERING and w & (W_LRS | W_ISR | W_LEADER)
            and (i_n > 1 or (L != NO_LEADER and not _is_only(tape, i_s, i_n, L)))):
        at = _open(out, LRS_SINGLE_ISR, S_DEFAULT, row, p, nm)
        _word(out, L)
        _put(out, tape, a, LI)
        _close(out, at)


@njit(**_PER_RECORD)
def _check_change(out, tape, g, b, a, w, rl, ri_s, ri_n, rlrs, row, p, nm):
    """Rules on the transition a PartitionChangeRecord makes from state ``b`` to ``a``."""
    mv = g[G_MV]
    brs, brn = _ls(b, LR)
    ars, arn = _ls(a, LR)
    bis, bin_ = _ls(b, LI)
    ais, ain = _ls(a, LI)
    bL = b[P_LEADER]
    lost_replicas = (w & W_REPLICAS) != 0 and not _subset(tape, brs, brn, ars, arn)
    lost_isr = (w & W_ISR) != 0 and not _subset(tape, bis, bin_, ais, ain)
    if lost_replicas and not w & W_LEADER:
        at = _open(out, BUMP_REPLICA_LOSS, S_DEFAULT, row, p, nm)
        _put(out, tape, b, LR)
        _put(out, tape, a, LR)
        _word(out, bL)
        _close(out, at)
    if mv < MV_3_6_IV0 and lost_isr and not w & W_LEADER:
        at = _open(out, BUMP_SHRINK, S_DEFAULT, row, p, nm)
        _put(out, tape, b, LI)
        _put(out, tape, a, LI)
        _word(out, bL)
        _close(out, at)
    if w & W_LEADER and rl == bL:
        b8 = mv < MV_3_6_IV0 and (lost_isr or (not w & W_ISR and bL == NO_LEADER))
        if not lost_replicas and not b8:
            at = _open(out, SPURIOUS_BUMP, S_DEFAULT, row, p, nm)
            _word(out, rl)
            _word(out, 1 if mv < MV_3_6_IV0 else 0)
            _close(out, at)
    if b[P_LRS] == RECOVERED and a[P_LRS] == RECOVERING:
        bes, ben = _ls(b, LE)
        if not _unclean(tape, rl, ri_s, ri_n, rlrs, bis, bin_, bes, ben):
            at = _open(out, LRS_ENTRY, S_DEFAULT, row, p, nm)
            _word(out, 1)
            _close(out, at)
        elif g[G_MV_PRESENT] == 1 and mv < MV_3_2_IV0:
            at = _open(out, LRS_ENTRY, S_DEFAULT, row, p, nm)
            _word(out, 2)
            _word(out, mv)
            _close(out, at)
    if w & W_LRS and rlrs == RECOVERED:
        completes = (b[P_LISTS + 2 * LRM + 1] > 0 or b[P_LISTS + 2 * LAD + 1] > 0) and \
            a[P_LISTS + 2 * LRM + 1] == 0 and a[P_LISTS + 2 * LAD + 1] == 0
        if bL == NO_LEADER:
            at = _open(out, LRS_EXIT, S_DEFAULT, row, p, nm)
            _word(out, 0)
            _word(out, bL)
            _close(out, at)
        elif w & W_LEADER and rl != bL and not completes:
            at = _open(out, LRS_EXIT, S_DEFAULT, row, p, nm)
            _word(out, 1)
            _word(out, rl)
            _word(out, bL)
            _close(out, at)


@njit(**_SMALL)
def _newly_inactive(tape, bs, broker_ids, b, a, has_before, rl, x):
    """Whether ISR member x of ``a`` joins the ISR while inactive (INV-ISR-EXPAND-ACTIVE's filter)."""
    if has_before:
        bis, bin_ = _ls(b, LI)
        if _has(tape, bis, bin_, x):
            return False
        if rl >= 0 and rl != b[P_LEADER] and x == rl:  # a leader chosen by an election
            return False
        ars, arn = _ls(a, LR)
        ais, ain = _ls(a, LI)
        # §2.7-4: a reassignment cancel whose reverted ISR is empty takes [R[0]]
        if (b[P_LISTS + 2 * LAD + 1] > 0 and a[P_LISTS + 2 * LAD + 1] == 0 and arn > 0
                and _is_only(tape, ais, ain, tape[ars]) and x == tape[ars]):
            return False
    return not _row_active(bs, _broker_index(broker_ids, x))


@njit(**_PER_RECORD)
def _check_isr_expand(out, tape, g, bs, broker_ids, b, a, has_before, rl, row, p, nm):
    ais, ain = _ls(a, LI)
    if has_before and ais == b[P_LISTS + 2 * LI] and ain == b[P_LISTS + 2 * LI + 1]:
        return  # the ISR before, unchanged (the same list on the tape): every member was in it, none joins
    count = 0
    for j in range(ain):
        if _newly_inactive(tape, bs, broker_ids, b, a, has_before, rl, tape[ais + j]):
            count += 1
    if count == 0:
        return
    at = _open(out, ISR_EXPAND, S_ERROR if g[G_MV_PRESENT] == 1 else S_INFO, row, p, nm)
    _word(out, count)
    for j in range(ain):
        x = tape[ais + j]
        if _newly_inactive(tape, bs, broker_ids, b, a, has_before, rl, x):
            _word(out, x)
            _word(out, _broker_state(bs, _broker_index(broker_ids, x)))
    _close(out, at)


@njit(**_PER_RECORD)
def _check_election(out, tape, ps, ts, g, bs, broker_ids, tcfg_unc, bcfg_unc, unclean_true, b, rl, ri_s, ri_n,
                    rlrs, t, row, p, nm):
    """INV-UNCLEAN-ELECTION, INV-UNCLEAN-CONFIG, INV-LEADER-ACTIVE for a record electing a new leader."""
    bL = b[P_LEADER]
    if rl < 0 or rl == bL:
        return
    bis, bin_ = _ls(b, LI)
    bes, ben = _ls(b, LE)
    if _unclean(tape, rl, ri_s, ri_n, rlrs, bis, bin_, bes, ben):
        at = _open(out, UNCLEAN_ELECTION, S_DEFAULT, row, p, nm)
        _word(out, rl)
        _word(out, bL)
        _put(out, tape, b, LI)
        _put(out, tape, b, LE)
        _put(out, tape, b, LK)
        _close(out, at)
        v = _config(tcfg_unc, bcfg_unc, g, _name_now(ts, t), -1)
        if v < 0 or not unclean_true[v]:
            at = _open(out, UNCLEAN_CONFIG, S_DEFAULT, row, p, nm)
            _word(out, v)
            _close(out, at)
    x = _broker_index(broker_ids, rl)
    if not _row_active(bs, x):
        at = _open(out, LEADER_ACTIVE, S_DEFAULT, row, p, nm)
        _word(out, rl)
        _word(out, _broker_state(bs, x))
        _close(out, at)


@njit(cache=True, nogil=True)
def _epoch_match(out, bs, bints, broker, i):
    x = broker[i]
    if x < 0 or bs[x, B_REG] == 0:
        at = _open(out, BROKER_EPOCH, S_DEFAULT, i, -1, NO_KEY)
        _word(out, 0)
        _word(out, bints[i, 0])
        _word(out, bints[i, 1])
        _close(out, at)
    elif bs[x, B_EPOCH] != bints[i, 1]:
        at = _open(out, BROKER_EPOCH, S_DEFAULT, i, -1, NO_KEY)
        _word(out, 1)
        _word(out, bints[i, 0])
        _word(out, bints[i, 1])
        _word(out, bs[x, B_EPOCH])
        _close(out, at)


# ------------------------------------------------------------------------------------------ the batch's touches
@njit(cache=True, nogil=True)
def _grow(arr, need):
    bigger = np.empty((max(arr.shape[0] * 2, need), arr.shape[1]), arr.dtype)
    bigger[:arr.shape[0]] = arr
    return bigger


@njit(**_PER_RECORD)
def _set_touch(tch, nt, p, row, has_b, b, a, rl, ri_s, ri_n, rlrs):
    tch[nt, X_PART] = p
    tch[nt, X_ROW] = row
    tch[nt, X_HASB] = 1 if has_b else 0
    tch[nt, X_BL] = b[P_LEADER]
    for k, at in ((LI, X_BI_S), (LE, X_BE_S), (LK, X_BK_S)):
        tch[nt, at] = b[P_LISTS + 2 * k]
        tch[nt, at + 1] = b[P_LISTS + 2 * k + 1]
    for k, at in ((LI, X_AI_S), (LE, X_AE_S)):
        tch[nt, at] = a[P_LISTS + 2 * k]
        tch[nt, at + 1] = a[P_LISTS + 2 * k + 1]
    tch[nt, X_RL] = rl
    tch[nt, X_RI_S] = ri_s
    tch[nt, X_RI_N] = ri_n
    tch[nt, X_RLRS] = rlrs


@njit(cache=True, nogil=True)
def _elected_last_known_leader(tape, tch, j, x):
    """§2.3 step 3 in touch j: broker id x elected as the single LastKnownElr member (unclean)."""
    rl = tch[j, X_RL]
    return (tch[j, X_HASB] == 1 and rl == x and rl >= 0 and rl != tch[j, X_BL]
            and _is_only(tape, tch[j, X_BK_S], tch[j, X_BK_N], rl) and _is_only(tape, tch[j, X_RI_S], tch[j, X_RI_N], rl))


@njit(cache=True, nogil=True)
def _elected_from_elr(tape, tch, j):
    """B4 with the winner taken from ELR in touch j: it becomes the sole ISR member."""
    rl = tch[j, X_RL]
    return (tch[j, X_HASB] == 1 and rl >= 0 and rl != tch[j, X_BL] and _has(tape, tch[j, X_BE_S], tch[j, X_BE_N], rl)
            and _is_only(tape, tch[j, X_RI_S], tch[j, X_RI_N], rl) and tch[j, X_RLRS] != RECOVERING)


@njit(cache=True, nogil=True)
def _mark_last_known_leader(tape, ps, tch, nt, x, stamp):
    """Stamp P_MARK of the partitions whose records in this batch elected x as last known leader."""
    for j in range(nt):
        if _elected_last_known_leader(tape, tch, j, x):
            ps[tch[j, X_PART], P_MARK] = stamp


@njit(cache=True, nogil=True)
def _member_breach(out, tape, ps, ts, part_topic, rule, row, p, x, first, second):
    """A broker x still in partition p's ISR / ELR: payload x, the rule's two membership flags, ISR, ELR."""
    at = _open(out, rule, S_DEFAULT, row, p, _name_now(ts, part_topic[p]))
    _word(out, x)
    _word(out, 1 if first else 0)
    _word(out, 1 if second else 0)
    _put_state_list(out, tape, ps, p, LI)
    _put_state_list(out, tape, ps, p, LE)
    _close(out, at)


@njit(cache=True, nogil=True)
def _register_unclean_batch(out, tape, ps, ts, g, tch, nt, part_topic, x, row, stamp, clean):
    """INV-REGISTER-UNCLEAN-BATCH: a new incarnation registering while still in an ISR / ELR (in an ELR only if
    not ``clean``: a 4.1+ controller keeps it there after a clean shutdown, rules/invariants._clean_restart)."""
    elr_on = _elr_enabled(g)
    _mark_last_known_leader(tape, ps, tch, nt, x, stamp)
    for p in range(ps.shape[0]):
        if ps[p, P_LIVE] == 0:
            continue
        i_s, i_n = ps[p, P_LISTS + 2 * LI], ps[p, P_LISTS + 2 * LI + 1]
        in_isr = (_has(tape, i_s, i_n, x) and ps[p, P_MARK] != stamp
                  and not (not elr_on and i_n == 1 and ps[p, P_LEADER] == NO_LEADER))
        in_elr = not clean and _has(tape, ps[p, P_LISTS + 2 * LE], ps[p, P_LISTS + 2 * LE + 1], x)
        if in_isr or in_elr:
            _member_breach(out, tape, ps, ts, part_topic, REGISTER_UNCLEAN, row, p, x, in_isr, in_elr)


# ------------------------------------------------------------------------------------------ after a batch
@njit(cache=True, nogil=True)
def _fence_breach(out, tape, ps, ts, g, part_topic, p, x, row, kind):
    at = _open(out, FENCE_REMOVES_ISR, S_DEFAULT, row, p, _name_now(ts, part_topic[p]))
    _word(out, x)
    _word(out, ps[p, P_LEADER])
    _word(out, kind)
    _word(out, 1 if _elr_enabled(g) else 0)
    _put_state_list(out, tape, ps, p, LI)
    _close(out, at)


@njit(cache=True, inline="always")
def _m_note(m):
    """m as P_M_AT keeps it: within int32 above M_UNSET (a min.insync.replicas beyond that is no int config of
    Kafka's; clamped alike on both sides of every comparison)."""
    return min(max(m, M_UNSET + 1), I32_MAX)


@njit(cache=True, nogil=True)
def _closing_min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t, batch_no):
    """m of topic t while batch ``batch_no`` is closed (the image does not change then): computed once
    per topic, not once per partition -- a min ISR config re-evaluates every partition, and each batch's end
    reads m for every partition it wrote (resolving the config and counting partition 0's replicas for each of
    them was a quarter of the pass)."""
    if ts[t, T_M_STAMP] != batch_no:
        ts[t, T_M] = _min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t)
        ts[t, T_M_STAMP] = batch_no
    return ts[t, T_M]


@njit(cache=True, nogil=True)
def _check_windows(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, p, row, batch_no, eval_m):
    """INV-UNDER-MINISR / INV-OFFLINE-NO-CANDIDATE for partition p, reported (at ``row``) when it enters
    the state.  ``eval_m[p]``: the m of this check (a later re-evaluation with the same m can skip p)."""
    t = part_topic[p]
    m = _closing_min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t, batch_no)
    eval_m[p] = m
    i_n = ps[p, P_LISTS + 2 * LI + 1]
    if i_n < m:
        if ps[p, P_UNDER] == 0:
            ps[p, P_UNDER] = 1
            at = _open(out, UNDER_MINISR, S_DEFAULT, row, p, _name_now(ts, t))
            _put_state_list(out, tape, ps, p, LI)
            _word(out, m)
            _close(out, at)
    else:
        ps[p, P_UNDER] = 0
    if ps[p, P_LEADER] == NO_LEADER and i_n == 0 and ps[p, P_LISTS + 2 * LE + 1] == 0:
        if ps[p, P_OFFLINE] == 0:
            ps[p, P_OFFLINE] = 1
            at = _open(out, OFFLINE, S_DEFAULT, row, p, _name_now(ts, t))
            _word(out, ps[p, P_LEADER])
            _put_state_list(out, tape, ps, p, LI)
            _put_state_list(out, tape, ps, p, LE)
            _close(out, at)
    else:
        ps[p, P_OFFLINE] = 0


@njit(cache=True, nogil=True)
def _check_elr_below_min_isr(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, tch, tkeys, ntk,
                             batch_no):
    if not _elr_enabled(g):
        return  # a non-empty ELR is then INV-ELR-DISABLED-EMPTY's business
    for q in range(ntk):
        p = tkeys[q]
        if ps[p, P_LIVE] == 0 or ps[p, P_LISTS + 2 * LE + 1] == 0:
            continue
        t = part_topic[p]
        m = _closing_min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t, batch_no)
        i_n = ps[p, P_LISTS + 2 * LI + 1]
        if i_n < m:
            continue
        last = ps[p, P_LAST_T]
        # B4 then B6: a winner from ELR becomes the sole ISR member and the other ELR members stay
        if _elected_from_elr(tape, tch, last) and i_n == 1:
            continue
        prev = ps[p, P_M_AT]
        stale = (prev != M_UNSET and prev != _m_note(m)) or ts[t, T_MB] != m
        known = _min_isr_known(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t)
        at = _open(out, ELR_BELOW_MINISR, S_WARN if stale or not known else S_ERROR, tch[last, X_ROW], p,
                   _name_now(ts, t))
        _put_state_list(out, tape, ps, p, LE)
        _put_state_list(out, tape, ps, p, LI)
        _word(out, m)
        _word(out, 1 if stale else 0)
        _word(out, 1 if known else 0)
        _close(out, at)


@njit(cache=True, nogil=True)
def _pop_pending(bs, x):
    """(row, pool start, range length, partitions left) of broker x's pending controlled shutdown, now taken off;
    row -1: none."""
    row = bs[x, B_PEND_ROW]
    bs[x, B_PEND_ROW] = -1
    return row, bs[x, B_PEND_AT], bs[x, B_PEND_LEN], bs[x, B_PEND_LEFT]


# A pending controlled shutdown of broker row x keeps its partitions -- those whose ISR still held x at the last
# batch's end -- in its range of the pool.  Checking the whole range again at every batch's end was quadratic: a
# shutdown pending over a few hundred batches re-read ~60 k partitions each time (0.12 s of the pass's 0.17 s on a
# 1.44 M-record group of the 1 M-partition fleet).  Only a partition a batch writes or deletes can leave the ISR (the
# offender test also reads whether ELR is in effect: when that flips, the range is checked whole), so for rows below
# 63 each partition of a range carries bit x in ``pending``, cleared when it leaves; the range is read again only to
# report what is left.  Rows from 63 on keep the whole check, the range compacted as before.
@njit(cache=True, nogil=True)
def _pending_bit(x):
    return np.int64(1) << x if x < 63 else np.int64(0)


@njit(cache=True, nogil=True)
def _drop_pending(pending, pool, at, n, bit):
    for q in range(at, at + n):
        pending[pool[q]] &= ~bit


@njit(cache=True, nogil=True)
def _left_in_range(tape, ps, pool, pending, at, n, bid, bit, elr_on):
    """The whole check: the partitions of the range still holding broker ``bid`` (with a bit: those whose bit is
    still set and that hold it; without: the range compacted to its front).  Returns how many."""
    left = 0
    for q in range(at, at + n):
        p = pool[q]
        if bit == 0:
            if _still_in_isr(tape, ps, p, bid, elr_on):
                pool[at + left] = p
                left += 1
        elif pending[p] & bit:
            if _still_in_isr(tape, ps, p, bid, elr_on):
                left += 1
            else:
                pending[p] &= ~bit
    return left


@njit(cache=True, nogil=True)
def _left_after_writes(tape, ps, pending, tkeys, ntk, deleted, bid, bit, elr_on, left):
    """``left`` less the partitions of x's range that this batch wrote or deleted and that no longer hold ``bid``."""
    for q in range(ntk + len(deleted)):
        p = tkeys[q] if q < ntk else deleted[q - ntk]
        if pending[p] & bit and not _still_in_isr(tape, ps, p, bid, elr_on):
            pending[p] &= ~bit
            left -= 1
    return left


@njit(cache=True, nogil=True)
def _check_fences(out, tape, ps, ts, g, bs, broker_ids, part_topic, tch, nt, tkeys, ntk, deleted, fences, pool,
                  pending, batch_no):
    """INV-FENCE-REMOVES-ISR (InvariantChecker._check_fences): pending controlled shutdowns first, then
    this batch's fences and controlled shutdowns, the last one of each broker winning."""
    elr_on = _elr_enabled(g)
    rescan = g[G_POOL_ELR] != (1 if elr_on else 0)  # the offender test moved for partitions no record wrote
    g[G_POOL_ELR] = 1 if elr_on else 0
    still_pending = False
    for x in range(bs.shape[0]):
        row, at, n, left = _pop_pending(bs, x)
        if row < 0:
            continue
        bit = _pending_bit(x)
        fenced_now = False
        for f in range(0, len(fences), 3):
            if fences[f] == x:
                fenced_now = True
        if bs[x, B_REG] == 0 or _row_active(bs, x) or fenced_now:
            _drop_pending(pending, pool, at, n, bit)
            continue
        bid = broker_ids[x]
        progress = False
        for j in range(nt):
            if (tch[j, X_HASB] == 1 and _has(tape, tch[j, X_BI_S], tch[j, X_BI_N], bid)
                    and not _has(tape, tch[j, X_AI_S], tch[j, X_AI_N], bid)):
                progress = True
                break
        if bit == 0 or rescan:
            left = _left_in_range(tape, ps, pool, pending, at, n, bid, bit, elr_on)
            if bit == 0:
                n = left
        else:
            left = _left_after_writes(tape, ps, pending, tkeys, ntk, deleted, bid, bit, elr_on, left)
        if left and progress:  # still pending
            bs[x, B_PEND_ROW], bs[x, B_PEND_AT], bs[x, B_PEND_LEN], bs[x, B_PEND_LEFT] = row, at, n, left
            still_pending = True
        else:
            for q in range(at, at + n):
                p = pool[q]
                if bit == 0 or pending[p] & bit:
                    _fence_breach(out, tape, ps, ts, g, part_topic, p, bid, row, 1)
            _drop_pending(pending, pool, at, n, bit)
    if not still_pending:  # no range of the pool is anyone's any more: it starts again empty
        pool.clear()
    for f in range(len(fences) - 3, -1, -3):  # a fence supersedes a controlled shutdown before it
        x, row, kind = fences[f], fences[f + 1], fences[f + 2]
        if x < 0 or bs[x, B_DONE] == batch_no or bs[x, B_REG] == 0 or _row_active(bs, x):
            continue
        bs[x, B_DONE] = batch_no
        bid = broker_ids[x]
        if kind == 0:
            for p in range(ps.shape[0]):
                if _still_in_isr(tape, ps, p, bid, elr_on):
                    _fence_breach(out, tape, ps, ts, g, part_topic, p, bid, row, 0)
        else:
            start, bit = len(pool), _pending_bit(x)
            for p in range(ps.shape[0]):
                if _still_in_isr(tape, ps, p, bid, elr_on):
                    pool.append(p)
                    pending[p] |= bit
            if len(pool) > start:
                bs[x, B_PEND_ROW], bs[x, B_PEND_AT] = row, start
                bs[x, B_PEND_LEN] = bs[x, B_PEND_LEFT] = len(pool) - start


@njit(cache=True, nogil=True)
def _check_unclean_shutdowns(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, broker_ids, tch, nt,
                             regs, offsets, stamp, batch_no):
    """INV-ELR-UNCLEAN-REMOVED: after a batch that handled an unclean shutdown of B, B is in no ELR and no
    ISR (except as a last known leader elected by that batch).  Returns the next free mark stamp."""
    if len(regs) == 0 or not _elr_enabled(g):
        return stamp
    for r in range(0, len(regs), 2):
        x, reg_row = regs[r], regs[r + 1]
        bid = broker_ids[x]
        unclean = False
        for j in range(nt):
            if tch[j, X_HASB] == 0 or offsets[tch[j, X_ROW]] > offsets[reg_row]:
                continue
            if (_has(tape, tch[j, X_BE_S], tch[j, X_BE_N], bid)
                    and not _has(tape, tch[j, X_AE_S], tch[j, X_AE_N], bid)):
                unclean = True
            elif (_has(tape, tch[j, X_BI_S], tch[j, X_BI_N], bid)
                  and not _has(tape, tch[j, X_AI_S], tch[j, X_AI_N], bid)
                  and not _has(tape, tch[j, X_AE_S], tch[j, X_AE_N], bid)
                  and tch[j, X_AI_N] < _closing_min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0,
                                                        part_topic[tch[j, X_PART]], batch_no)):
                unclean = True
        if not unclean:
            continue
        stamp += 1
        _mark_last_known_leader(tape, ps, tch, nt, bid, stamp)
        for p in range(ps.shape[0]):
            if ps[p, P_LIVE] == 0:
                continue
            in_elr = _has(tape, ps[p, P_LISTS + 2 * LE], ps[p, P_LISTS + 2 * LE + 1], bid)
            in_isr = (_has(tape, ps[p, P_LISTS + 2 * LI], ps[p, P_LISTS + 2 * LI + 1], bid)
                      and ps[p, P_MARK] != stamp)
            if in_elr or in_isr:
                _member_breach(out, tape, ps, ts, part_topic, ELR_UNCLEAN_REMOVED, reg_row, p, bid, in_elr, in_isr)
    return stamp


@njit(cache=True, nogil=True)
def _recheck_m(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, p, reeval_row, batch_no, eval_m):
    """Partition p, which the batch did not write, checked again if its m moved.  Its ISR, leader and ELR are
    those of its last check: with the same m that check stands.  eval_m is a compact array so that a sweep
    stays cheap; the partition's own row is read only when m moved."""
    t = part_topic[p]
    m = ts[t, T_M] if ts[t, T_M_STAMP] == batch_no else _closing_min_isr(
        tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t, batch_no)
    if m == eval_m[p] or ps[p, P_LIVE] == 0 or ps[p, P_TSTAMP] == batch_no:
        return
    _check_windows(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, p, reeval_row, batch_no, eval_m)


@njit(cache=True, nogil=True)
def _after_batch(out, tape, ps, ts, g, bs, broker_ids, tcfg_min, bcfg_min, topic_p0, part_topic, tch, nt, tkeys,
                 ntk, fences, regs, deleted, pool, offsets, batch_no, reeval_row, stamp, eval_m, sweep_all, rtop, nrt,
                 topic_parts, topic_parts_at, pending):
    """The batch-level rules, in InvariantChecker.after_batch's order.  Returns the next mark stamp."""
    _check_elr_below_min_isr(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, tch, tkeys, ntk,
                             batch_no)
    # P_M_AT (the m a partition was last checked with) is read above only: each partition the batch wrote or
    # deleted takes its new value in the loops below (one pass over them each, not two)
    for q in range(len(deleted)):
        p = deleted[q]
        if ps[p, P_LIVE] == 0:
            ps[p, P_UNDER] = 0
            ps[p, P_OFFLINE] = 0
            ps[p, P_M_AT] = M_UNSET
    for q in range(ntk):
        p = tkeys[q]
        if ps[p, P_LIVE] == 1:
            # most partitions a batch writes neither enter nor leave a window: only the m of this check is noted,
            # here (a call per partition, its arrays passed by value, cost more than the check)
            t = part_topic[p]
            m = ts[t, T_M] if ts[t, T_M_STAMP] == batch_no else _closing_min_isr(
                tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t, batch_no)
            ps[p, P_M_AT] = _m_note(m)
            i_n = ps[p, P_LISTS + 2 * LI + 1]
            offline = ps[p, P_LEADER] == NO_LEADER and i_n == 0 and ps[p, P_LISTS + 2 * LE + 1] == 0
            if (i_n < m) == (ps[p, P_UNDER] == 1) and offline == (ps[p, P_OFFLINE] == 1):
                eval_m[p] = m
            else:
                _check_windows(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, p,
                               tch[ps[p, P_LAST_T], X_ROW], batch_no, eval_m)
    if reeval_row >= 0:  # m may have changed for partitions the batch did not write
        if sweep_all:
            for p in range(len(eval_m)):
                _recheck_m(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, p, reeval_row, batch_no,
                           eval_m)
        else:  # the listed topics' partitions, in the order a sweep of all meets them (ascending index)
            listed = rtop[:nrt]
            listed.sort()
            for t in listed:
                for j in range(topic_parts_at[t], topic_parts_at[t + 1]):
                    _recheck_m(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, topic_parts[j],
                               reeval_row, batch_no, eval_m)
    _check_fences(out, tape, ps, ts, g, bs, broker_ids, part_topic, tch, nt, tkeys, ntk, deleted, fences, pool,
                  pending, batch_no)
    return _check_unclean_shutdowns(out, tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, part_topic, broker_ids, tch,
                                    nt, regs, offsets, stamp, batch_no)


@njit(cache=True, nogil=True)
def _finish(out, tape, ps, ts, g, bs, broker_ids, part_topic, pool, pending):
    """Controlled shutdowns still waiting for more batches when the log ends."""
    elr_on = _elr_enabled(g)
    for x in range(bs.shape[0]):
        row, at, n, _left = _pop_pending(bs, x)
        if row < 0:
            continue
        bit = _pending_bit(x)
        if bs[x, B_REG] == 1 and not _row_active(bs, x):
            for q in range(at, at + n):
                if (bit == 0 or pending[pool[q]] & bit) and _still_in_isr(tape, ps, pool[q], broker_ids[x], elr_on):
                    _fence_breach(out, tape, ps, ts, g, part_topic, pool[q], broker_ids[x], row, 1)


@njit(cache=True, nogil=True)
def _record_state(a, ints, lists, i):
    """The state a PartitionRecord writes (absent lists are empty)."""
    a[P_LIVE] = 1
    a[P_LEADER] = ints[i, 0]
    a[P_LE] = ints[i, 1]
    a[P_PE] = ints[i, 2]
    a[P_LRS] = ints[i, 3]
    for k in range(6):
        a[P_LISTS + 2 * k] = lists[i, 2 * k]
        a[P_LISTS + 2 * k + 1] = max(lists[i, 2 * k + 1], 0)


@njit(**_PER_RECORD)
def _merged_state(a, b, ints, lists, i):
    """§1.3 merge: the state after a PartitionChangeRecord; returns the written-field bits."""
    for f in range(P_STATE):
        a[f] = b[f]
    w = 0
    bits = (W_REPLICAS, W_ISR, W_REMOVING, W_ADDING, W_ELR, W_LKE)
    for k in range(6):
        if lists[i, 2 * k + 1] >= 0:
            a[P_LISTS + 2 * k] = lists[i, 2 * k]
            a[P_LISTS + 2 * k + 1] = lists[i, 2 * k + 1]
            w |= bits[k]
    if ints[i, 0] != LEADER_UNCHANGED:
        a[P_LEADER] = ints[i, 0]
        a[P_LE] = b[P_LE] + 1
        w |= W_LEADER
    if ints[i, 3] != -1:
        a[P_LRS] = ints[i, 3]
        w |= W_LRS
    if ints[i, 4] >= 0:
        w |= W_DIRS
    a[P_PE] = b[P_PE] + 1
    return w


# ------------------------------------------------------------------------------------------ the pass
# The pass's state travels in four bundles so the handlers below stay readable:
#   inp  the layout (read only):  kind, batch, snapshot, topic, part, name, ints, lists, tape, broker, bints,
#        cfg, offsets, part_topic, part_id, topic_p0, topic_parts, topic_parts_at, broker_ids, broker_slot_ids,
#        unclean_true
#   img  the image:               ps, ts, bs, g, name_live, tcfg_min, tcfg_unc, bcfg_min, bcfg_unc, eval_m, rtop,
#                                 pending (the bits of the pending controlled shutdowns a partition is in)
#   bat  the batch being read:    tch, tkeys, fences, regs, deleted, pool (pool: pending controlled shutdowns);
#        the per-record handlers get ``hot``, its two arrays
#   cur  counters (int64[7]):     touches, touched partitions, re-evaluation row, batch number, mark stamp,
#                                 re-evaluate every partition (0/1), topics listed for re-evaluation
C_NT, C_NTK, C_REEVAL, C_BATCH, C_STAMP, C_ALL, C_NRT = range(7)
C_FIELDS = 7
REEVAL_ALL, REEVAL_NONE = -1, -2  # _reevaluate's scopes beyond one topic


@njit(cache=True, nogil=True)
def _reevaluate(cur, row, img, t):
    """m may change for partitions the batch does not write: re-check them at its end (reported at the
    batch's first such ``row``).  ``t``: the topic whose m may have moved (a topic-level min ISR, partition 0's
    replicas), REEVAL_ALL (a broker-level or cluster-wide min ISR, a new active controller) or REEVAL_NONE (a
    topic-level config for a name no live topic has: its partitions, if created later in the batch, are written
    by it).  Re-checking every partition for every topic's config was quadratic: 1 000 topics x 1 M
    partitions, 9.7 s of the pass's 10 s on the 1 M-partition fleet."""
    if cur[C_REEVAL] < 0:
        cur[C_REEVAL] = row
    if t == REEVAL_ALL:
        cur[C_ALL] = 1
    elif t >= 0 and cur[C_ALL] == 0:
        ts, rtop = img[1], img[10]
        if ts[t, T_R_STAMP] != cur[C_BATCH]:
            ts[t, T_R_STAMP] = cur[C_BATCH]
            rtop[cur[C_NRT]] = t
            cur[C_NRT] += 1


@njit(**_PER_RECORD)
def _touch(inp, img, bat, cur, p, row, has_b, b, a, rl, ri_s, ri_n, rlrs):
    """Record one partition record of the batch (InvariantChecker._touch)."""
    tape, part_topic, part_id, topic_p0 = inp[8], inp[13], inp[14], inp[15]
    ps, ts, g, tcfg_min, bcfg_min = img[0], img[1], img[3], img[5], img[7]
    tch, tkeys = bat[0], bat[1]
    t = part_topic[p]
    if ts[t, T_MB_STAMP] != cur[C_BATCH]:  # m before the batch touched the topic
        ts[t, T_MB] = _min_isr(tape, ps, ts, g, tcfg_min, bcfg_min, topic_p0, t)
        ts[t, T_MB_STAMP] = cur[C_BATCH]
    nt = cur[C_NT]
    _set_touch(tch, nt, p, row, has_b, b, a, rl, ri_s, ri_n, rlrs)
    if ps[p, P_TSTAMP] != cur[C_BATCH]:
        ps[p, P_TSTAMP] = cur[C_BATCH]
        tkeys[cur[C_NTK]] = p
        cur[C_NTK] += 1
    ps[p, P_LAST_T] = nt
    cur[C_NT] = nt + 1
    # m of every partition of the topic is capped by partition 0's replica count (§1.7)
    if part_id[p] == 0 and has_b and cur[C_ALL] == 0 and ts[t, T_R_STAMP] != cur[C_BATCH]:
        ua = np.empty(6, np.int64)
        ub = np.empty(6, np.int64)
        for q, k in enumerate((LR, LAD, LRM)):
            ua[2 * q] = b[P_LISTS + 2 * k]
            ua[2 * q + 1] = b[P_LISTS + 2 * k + 1]
            ub[2 * q] = a[P_LISTS + 2 * k]
            ub[2 * q + 1] = a[P_LISTS + 2 * k + 1]
        if not (_union_in(tape, ua, ub) and _union_in(tape, ub, ua)):
            _reevaluate(cur, row, img, t)


@njit(**_SMALL)
def _store(ps, g, p, a):
    """Partition p's state line from the state ``a`` (its own fields); an epoch bumped past int32 sets G_WIDE (the
    caller runs the pass again on int64 lines: see I32_MAX above)."""
    for f in range(P_STATE):
        ps[p, f] = a[f]
    if a[P_PE] > I32_MAX or a[P_LE] > I32_MAX:
        g[G_WIDE] = 1


@njit(**_PER_RECORD)
def _write(img, p, a, record_lists, i):
    """Apply the state ``a`` to partition p; an ELR or an emptied ISR is evidence of ELR (§1.8)."""
    ps, g = img[0], img[3]
    _store(ps, g, p, a)
    if record_lists[i, 2 * LE + 1] > 0 or record_lists[i, 2 * LI + 1] == 0:
        g[G_EVIDENCE] = 1


@njit(cache=True, nogil=True)
def _on_topic(out, inp, img, i):
    ts, name_live = img[1], img[4]
    t, nm = inp[3][i], inp[5][i]
    if nm >= 0 and name_live[nm] >= 0:
        at = _open(out, TOPIC_UNIQUE, S_DEFAULT, i, -1, NO_KEY)
        _word(out, name_live[nm])
        _close(out, at)
    elif t >= 0:
        ts[t, T_LIVE] = 1
        ts[t, T_NAME] = nm
        if nm >= 0:
            name_live[nm] = t


@njit(cache=True, nogil=True)
def _on_remove_topic(out, inp, img, bat, i):
    ps, ts, name_live, tcfg_min, tcfg_unc = img[0], img[1], img[4], img[5], img[6]
    topic_parts, topic_parts_at = inp[16], inp[17]
    t = inp[3][i]
    if t < 0 or ts[t, T_LIVE] == 0:
        at = _open(out, TOPIC_EXISTS, S_DEFAULT, i, -1, NO_KEY)
        _word(out, 0)
        _close(out, at)
        return
    ts[t, T_LIVE] = 0
    nm = ts[t, T_NAME]
    if nm >= 0:  # the name is free again and its topic configs go with it
        name_live[nm] = -1
        tcfg_min[nm] = MISSING
        tcfg_unc[nm] = -1
    for q in range(topic_parts_at[t], topic_parts_at[t + 1]):
        pp = topic_parts[q]
        if ps[pp, P_LIVE] == 1:
            ps[pp, P_LIVE] = 0
            bat[4].append(pp)


@njit(**_PER_RECORD)
def _on_partition(out, inp, img, bat, cur, i, a, b):
    """A PartitionRecord: a creation (epochs 0/0, RECOVERED, active ISR) unless it comes from a snapshot or a
    ZooKeeper import; over an existing partition it may not lower the epochs."""
    ints, lists, tape, broker_ids = inp[6], inp[7], inp[8], inp[18]
    ps, ts, bs, g = img[0], img[1], img[2], img[3]
    t, p = inp[3][i], inp[4][i]
    if t < 0 or ts[t, T_LIVE] == 0 or p < 0:
        at = _open(out, TOPIC_EXISTS, S_DEFAULT, i, -1, -1)
        _word(out, 2)
        _close(out, at)
        return
    nm = ts[t, T_NAME]
    has_b = ps[p, P_LIVE] == 1
    for f in range(P_STATE):
        b[f] = ps[p, f]
    _record_state(a, ints, lists, i)
    snap = inp[2][i] or g[G_ZK] == 1  # not a creation by this controller
    if has_b:
        if a[P_LE] < b[P_LE] or a[P_PE] < b[P_PE]:
            at = _open(out, EPOCH_MONOTONIC, S_DEFAULT, i, p, nm)
            _push3(out, 0, a[P_LE], a[P_PE])
            _push2(out, b[P_LE], b[P_PE])
            _close(out, at)
    elif not snap:
        if a[P_LE] != 0 or a[P_PE] != 0:
            at = _open(out, EPOCH_MONOTONIC, S_DEFAULT, i, p, nm)
            _push3(out, 1, a[P_LE], a[P_PE])
            _close(out, at)
        if a[P_LRS] == RECOVERING:
            at = _open(out, LRS_ENTRY, S_DEFAULT, i, p, nm)
            _word(out, 0)
            _close(out, at)
    _check_state(out, tape, g, a, W_ALL, max(ints[i, 4], 0), i, p, nm)
    if not has_b and not snap:
        _check_isr_expand(out, tape, g, bs, broker_ids, b, a, False, NO_LEADER, i, p, nm)
    _touch(inp, img, bat, cur, p, i, has_b, b, a, ints[i, 0], lists[i, 2 * LI], lists[i, 2 * LI + 1], ints[i, 3])
    _write(img, p, a, lists, i)


@njit(**_PER_RECORD)
def _on_change(out, inp, img, bat, cur, i, a, b):
    """A PartitionChangeRecord: the state it leaves, the transition it makes, the ISR it grows, the
    election it records."""
    ints, lists, tape, broker_ids, unclean_true = inp[6], inp[7], inp[8], inp[18], inp[20]
    ps, ts, bs, g, tcfg_unc, bcfg_unc = img[0], img[1], img[2], img[3], img[6], img[8]
    t, p = inp[3][i], inp[4][i]
    if p < 0 or ps[p, P_LIVE] == 0:
        at = _open(out, TOPIC_EXISTS, S_DEFAULT, i, -1, -1)
        _word(out, 3)
        _word(out, 1 if t >= 0 and ts[t, T_LIVE] == 1 else 0)
        _word(out, _name_now(ts, t) if t >= 0 else -1)
        _close(out, at)
        return
    nm = _name_now(ts, t)
    for f in range(P_STATE):
        b[f] = ps[p, f]
    w = _merged_state(a, b, ints, lists, i)
    rl, rlrs = ints[i, 0], ints[i, 3]
    ri_s, ri_n = lists[i, 2 * LI], lists[i, 2 * LI + 1]
    if w == 0:
        _close(out, _open(out, RECORD_NOOP, S_DEFAULT, i, p, nm))
    _check_state(out, tape, g, a, w, max(ints[i, 4], 0), i, p, nm)
    _check_change(out, tape, g, b, a, w, rl, ri_s, ri_n, rlrs, i, p, nm)
    _check_isr_expand(out, tape, g, bs, broker_ids, b, a, True, rl, i, p, nm)
    _check_election(out, tape, ps, ts, g, bs, broker_ids, tcfg_unc, bcfg_unc, unclean_true, b, rl, ri_s, ri_n, rlrs,
                    t, i, p, nm)
    _touch(inp, img, bat, cur, p, i, True, b, a, rl, ri_s, ri_n, rlrs)
    _write(img, p, a, lists, i)


@njit(cache=True, nogil=True)
def _on_clear_elr(out, inp, img, bat, cur, i, a, b):
    """A ClearElrRecord: ELR and LastKnownElr emptied in every partition of the topic named (all: no name)."""
    part_topic = inp[13]
    ps, ts, name_live = img[0], img[1], img[4]
    nm = inp[5][i]
    if nm >= 0 and name_live[nm] < 0:
        at = _open(out, TOPIC_EXISTS, S_DEFAULT, i, -1, NO_KEY)
        _word(out, 1)
        _close(out, at)
        return
    only = name_live[nm] if nm >= 0 else -1
    for pp in range(ps.shape[0]):
        tt = part_topic[pp]
        if ps[pp, P_LIVE] == 0 or ts[tt, T_LIVE] == 0 or (only >= 0 and tt != only):
            continue
        if ps[pp, P_LISTS + 2 * LE + 1] == 0 and ps[pp, P_LISTS + 2 * LK + 1] == 0:
            continue
        for f in range(P_FIELDS):
            b[f] = ps[pp, f]
            a[f] = ps[pp, f]
        a[P_LISTS + 2 * LE + 1] = 0
        a[P_LISTS + 2 * LK + 1] = 0
        a[P_PE] = b[P_PE] + 1
        _touch(inp, img, bat, cur, pp, i, True, b, a, LEADER_UNCHANGED, 0, -1, -1)
        _store(ps, img[3], pp, a)


@njit(cache=True, nogil=True)
def _on_cluster_record(inp, img, cur, i, k):
    """ConfigRecord, FeatureLevelRecord, LeaderChange, ZkMigrationStateRecord: what m, ELR and the
    creation rules depend on."""
    cfg, broker_slot_ids = inp[11], inp[19]
    g, tcfg_min, tcfg_unc, bcfg_min, bcfg_unc = img[3], img[5], img[6], img[7], img[8]
    if k == CONFIG:
        key, kind_of, slot = cfg[i, 0], cfg[i, 1], cfg[i, 2]
        if key == CFG_MIN_ISR:
            scope = REEVAL_ALL
            if kind_of == TOPIC_RESOURCE and slot >= 0:
                live = img[4][slot]  # the live topic of that name
                scope = live if live >= 0 else REEVAL_NONE
            _reevaluate(cur, i, img, scope)
        if key != 0 and slot >= 0 and (kind_of == TOPIC_RESOURCE or kind_of == BROKER_RESOURCE):
            topic_level = kind_of == TOPIC_RESOURCE
            if key == CFG_MIN_ISR:
                (tcfg_min if topic_level else bcfg_min)[slot] = cfg[i, 3]
            else:
                (tcfg_unc if topic_level else bcfg_unc)[slot] = cfg[i, 4]
    elif k == FEATURE:
        if cfg[i, 0] == FEAT_MV:
            g[G_MV] = cfg[i, 3]
            g[G_MV_PRESENT] = 1
        elif cfg[i, 0] == FEAT_ELR:
            g[G_ELRF_PRESENT] = 1
            g[G_ELRF_LEVEL] = cfg[i, 3]
    elif k == LEADER_CHANGE:
        lid = cfg[i, 3]
        if lid != g[G_CTRL_ID]:  # the active controller's node config takes part in m (§1.7)
            _reevaluate(cur, i, img, REEVAL_ALL)
        g[G_CTRL_ID] = lid
        g[G_CTRL_SLOT] = -1
        for s in range(len(broker_slot_ids)):
            if broker_slot_ids[s] == lid:
                g[G_CTRL_SLOT] = s
    elif k == ZK_MIGRATION:
        g[G_ZK] = inp[11][i, 3]  # (layout.Layout.cfg: the migration under way)


@njit(cache=True, nogil=True)
def _on_register(out, inp, img, bat, cur, i):
    """RegisterBrokerRecord: an amended registration keeps controlled shutdown (§1.5-2); a new incarnation
    at MV >= 4.0-IV1 must come after the records removing it from ISRs and ELRs."""
    tape, bints, part_topic = inp[8], inp[10], inp[13]
    ps, ts, bs, g = img[0], img[1], img[2], img[3]
    x = inp[9][i]
    if x < 0:
        return
    if bs[x, B_REG] == 1 and bs[x, B_INC] == bints[i, 2]:
        if bs[x, B_CS] == 1 and bints[i, 4] == 0:
            at = _open(out, CS_STICKY, S_DEFAULT, i, -1, NO_KEY)
            _word(out, 1)
            _word(out, bints[i, 0])
            _close(out, at)
    else:
        bat[3].append(x)
        bat[3].append(i)
        if g[G_MV] >= MV_4_0_IV1:
            cur[C_STAMP] += 1
            clean = g[G_MV] >= MV_4_1_IV0 and bs[x, B_REG] == 1 and bs[x, B_CS] == 1
            _register_unclean_batch(out, tape, ps, ts, g, bat[0], cur[C_NT], part_topic, bints[i, 0], i,
                                    cur[C_STAMP], clean)
    bs[x, B_REG] = 1
    bs[x, B_EPOCH] = bints[i, 1]
    bs[x, B_INC] = bints[i, 2]
    bs[x, B_FENCED] = bints[i, 3]
    bs[x, B_CS] = bints[i, 4]


@njit(cache=True, nogil=True)
def _on_broker_change(out, inp, img, bat, i, k):
    """BrokerRegistrationChange / Fence / Unfence / Unregister: the registration epoch they carry, the
    fences and controlled shutdowns the batch's end checks, and the broker state they set."""
    bints, broker = inp[10], inp[9]
    bs, fences = img[2], bat[2]
    _epoch_match(out, bs, bints, broker, i)
    x = broker[i]
    registered = x >= 0 and bs[x, B_REG] == 1
    if k == REG_CHANGE:
        fenced, cs = bints[i, 3], bints[i, 4]
        if cs != 0 and cs != 1:
            at = _open(out, CS_STICKY, S_DEFAULT, i, -1, NO_KEY)
            _push3(out, 0, bints[i, 0], cs)
            _close(out, at)
        if fenced == 1:
            _append3(fences, x, i, 0)
        if cs == 1:
            _append3(fences, x, i, 1)
        if registered:
            if fenced == 1 or fenced == -1:
                bs[x, B_FENCED] = 1 if fenced == 1 else 0
            if cs == 1:
                bs[x, B_CS] = 1
    elif k == FENCE:
        _append3(fences, x, i, 0)
        if registered:
            bs[x, B_FENCED] = 1
    elif k == UNFENCE:
        if registered:
            bs[x, B_FENCED] = 0
    elif registered:  # UnregisterBrokerRecord
        bs[x, B_REG] = 0


@njit(cache=True, nogil=True)
def _close_batch(out, inp, img, bat, cur):
    tape, offsets, part_topic, topic_p0, broker_ids = inp[8], inp[12], inp[13], inp[15], inp[18]
    ps, ts, bs, g, tcfg_min, bcfg_min = img[0], img[1], img[2], img[3], img[5], img[7]
    cur[C_STAMP] = _after_batch(out, tape, ps, ts, g, bs, broker_ids, tcfg_min, bcfg_min, topic_p0, part_topic,
                                bat[0], cur[C_NT], bat[1], cur[C_NTK], bat[2], bat[3], bat[4], bat[5], offsets,
                                cur[C_BATCH], cur[C_REEVAL], cur[C_STAMP], img[9], cur[C_ALL] == 1, img[10],
                                cur[C_NRT], inp[16], inp[17], img[11])


@njit(cache=True, nogil=True)
def _new_image(ps, n_topics, n_brokers, n_names, n_bslots, broker_slot_ids, default_slot, override):
    """The image's arrays; ``ps`` (the partitions' state lines, zeros) comes from the caller: NumPy asks the kernel
    for huge pages on large arrays, and an array made here faults its pages in 4 kB at a time (92 bytes a
    partition: 92 MB on a 1 M-partition log)."""
    n_parts = ps.shape[0]
    ps[:, P_M_AT] = M_UNSET
    ps[:, P_TSTAMP] = -1
    ps[:, P_MARK] = -1
    ts = np.zeros((n_topics, T_FIELDS), np.int64)
    ts[:, T_NAME] = -1
    ts[:, T_R_STAMP] = -1
    ts[:, T_MB_STAMP] = -1
    ts[:, T_M_STAMP] = -1
    bs = np.zeros((n_brokers, B_FIELDS), np.int64)
    bs[:, B_PEND_ROW] = -1
    bs[:, B_DONE] = -1
    g = np.zeros(G_FIELDS, np.int64)
    g[G_OVERRIDE] = override
    g[G_CTRL_ID] = -1
    g[G_CTRL_SLOT] = -1
    g[G_POOL_ELR] = -1
    g[G_DEFAULT_SLOT] = default_slot
    for s in range(len(broker_slot_ids)):  # the node-level config of controller -1, should anyone write it
        if broker_slot_ids[s] == -1:
            g[G_CTRL_SLOT] = s
    return (ps, ts, bs, g, np.full(n_names, -1, np.int64), np.full(n_names, MISSING, np.int64),
            np.full(n_names, -1, np.int64), np.full(n_bslots, MISSING, np.int64), np.full(n_bslots, -1, np.int64),
            np.full(n_parts, MISSING, np.int64), np.empty(max(n_topics, 1), np.int64), np.zeros(n_parts, np.int64))


@njit(cache=True, nogil=True)
def check(kind, batch, snapshot, topic, part, name, ints, lists, tape, broker, bints, cfg, offsets, part_topic,
          part_id, topic_p0, topic_parts, topic_parts_at, broker_ids, broker_slot_ids, default_slot, unclean_true,
          n_names, n_bslots, override, capacity, ps):
    """The pass: every record checked against the state before it, applied, and every batch closed by the
    batch-level rules.  Returns (the breach stream (see the module docstring), the words it needed, whether the
    state lines held every value): a stream longer than ``capacity`` words is cut there, and its caller runs the pass
    again with room for all of it; int32 lines that could not hold an epoch (False), again on int64 lines.
    ``ps``: zeros of shape (partitions, P_FIELDS), the partitions' state lines (:func:`new_state_lines`)."""
    # The bundles hold borrowed views (kernels/borrow.py): the handlers below receive them once per record,
    # and counting references to their 40 arrays was most of the pass's time.  The inputs are held by the
    # caller, the arrays made here by ``owned`` and ``tch``, read again after the loop.
    inp = (borrow(kind), borrow(batch), borrow(snapshot), borrow(topic), borrow(part), borrow(name), borrow(ints),
           borrow(lists), borrow(tape), borrow(broker), borrow(bints), borrow(cfg), borrow(offsets),
           borrow(part_topic), borrow(part_id), borrow(topic_p0), borrow(topic_parts), borrow(topic_parts_at),
           borrow(broker_ids), borrow(broker_slot_ids), borrow(unclean_true))
    n_parts = len(part_topic)
    owned = _new_image(ps, len(topic_p0), len(broker_ids), n_names, n_bslots, broker_slot_ids, default_slot,
                       override) + (np.empty(max(n_parts, 1), np.int64), np.zeros(C_FIELDS, np.int64),
                                    np.zeros(P_FIELDS, np.int64), np.zeros(P_FIELDS, np.int64))
    img = (borrow(owned[0]), borrow(owned[1]), borrow(owned[2]), borrow(owned[3]), borrow(owned[4]), borrow(owned[5]),
           borrow(owned[6]), borrow(owned[7]), borrow(owned[8]), borrow(owned[9]), borrow(owned[10]),
           borrow(owned[11]))
    stream = np.empty(capacity, np.int64)  # untouched pages cost nothing: room for many breaches
    words = np.zeros(1, np.int64)
    out = (borrow(stream), borrow(words))
    fences, regs = List.empty_list(types.int64), List.empty_list(types.int64)
    deleted, pool = List.empty_list(types.int64), List.empty_list(types.int64)
    tch = np.empty((64, X_FIELDS), np.int64)
    # the per-record handlers get the batch's arrays only: each typed List they were handed cost two atomic
    # reference counts per call (Lists cannot be borrowed), most of what was left of the pass's time
    hot = (borrow(tch), borrow(owned[12]))
    bat = hot + (fences, regs, deleted, pool)
    cur, a, b = borrow(owned[13]), borrow(owned[14]), borrow(owned[15])
    cur[C_REEVAL] = -1
    cur[C_BATCH] = -1
    ps = img[0]
    for i in range(len(kind)):
        if i + _AHEAD < len(kind):  # the state line of a partition some records ahead (kernels/prefetch.py)
            q = part[i + _AHEAD]
            if q >= 0:
                prefetch(ps, q * P_FIELDS)  # (its first, middle and last field: every cache line it spans)
                prefetch(ps, q * P_FIELDS + P_FIELDS // 2)
                prefetch(ps, q * P_FIELDS + P_FIELDS - 1)
        if batch[i] != cur[C_BATCH]:
            # a batch that wrote, deleted, fenced, registered and re-configured nothing, with no controlled shutdown
            # pending (the pool holds a range only while one is), leaves the batch-level rules nothing to check: two
            # thirds of the batches of the 1 M-partition fleet (NoOps only), whose ends cost ~4 ns a record of the 63
            quiet = (cur[C_NT] == 0 and cur[C_REEVAL] < 0 and len(fences) == 0 and len(regs) == 0
                     and len(deleted) == 0 and len(pool) == 0)
            if cur[C_BATCH] >= 0 and not quiet:
                _close_batch(out, inp, img, bat, cur)
            cur[C_BATCH] = batch[i]
            cur[C_NT] = cur[C_NTK] = cur[C_ALL] = cur[C_NRT] = 0
            cur[C_REEVAL] = -1
            fences.clear()
            regs.clear()
            deleted.clear()
        k = kind[i]
        need = cur[C_NT] + (n_parts if k == CLEAR_ELR else 1)
        if need > tch.shape[0]:  # room for the touches this record may add
            tch = _grow(tch, need)
            hot = (borrow(tch), hot[1])
            bat = hot + (fences, regs, deleted, pool)
        if k == PARTITION:
            _on_partition(out, inp, img, hot, cur, i, a, b)
        elif k == CHANGE:
            _on_change(out, inp, img, hot, cur, i, a, b)
        elif k == TOPIC:
            _on_topic(out, inp, img, i)
        elif k == REMOVE_TOPIC:
            _on_remove_topic(out, inp, img, bat, i)
        elif k == CLEAR_ELR:
            _on_clear_elr(out, inp, img, hot, cur, i, a, b)
        elif k == CONFIG or k == FEATURE or k == LEADER_CHANGE or k == ZK_MIGRATION:
            _on_cluster_record(inp, img, cur, i, k)
        elif k == REGISTER:
            _on_register(out, inp, img, bat, cur, i)
        elif k == REG_CHANGE or k == FENCE or k == UNFENCE or k == UNREGISTER:
            _on_broker_change(out, inp, img, bat, i, k)
    if cur[C_BATCH] >= 0:
        _close_batch(out, inp, img, bat, cur)
    _finish(out, tape, img[0], img[1], img[3], img[2], broker_ids, part_topic, pool, img[11])
    keep(owned, tch, stream, words)
    return stream[:min(words[0], capacity)].copy(), words[0], img[3][G_WIDE] == 0


def new_state_lines(n_parts: int, wide: bool = False) -> np.ndarray:
    """The zeroed state lines :func:`check` takes (allocated by NumPy: see :func:`_new_image`): int32, int64 where
    ``wide`` (see I32_MAX above)."""
    return np.zeros((n_parts, P_FIELDS), np.int64 if wide else np.int32)


def narrow_fits(lists: np.ndarray, records: int) -> bool:
    """Whether int32 state lines hold what the pass writes there, a bumped epoch aside (which it reports): the
    layout's tape positions are int32 (``lists``) and batch and touch numbers stay below 2**31 (``records``)."""
    return lists.dtype == np.int32 and records < I32_MAX
