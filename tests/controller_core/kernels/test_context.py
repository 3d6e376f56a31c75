"""The change builder's per-record context in compiled loops (controller_core.kernels.context) equals its NumPy
forms in vector/explain on random inputs: the broker event of each record's batch (with the batches' bitmap, and
past the size it is built for: every record searching the events), and the topic settings just before each record
(timelines with several rows at one offset, nulls, topics the records never name, records without a topic).
Through ``explain`` the two meet on every real log and scenario (tests/controller_core/kernels/test_recompute_pass.py,
which also runs them with NUMBA_DISABLE_JIT=1)."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from controller_core.kernels import context
from controller_core.vector import explain as X
from controller_core.vector import recompute as V


def _lists(rng, n, brokers):
    return [None if rng.random() < 0.05 else rng.sample(brokers, rng.randint(0, 3)) for _ in range(n)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("far", [False, True])  # event batches spread past the bitmap's size
def test_batch_events_equal_the_numpy_form(seed, far):
    rng = random.Random(seed)
    n_rows = 400
    isr = pa.array(_lists(rng, n_rows, list(range(6))), pa.list_(pa.int32()))
    elr = pa.array(_lists(rng, n_rows, list(range(6))), pa.list_(pa.int32()))
    batches = [rng.randrange(0, 60) * (10**9 if far else 7) for _ in range(25)]
    ev = X._event_rows([(rng.choice(batches), rng.randrange(0, 500), rng.choice([V.FENCE, V.UNFENCE, V.UNCLEAN_SHUTDOWN]),
                         rng.randrange(-1, 6), rng.randrange(2), 0) for _ in range(rng.randrange(0, 40))])
    n = 1000
    batch = np.array([rng.choice(batches) if rng.random() < 0.6 else rng.randrange(0, 500) for _ in range(n)], np.int64)
    offset = np.array([rng.randrange(0, 500) for _ in range(n)], np.int64)
    prev = np.array([rng.randrange(0, n_rows) for _ in range(n)], np.int64)

    def members(at):
        return V.padded_rows(isr, prev[at])[0], V.padded_rows(elr, prev[at])[0]

    want_trig, want_ev = X._batch_event(ev, members, batch, offset)
    empty = pa.array([[]] * n_rows, pa.list_(pa.int32()))
    before = X.before_lists(pa.table({"replicas": empty, "isr": isr, "removing_replicas": empty,
                                      "adding_replicas": empty, "eligible_leader_replicas": elr,
                                      "last_known_elr": empty}))
    trig, chosen = context.batch_events(ev, batch, offset, prev, before)
    assert (trig == want_trig).all() and (chosen == want_ev).all()
    assert (trig != V.ALTER).sum() > 0 or not len(ev)  # some records have an event to choose


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("grouped", [False, True])
def test_topic_settings_equal_the_numpy_form(seed, grouped):
    rng = random.Random(seed)
    ids = [f"topic-{k}" for k in range(8)]
    rows = []
    for _ in range(rng.randrange(0, 60)):
        rows.append({"topic_id": rng.choice(ids + [None, "never-named"]), "offset": rng.randrange(0, 300),
                     "metadata_version": None if rng.random() < 0.1 else rng.randrange(1, 30),
                     "elr_enabled": None if rng.random() < 0.1 else rng.random() < 0.5,
                     "effective_min_isr": None if rng.random() < 0.1 else rng.randrange(1, 4)})
    topics = pa.Table.from_pylist(rows, schema=pa.schema([
        ("topic_id", pa.string()), ("offset", pa.int64()), ("metadata_version", pa.int16()),
        ("elr_enabled", pa.bool_()), ("effective_min_isr", pa.int32())]))
    n = 800
    rec_topic = [None if rng.random() < 0.05 else rng.choice(ids) for _ in range(n)]
    offset = np.array([rng.randrange(0, 320) for _ in range(n)], np.int64)
    if grouped:  # as the history gives them: by topic, each partition's records in log order, offsets on the rows'
        offset[: n // 2] = rng.choices([r["offset"] for r in rows] or [0], k=n // 2)
        order = sorted(range(n), key=lambda i: (str(rec_topic[i]), i % 7, offset[i]))
        rec_topic, offset = [rec_topic[i] for i in order], offset[order]
    history = pa.table({"topic_id": pa.array(rec_topic, pa.string())})
    want = X._topic_settings(topics, history, np.arange(n), offset)
    named = sorted({t for t in rec_topic if t is not None})
    rtopic = np.array([-1 if t is None else named.index(t) for t in rec_topic], np.int32)
    got = context.topic_settings(topics, pa.array(named, pa.string()), rtopic, offset)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and (g == w).all()


@pytest.mark.parametrize("seed", range(4))
def test_label_codes_name_each_record_as_its_deciding_event(seed):
    """Each record's code names (label, broker): its trigger (the unknown label where two events could explain
    it), or the chosen event's own label when that event decided it (a controlled shutdown decided as a fence is
    labelled as what it is), with the chosen event's broker; no broker without an event."""
    rng = random.Random(seed)
    labels = [V.FENCE, V.UNFENCE, V.UNCLEAN_SHUTDOWN, len(X.LABEL_NAMES) - 2, len(X.LABEL_NAMES) - 1]
    ev = X._event_rows([(rng.randrange(0, 50), rng.randrange(0, 500), rng.choice([V.FENCE, V.UNFENCE]),
                         rng.randrange(0, 9), rng.randrange(2), rng.choice(labels)) for _ in range(rng.randrange(0, 30))])
    n = 2000
    trig = np.array([rng.choice([-1, V.ALTER, V.FENCE, V.UNFENCE, V.PREFERRED_ELECTION]) for _ in range(n)], np.int8)
    chosen = np.array([rng.randrange(-1, len(ev)) for _ in range(n)], np.int64)
    unknown = len(X.LABEL_NAMES)
    codes, brokers = context.label_codes(trig, chosen, ev, unknown)
    assert brokers == sorted({int(b) for b in ev[:, 3]})
    nb = len(brokers) + 1
    for i in range(n):
        name = unknown if trig[i] < 0 else int(trig[i])
        broker = 0
        if chosen[i] >= 0:
            e = ev[chosen[i]]
            broker = 1 + brokers.index(int(e[3]))
            if trig[i] >= 0 and trig[i] == e[2]:
                name = int(e[5])
        assert codes[i] == name * nb + broker, i
    assert (chosen >= 0).any() or not len(ev)


@pytest.mark.parametrize("seed", range(4))
def test_extent_is_numpys(seed):
    """``extent``: the widest replica list among the rows asked for and the tape's id range with 0 in it, as NumPy's
    diff, gather, min and max give them (no rows, an empty tape, negative ids, ids all above 0)."""
    rng = np.random.default_rng(seed)
    for _ in range(50):
        m = int(rng.integers(0, 40))
        off = np.concatenate([[0], np.cumsum(rng.integers(0, 6, m))]).astype(rng.choice([np.int32, np.int64]))
        prev = np.sort(rng.choice(m, int(rng.integers(0, m + 1)), replace=False)) if m else np.zeros(0, np.int64)
        vals = rng.integers(int(rng.choice([-3, 1])), 50, int(rng.integers(0, 30))).astype(np.int32)
        want = (int(np.diff(off)[prev].max(initial=0)), int(vals.min(initial=0)), int(vals.max(initial=0)))
        assert context.extent(prev.astype(np.int64), off, vals) == want
