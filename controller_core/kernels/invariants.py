"""The §4 invariants of a replay, checked by the compiled pass: bronze rows in, :class:`Breach` rows out.

``check(records)`` lays the records out (:mod:`.layout`), runs :func:`.invariant_pass.check` and turns
its integer stream into breaches, each described by :mod:`controller_core.rules.breaches` -- the words
the scalar reference uses.  The pipeline calls this; the scalar checker stays the readable reference
the tests compare it with.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from controller_core.codec.arrowutil import to_numpy
from controller_core.kernels import invariant_pass as K
from controller_core.kernels import layout
from controller_core.rules import breaches as say
from controller_core.rules.invariants import RULES, Breach

# a broker's state code (invariant_pass._broker_state) in each rule's words
_JOINED_STATES = ("unregistered", "fenced", "in controlled shutdown")
_LEADER_STATES = ("not registered", "fenced", "in controlled shutdown")
_WHAT = {layout.REG_CHANGE: "BrokerRegistrationChangeRecord", layout.FENCE: "FenceBrokerRecord",
         layout.UNFENCE: "UnfenceBrokerRecord", layout.UNREGISTER: "UnregisterBrokerRecord"}


def check(records: pa.Table, elr_override: bool | None = None, lay: layout.Layout | None = None) -> list[Breach]:
    """The invariant breaches of ``records`` (bronze rows in replay order; replay.SKIP types are kind OTHER); ``lay``:
    their layout, if built already (the pipeline builds it once for the fold and this pass)."""
    if lay is None:
        lay = layout.build(records)
    offsets = lay.offset if lay.offset is not None else np.zeros(0, np.int64)
    args = (lay.kind, lay.batch, lay.snapshot, lay.topic, lay.part, lay.name, lay.ints, lay.lists, lay.tape,
            lay.broker, lay.bints, lay.cfg, offsets, lay.part_topic, lay.part_id, lay.topic_p0, lay.topic_parts,
            lay.topic_parts_at, lay.broker_ids, lay.broker_slot_ids, lay.default_slot, lay.unclean_true, lay.n_names,
            lay.n_bslots, -1 if elr_override is None else int(elr_override))
    # room for a breach every other record or so (pages never written are never touched, but a host that does not
    # overcommit memory counts them); a log breaching more runs the pass once more with room for all it wrote
    n_parts = len(lay.part_topic)
    wide = not K.narrow_fits(lay.lists, len(lay.kind))
    room = STREAM_WORDS_PER_RECORD * len(lay.kind) + STREAM_WORDS_MIN
    stream, words, fits = K.check(*args, room, K.new_state_lines(n_parts, wide))
    if not fits and not wide:  # an epoch bumped past int32: int64 lines, the list positions widened too (the one
        # pass compiled for wide lines is the one a log past 2**31 tape entries takes, kernels.warm's second round)
        args, wide = args[:7] + (lay.lists.astype(np.int64),) + args[8:], True
        stream, words, _ = K.check(*args, room, K.new_state_lines(n_parts, wide))
    if words > len(stream):
        stream, words, _ = K.check(*args, int(words), K.new_state_lines(n_parts, wide))
    return _Report(records, lay, offsets).read(stream)


STREAM_WORDS_PER_RECORD, STREAM_WORDS_MIN = 4, 4096  # the breach stream's first buffer


class _Payload:
    """Reads one breach's payload: ints and ``[n, ids...]`` lists."""

    def __init__(self, values: list[int]):
        self.v, self.at = values, 0

    def int(self) -> int:
        self.at += 1
        return self.v[self.at - 1]

    def list(self) -> list[int]:
        n = self.int()
        self.at += n
        return self.v[self.at - n:self.at]


def _opt(v: int):
    return None if v == layout.MISSING else v


