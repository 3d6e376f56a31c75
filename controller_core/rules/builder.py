"""The controller's change builder and leader election, one partition at a time (scalar reference).

Each step is named after controller-rules.md §2.1 (B1-B11) and §2.3 so the code can be read next to
the spec.  ``build`` returns the PartitionChangeRecord the controller would write (Kafka JSON form,
only the fields it writes) or None when it would write nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from controller_core.image import (
    MIGRATING, MV_3_2_IV0, MV_3_6_IV0, MV_3_7_IV2, NO_LEADER, RECOVERING, UNASSIGNED, Partition, replica_dirs,
)

PREFERRED, ONLINE, UNCLEAN = "PREFERRED", "ONLINE", "UNCLEAN"


@dataclass
class Inputs:
    """What a trigger hands the builder (§2.2); None targets default to the partition's values."""

    acceptable: Callable[[int], bool]
    min_isr: int
    elr_enabled: bool
    metadata_version: int
    election: str = ONLINE
    target_isr: list[int] | None = None
    target_replicas: list[int] | None = None
    target_removing: list[int] | None = None
    target_adding: list[int] | None = None
    target_lrs: int | None = None
    unclean_shutdown: frozenset[int] = frozenset()
    # [LATER] (Kafka 4.0+): the last known leader is elected only if acceptable (§2.3 step 3)
    check_last_known_leader: bool = True
    # B10: the directory of a replica new to the partition (the controller's is Cluster.default_dir); a
    # caller without a cluster image gets UNASSIGNED, as Kafka's own builder tests use
    default_dir: Callable[[int], str] = field(default=lambda b: UNASSIGNED)


def _minus(xs, drop) -> list[int]:
    drop = set(drop)
    return [x for x in xs if x not in drop]


def elect(p: Partition, inp: Inputs, t_isr: list[int], t_replicas: list[int], elr: list[int]) -> tuple[int, bool]:
    """§2.3: (new leader, unclean?) for the targets after B1-B2."""

    def valid(b: int) -> bool:
        return inp.acceptable(b) and (b in t_isr or (not t_isr and b in elr))

    def last_known_leader():
        # step 3, the Balanced-recovery stand-in: elect the single LastKnownElr member
        if inp.elr_enabled and not t_isr and not elr and len(p.last_known_elr) == 1:
            b = p.last_known_elr[0]
            if not inp.check_last_known_leader or inp.acceptable(b):
                return b
        return None

    if inp.election == PREFERRED:
        if t_replicas and valid(t_replicas[0]):
            return t_replicas[0], False
        if p.leader != NO_LEADER and valid(p.leader):
            return p.leader, False
        for b in t_replicas[1:]:
            if valid(b):
                return b, False
        lkl = last_known_leader()
        return (lkl, True) if lkl is not None else (NO_LEADER, False)

    if p.leader != NO_LEADER and valid(p.leader):
        return p.leader, False
    for b in t_replicas:
        if valid(b):
            return b, False
    lkl = last_known_leader()
    if lkl is not None:
        return lkl, True
    if inp.election == UNCLEAN:
        for b in t_replicas:
            if inp.acceptable(b):
                return b, True
    return NO_LEADER, False


def build(p: Partition, inp: Inputs) -> dict | None:
    t_isr = list(p.isr if inp.target_isr is None else inp.target_isr)
    t_rep = list(p.replicas if inp.target_replicas is None else inp.target_replicas)
    t_rem = list(p.removing if inp.target_removing is None else inp.target_removing)
    t_add = list(p.adding if inp.target_adding is None else inp.target_adding)
    t_lrs = p.lrs if inp.target_lrs is None else inp.target_lrs
    elr = list(p.elr)
    out: dict = {}

    # B1 reassignment completion
    if t_rem or t_add:
        isr2, rep2 = _minus(t_isr, t_rem), _minus(t_rep, t_rem)
        if not (t_rem and (not isr2 or not rep2)) and set(rep2) <= set(isr2):
            t_isr, t_rep, t_rem, t_add = isr2, rep2, [], []

    # B2 ELR target (the LastKnownElr reset here belongs to the test-only mode, see B9)
    if inp.elr_enabled:
        if len(t_isr) >= inp.min_isr:
            elr = []
        else:
            elr = sorted((set(p.elr) | set(p.isr)) - set(t_isr) - set(inp.unclean_shutdown))

    # B3 election, B4 apply it
    node, unclean = elect(p, inp, t_isr, t_rep, elr)
    if node != p.leader:
        if node in elr:
            t_isr = [node]
            elr = [b for b in elr if b != node]
        out["leader"] = node
        if unclean:
            out["isr"] = [node]
            if p.lrs != RECOVERING and inp.metadata_version >= MV_3_2_IV0:
                out["leaderRecoveryState"] = RECOVERING

    # B5 replica-loss bump
    if "leader" not in out and not set(p.replicas) <= set(t_rep):
        out["leader"] = p.leader

    # B6 ELR field (sets: Kafka's order is HashSet order, which carries no meaning)
    if "isr" in out or not inp.elr_enabled:
        elr = []
    if set(elr) != set(p.elr):
        out["eligibleLeaderReplicas"] = elr

    # B7 ISR field
    if "isr" not in out and (t_isr or inp.elr_enabled) and t_isr != p.isr:
        out["isr"] = t_isr

    # B8 old-MV shrink bump (KAFKA-15021)
    if inp.metadata_version < MV_3_6_IV0 and "leader" not in out and not set(p.isr) <= set(t_isr):
        out["leader"] = p.leader

    # B9 LastKnownElr (production mode: the last known leader)
    if inp.elr_enabled:
        new_leader = out.get("leader")
        if out.get("isr") == [] and p.last_known_elr != [p.leader]:
            out["lastKnownElr"] = [p.leader]
        elif p.last_known_elr and ((new_leader is not None and new_leader >= 0)
                                   or (p.leader != NO_LEADER and new_leader != NO_LEADER)):
            out["lastKnownElr"] = []

    # B10 assignment: a replica keeps its current directory (MIGRATING when the partition has none); a
    # replica new to the partition gets the broker's default directory (Cluster.default_dir)
    if t_rep:
        if inp.metadata_version >= MV_3_7_IV2:
            current = replica_dirs(p.directories, len(p.replicas))
            if len(current) != len(p.replicas):
                current = [MIGRATING] * len(p.replicas)
            dirs = [current[p.replicas.index(b)] if b in p.replicas else inp.default_dir(b) for b in t_rep]
            if dirs != current:
                out["directories"] = dirs
        if t_rep != p.replicas:
            out["replicas"] = t_rep
    if t_rem != p.removing:
        out["removingReplicas"] = t_rem
    if t_add != p.adding:
        out["addingReplicas"] = t_add
    if t_lrs != p.lrs:
        out["leaderRecoveryState"] = t_lrs

    # B11 nothing to write
    return out or None
