"""Broker availability has one definition (controller-rules.md: registered, not fenced, not in controlled
shutdown), and every form of it -- scalar image, vectorized replay, silver broker history, the audit's
state at a point -- names the same brokers at every point of the real logs."""
from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from audit.run import state_at, truncate
from controller_core.brokers import active_broker_ids
from controller_core.brokers import active, active_at, active_matrix, active_rows
from controller_core.image import Cluster, ReplayError
from controller_core.logdir import SEGMENT
from controller_core.replay import iter_batches
from lake import gold
from tests.realdata_facts import CLUSTERS, REALDATA
from lake import catalog

STATES = list(itertools.product([False, True], repeat=3))  # (registered, fenced, in_controlled_shutdown)


@pytest.mark.parametrize("registered,fenced,in_cs", STATES)
def test_only_a_registered_unfenced_broker_outside_controlled_shutdown_is_active(registered, fenced, in_cs):
    want = registered and not fenced and not in_cs
    assert active(registered, fenced, in_cs) is want
    assert active(np.bool_(registered), np.bool_(fenced), np.bool_(in_cs)) == want


def test_array_form_is_the_scalar_form_element_wise():
    r, f, c = (np.array(col) for col in zip(*STATES))
    assert active(r, f, c).tolist() == [active(*s) for s in STATES]
    # mixed: one array, the rest scalars (a whole fleet's registrations against one flag)
    assert active(r, False, False).tolist() == r.tolist()


def test_null_broker_history_states_read_as_unregistered_or_fenced():
    # broker_state_history leaves an unregistered broker's fenced / in_controlled_shutdown null
    t = pa.table({"registered": [True, False, True, None], "fenced": [False, None, None, False],
                  "in_controlled_shutdown": [None, None, False, False]})
    assert active_rows(t).tolist() == [True, False, False, False]


def _scalar_active_sets(log_dir, targets: list[int]) -> dict[int, set[int]]:
    """The scalar image's active brokers after each target offset, walking the log once."""
    c, out, pending = Cluster(), {}, sorted(targets)
    for lf, batch in iter_batches(log_dir):
        for rec in batch:
            if lf.kind == SEGMENT:
                while pending and pending[0] < rec.offset:
                    out[pending.pop(0)] = {b for b in c.brokers if c.active(b)}
            try:
                c.apply(rec.type, rec.data, rec.offset)
            except ReplayError:
                pass
    for t in pending:
        out[t] = {b for b in c.brokers if c.active(b)}
    return out


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_image_vectorized_history_and_audit_agree_on_who_is_active(name):
    d = REALDATA / CLUSTERS[name]
    tables, end, _ = gold.silver_from_log_dir(str(d))
    hist = tables[catalog.BROKER_STATE_HISTORY.name]
    offsets = sorted(set(hist.column("offset").to_pylist()) | {end, end // 2})
    offsets = [o for o in offsets if o >= 0]
    scalar = _scalar_active_sets(d, offsets)
    ids = np.unique(hist.column("broker_id").to_numpy()).astype(np.int32)
    # vectorized: state "just before" offset o + 1 is the state after o; one row per point, a column per broker
    R = np.asfortranarray(np.tile(ids, (len(offsets), 1)))
    vec = active_matrix(hist, R, np.asarray(offsets, np.int64) + 1)
    seen_inactive = False
    for i, o in enumerate(offsets):
        want = scalar[o]
        assert {int(b) for b in ids[vec[i]]} == want, (name, o, "vectorized")
        assert active_at(hist, o) == want, (name, o, "broker history")
        assert active_broker_ids(state_at(truncate(tables, o)[0])[1]) == want, (name, o, "audit")
        seen_inactive |= bool(set(ids.tolist()) - want)
    assert len(offsets) > 3 and seen_inactive  # points where some broker was not active were compared
    # a registered, unfenced broker in controlled shutdown is not active (arthurarutunyan04, mavila01 and
    # ogs59 have such rows: the audit used to count them)
    draining = [(r["offset"], r["broker_id"]) for r in hist.to_pylist()
                if r["registered"] and not r["fenced"] and r["in_controlled_shutdown"]]
    assert all(b not in scalar[o] for o, b in draining)
    assert bool(draining) == (name in ("arthurarutunyan04", "mavila01", "ogs59"))