class _Report:
    def __init__(self, records: pa.Table, lay: layout.Layout, offsets: np.ndarray):
        self.records, self.lay, self.offsets = records, lay, offsets

    def row_topic_id(self, row: int):
        return self.records.column("topic_id")[row].as_py()

    def row_data(self, row: int) -> dict:
        text = self.records.column("data_json")[row].as_py()
        if text is not None:
            return json.loads(text)
        from controller_core.vector.explain import _TYPED, record_data  # a seed row without its JSON
        return record_data({c: self.records.column(c)[row].as_py() for c in _TYPED})

    def read(self, stream: np.ndarray) -> list[Breach]:
        out, at, values = [], 0, stream.tolist()
        while at < len(values):
            rule, sev, row, part, name, n = values[at:at + 6]
            payload = _Payload(values[at + 6:at + 6 + n])
            at += 6 + n
            out.append(self.breach(rule, sev, row, part, name, payload))
        return out

    def breach(self, rule: int, sev: int, row: int, part: int, name: int, pay: _Payload) -> Breach:
        lay = self.lay
        if rule == K.TOPIC_EXISTS:
            topic_id, topic, partition, said = self.unknown_target(row, pay)
        else:
            if part >= 0:
                topic_id = lay.topic_ids[lay.part_topic[part]]
                topic, partition = (lay.names[name] if name >= 0 else topic_id), int(lay.part_id[part])
            else:
                topic_id = topic = partition = None
            said = self.describe(rule, sev, row, pay, topic, partition)
        rid = K.RULES[rule]
        severity = K.SEVERITIES[sev] or RULES[rid]
        return Breach(int(self.offsets[row]), rid, severity, topic, partition, *said, topic_id=topic_id)

    def unknown_target(self, row: int, pay: _Payload):
        """INV-TOPIC-EXISTS: (topic id, topic, partition, description).  A partition or change record is keyed by
        its own (topic id, partition), the topic shown by name when it is live; the others name no partition."""
        variant = pay.int()
        if variant == 0:
            return None, None, None, say.remove_unknown_topic(self.row_topic_id(row))
        if variant == 1:
            return None, None, None, say.clear_elr_unknown_topic(self.records.column("topic_name")[row].as_py() or "")
        tid, pid = self.row_topic_id(row), self.records.column("partition_id")[row].as_py()
        if variant == 2:
            return tid, tid, pid, say.partition_of_unknown_topic(tid, pid)
        live, nm = pay.int(), pay.int()
        shown = self.lay.names[nm] if nm >= 0 else tid
        return tid, shown, pid, say.change_of_unknown_partition(tid, pid, bool(live), shown)

    def describe(self, rule: int, sev: int, row: int, pay: _Payload, topic, partition):
        lay = self.lay
        tp = f"{topic}-{partition}"
        if rule == K.TOPIC_UNIQUE:
            name = self.records.column("topic_name")[row].as_py()
            return say.topic_unique(name, self.row_topic_id(row), lay.topic_ids[pay.int()])
        if rule == K.EPOCH_MONOTONIC:
            if pay.int() == 0:
                return say.epochs_lowered(pay.int(), pay.int(), pay.int(), pay.int())
            return say.epochs_of_new_partition(pay.int(), pay.int())
        if rule == K.LRS_ENTRY:
            variant = pay.int()
            if variant == 0:
                return say.created_recovering()
            if variant == 1:
                return say.recovering_without_unclean(self.row_data(row))
            return say.recovering_below_3_2(pay.int())
        if rule == K.RECORD_NOOP:
            return say.record_noop(self.row_data(row))
        if rule == K.REPLICAS_DISTINCT:
            return say.replicas_invalid(pay.list(), pay.list(), pay.list())
        if rule == K.DIRS_LENGTH:
            return say.directories_length(pay.int(), pay.int())
        if rule == K.ISR_SUBSET:
            return say.isr_invalid(pay.list(), pay.list())
        if rule == K.LEADER_IN_ISR:
            return say.leader_not_in_isr(pay.int(), pay.list())
        if rule == K.LEADER_IN_REPLICAS:
            return say.leader_not_replica(pay.int(), pay.list())
        if rule == K.ELR_DISJOINT:
            return say.elr_overlaps_isr(pay.list(), pay.list())
        if rule == K.ELR_DISABLED_EMPTY:
            E, Kl = pay.list(), pay.list()
            mv, present, level, override = pay.int(), pay.int(), pay.int(), pay.int()
            reason = say.elr_off_reason(mv, level if present else None, None if override < 0 else bool(override))
            return say.elr_state_while_off(E, Kl, reason)
        if rule == K.ISR_EMPTY_NEEDS_ELR:
            return say.isr_emptied_while_elr_off(pay.list())
        if rule == K.ELR_SUBSET:
            return say.elr_not_replicas(pay.list(), pay.list())
        if rule == K.LKE_SINGLETON:
            return say.last_known_elr_too_long(pay.list())
        if rule == K.LKE_NEGATIVE:
            return say.last_known_elr_negative(pay.list())
        if rule == K.LKE_LEADERLESS:
            return say.last_known_elr_with_leader(pay.list(), pay.int())
        if rule == K.LRS_SINGLE_ISR:
            return say.recovering_isr(pay.int(), pay.list())
        if rule == K.BUMP_REPLICA_LOSS:
            return say.replica_loss_without_bump(pay.list(), pay.list(), pay.int())
        if rule == K.BUMP_SHRINK:
            return say.shrink_without_bump(pay.list(), pay.list(), pay.int())
        if rule == K.SPURIOUS_BUMP:
            return say.spurious_bump(pay.int(), bool(pay.int()))
        if rule == K.LRS_EXIT:
            if pay.int() == 0:
                return say.recovered_without_leader(pay.int())
            return say.recovered_with_new_leader(pay.int(), pay.int())
        if rule == K.ISR_EXPAND:
            n = pay.int()
            inactive, states = [], {}
            for _ in range(n):
                b, s = pay.int(), pay.int()
                inactive.append(b)
                states.setdefault(b, _JOINED_STATES[s])
            return say.inactive_joined_isr(inactive, states, sev == K.S_ERROR)  # ERROR: a KIP-841 controller
        if rule == K.UNCLEAN_ELECTION:
            leader, before = pay.int(), pay.int()
            return say.unclean_election(leader, tp, before, pay.list(), pay.list(), pay.list())
        if rule == K.UNCLEAN_CONFIG:
            v = pay.int()
            return say.unclean_config_off(tp, lay.values[v] if v >= 0 else None)
        if rule == K.LEADER_ACTIVE:
            return say.leader_not_active(pay.int(), tp, _LEADER_STATES[pay.int()])
        if rule == K.BROKER_EPOCH:
            what = _WHAT[int(lay.kind[row])]
            if pay.int() == 0:
                return say.broker_not_registered(what, _opt(pay.int()), _opt(pay.int()))
            return say.broker_epoch_differs(what, _opt(pay.int()), _opt(pay.int()), _opt(pay.int()))
        if rule == K.CS_STICKY:
            if pay.int() == 0:
                return say.controlled_shutdown_value(_opt(pay.int()), pay.int())
            return say.controlled_shutdown_cleared(_opt(pay.int()))
        if rule == K.REGISTER_UNCLEAN:
            bid, in_isr, in_elr = pay.int(), pay.int(), pay.int()
            return say.registered_while_member(bid, pay.list(), pay.list(), bool(in_isr), bool(in_elr))
        if rule == K.ELR_BELOW_MINISR:
            E, I = pay.list(), pay.list()
            return say.elr_kept_at_min_isr(E, I, pay.int(), bool(pay.int()), bool(pay.int()))
        if rule == K.UNDER_MINISR:
            return say.under_min_isr(pay.list(), pay.int())
        if rule == K.OFFLINE:
            return say.offline_no_candidate(pay.int(), pay.list(), pay.list())
        if rule == K.FENCE_REMOVES_ISR:
            bid, leader, kind, elr_on = pay.int(), pay.int(), pay.int(), pay.int()
            return say.still_in_isr_after_fence(bid, pay.list(), leader, ("fence", "controlled shutdown")[kind],
                                                bool(elr_on))
        if rule == K.ELR_UNCLEAN_REMOVED:
            bid, in_elr, in_isr = pay.int(), pay.int(), pay.int()
            return say.still_member_after_unclean_shutdown(bid, pay.list(), pay.list(), bool(in_elr), bool(in_isr))
        raise AssertionError(f"rule {rule} has no description")


def warm() -> None:
    """Compile the pass (or load it from numba's cache) on an empty replay, so that the first command a
    user runs does not pay the compilation (``scripts/bootstrap.sh`` calls this after installing)."""
    from controller_core.codec.bronze import SCHEMA

    check(SCHEMA.empty_table())
