"""The vectorized builder (controller_core.vector.recompute) agrees with the scalar reference builder on
thousands of random partition states, triggers and cluster contexts: whenever the scalar builder's
record is presented as the recorded change, the vectorized path must explain it (or declare it
outside what it models), and a record the scalar builder would not write must never be explained."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from controller_core.vector import recompute as V
from controller_core.rules.builder import ONLINE, PREFERRED, UNCLEAN, Inputs, build
from controller_core.image import MIGRATING, Partition

T = "AAAAAAAAAAAAAAAAAAAAAQ"


def _random_case(rng: random.Random):
    brokers = list(range(1, 7))
    reps = rng.sample(brokers, rng.randint(1, 4))
    isr = [b for b in reps if rng.random() < 0.6]
    rng.shuffle(isr)
    elr = [b for b in reps if b not in isr and rng.random() < 0.3]
    leader = rng.choice(isr) if isr and rng.random() < 0.85 else -1
    lke = [rng.choice(reps)] if leader == -1 and rng.random() < 0.5 else []
    p = Partition(T, 0, reps, isr, leader, rng.randint(0, 9), rng.randint(0, 9), [], [], elr, lke,
                  rng.choice([0, 0, 1]), [MIGRATING] * len(reps))
    active = {b for b in brokers if rng.random() < 0.7}
    trig = rng.choice([V.ALTER, V.FENCE, V.UNFENCE, V.UNCLEAN_SHUTDOWN, V.PREFERRED_ELECTION, V.UNCLEAN_ELECTION])
    if trig == V.ALTER and leader < 0:
        trig = V.FENCE  # only a leader sends AlterPartition
    b = rng.choice(reps + [rng.choice(brokers)])
    mv = rng.choice([5, 11, 12, 17, 21, 23, 26, 29])
    elr_on = mv >= 23 and rng.random() < 0.7
    m = rng.randint(1, 3)
    check = mv >= 22
    kw = {}
    if trig in (V.FENCE, V.UNCLEAN_SHUTDOWN):
        acc = lambda x: x != b and x in active  # noqa: E731
        kw["target_isr"] = [x for x in isr if x != b]
        if trig == V.UNCLEAN_SHUTDOWN:
            kw["unclean_shutdown"] = frozenset({b})
        election = ONLINE
    elif trig == V.UNFENCE:
        acc = lambda x: x == b or x in active  # noqa: E731
        election = ONLINE
    else:
        acc = lambda x: x in active  # noqa: E731
        election = {V.ALTER: ONLINE, V.PREFERRED_ELECTION: PREFERRED, V.UNCLEAN_ELECTION: UNCLEAN}[trig]
        if trig == V.ALTER:
            lead = [leader] if leader >= 0 else []
            kw["target_isr"] = lead + [x for x in reps if x != leader and x in active and rng.random() < 0.5]
            kw["target_lrs"] = rng.choice([p.lrs, 0])
    inp = Inputs(acceptable=acc, min_isr=m, elr_enabled=elr_on, metadata_version=mv, election=election,
                 check_last_known_leader=check, **kw)
    return p, inp, trig, b, active, mv, elr_on, m, check


def _columns(cases, changes):
    def lists(values):
        return V.padded(pa.array(values, pa.list_(pa.int32())))
    ps = [c[0] for c in cases]
    R, rl, _ = lists([p.replicas for p in ps])
    w = R.shape[1]
    before = {"replicas": R, "replicas_len": rl}
    for key, attr in (("isr", "isr"), ("elr", "elr"), ("lke", "last_known_elr")):
        mat, ln, _ = lists([getattr(p, attr) for p in ps])
        before[key], before[key + "_len"] = V._fit(mat, max(w, mat.shape[1])), ln
    before.update(leader=np.array([p.leader for p in ps]), lrs=np.array([p.lrs for p in ps]),
                  adding_len=np.zeros(len(ps), int), removing_len=np.zeros(len(ps), int))
    rec = {}
    for key, field in (("isr", "isr"), ("elr", "eligibleLeaderReplicas"), ("lke", "lastKnownElr")):
        vals = [ch.get(field) if ch else None for ch in changes]
        mat, ln, valid = lists(vals)
        rec[key], rec[key + "_len"], rec[key + "_valid"] = mat, ln, valid
    rec["leader"] = np.array([ch.get("leader", -2) if ch else -2 for ch in changes])
    rec["lrs"] = np.array([ch.get("leaderRecoveryState", -1) if ch else -1 for ch in changes])
    rec["other_written"] = np.array([bool(ch) and any(k in ch for k in ("replicas", "directories", "addingReplicas",
                                                                        "removingReplicas")) for ch in changes])
    active = np.array([[r in c[4] for r in (p.replicas + [-1] * w)[:w]] for p, c in zip(ps, cases)])
    ctx = V.Context(trigger=np.array([c[2] for c in cases]), broker=np.array([c[3] for c in cases]),
                    mv=np.array([c[5] for c in cases]), elr_on=np.array([c[6] for c in cases]),
                    min_isr=np.array([c[7] for c in cases]), check_lkl=np.array([c[8] for c in cases]),
                    active=active)
    return before, rec, ctx


@pytest.mark.parametrize("seed", range(4))
def test_vectorized_builder_explains_exactly_what_the_scalar_builder_writes(seed):
    rng = random.Random(seed)
    cases = [_random_case(rng) for _ in range(2500)]
    truth = [build(c[0], c[1]) for c in cases]
    # present the scalar builder's own record: the vectorized path must explain it when it models it
    before, rec, ctx = _columns(cases, truth)
    res = V.recompute(before, rec, ctx)
    modelled_written = res.modelled & np.array([t is not None for t in truth])
    missed = np.flatnonzero(modelled_written & ~res.matched)
    assert len(missed) == 0, [(cases[i][0], cases[i][2], truth[i]) for i in missed[:3]]
    written = np.array([t is not None for t in truth])
    assert res.modelled[written].mean() > 0.9  # the fast path covers nearly every record
    # and a perturbed record (another leader) must not be explained
    bad = []
    for t, c in zip(truth, cases):
        t = dict(t or {})
        t["leader"] = 99
        bad.append(t)
    before, rec, ctx = _columns(cases, bad)
    assert not V.recompute(before, rec, ctx).matched.any()


def edits(rng, cases, truth, kind: int) -> list:
    """The controller's own records (``truth``), edited: kind 0 none, 1 another leader, 2 another ISR, 3 another ELR,
    4 LastKnownElr / recovery state instead of the leader, 5 the replicas written too; 30 % of the edited records
    left out (None)."""
    recs = []
    for t, c in zip(truth, cases):
        t = dict(t or {})
        if kind == 1:
            t["leader"] = rng.choice([-1, 1, 2, 3, 99])
        elif kind == 2:
            t["isr"] = rng.sample(c[0].replicas, rng.randint(0, len(c[0].replicas)))
        elif kind == 3:
            t["eligibleLeaderReplicas"] = rng.sample(c[0].replicas + [7], rng.randint(0, 2))
        elif kind == 4:
            t.pop("leader", None)
            t["lastKnownElr"] = rng.choice([[], [c[0].replicas[0]]])
            t["leaderRecoveryState"] = rng.choice([0, 1])
        elif kind == 5:
            t["replicas"] = list(c[0].replicas)
        recs.append(t if kind == 0 or rng.random() < 0.7 else None)
    return recs


@pytest.mark.parametrize("seed", range(4))
def test_bitmask_and_matrix_paths_agree_on_perturbed_records(seed):
    """recompute() runs on replica-position bitmasks (up to 16 replicas) and falls back to padded
    matrices beyond: both live paths must judge every record alike -- the controller's own change and
    random edits of it (wrong leader, ISR, ELR, LastKnownElr / recovery state)."""
    from controller_core.vector import recompute as V
    from controller_core.rules.builder import build

    rng = random.Random(1000 + seed)
    cases = [_random_case(rng) for _ in range(1500)]
    truth = [build(c[0], c[1]) for c in cases]
    for kind in range(5):
        recs = edits(rng, cases, truth, kind)
        before, rec, ctx = _columns(cases, recs)
        a, b = V._recompute_bits(before, rec, ctx), V._recompute_matrix(before, rec, ctx)
        assert (a.matched == b.matched).all() and (a.modelled == b.modelled).all()
        if kind == 0:
            assert a.matched[a.modelled].all()  # the controller's own decisions are reproduced
