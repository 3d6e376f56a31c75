"""The simulated controller's partition decisions, written from controller-rules.md §2.

Deliberately independent of ``controller_core``: the verifier replays what this module decides and the
two must agree because both follow the rules, not because they share code.

A :class:`Part` is one partition's registration; :func:`decide` is the change builder (steps B1-B11 of
§2.1) and returns the PartitionChangeRecord body to write, or ``None``; :func:`apply_change` merges such a
body into a partition (§1.3).
"""
from __future__ import annotations

from dataclasses import dataclass

NONE = -1          # no leader
UNCHANGED = -2     # leader field "unchanged"
RECOVERED, RECOVERING = 0, 1

ONLINE, PREFERRED, UNCLEAN = "online", "preferred", "unclean"

# metadata.version feature levels that switch behaviour (§1.8)
LV_3_2_IV0, LV_3_3_IV2, LV_3_3_IV3, LV_3_6_IV0, LV_3_7_IV2, LV_4_0_IV1, LV_4_1_IV0 = 3, 6, 7, 12, 17, 23, 26

MV_LEVELS = {
    "3.0-IV1": 1, "3.1-IV0": 2, "3.2-IV0": 3, "3.3-IV0": 4, "3.3-IV1": 5, "3.3-IV2": 6, "3.3-IV3": 7,
    "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12, "3.6-IV1": 13, "3.6-IV2": 14,
    "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17, "3.7-IV3": 18, "3.7-IV4": 19, "3.8-IV0": 20, "3.9-IV0": 21,
    "4.0-IV0": 22, "4.0-IV1": 23, "4.0-IV2": 24, "4.0-IV3": 25, "4.1-IV0": 26, "4.1-IV1": 27, "4.2-IV0": 28,
}


# the fields of a registration, in the order of a Reg's key
REG_FIELDS = ("leader", "lrs", "replicas", "isr", "directories", "removing", "adding", "elr", "lke")


class Reg:
    """A partition's registration without its ids and epochs (replicas, ISR, leader, directories, reassignment,
    ELR, last known ELR, recovery state). Interned in a :class:`Registrations` pool and never mutated:
    partitions in the same state share one object (a fleet has few distinct registrations), so work that
    depends only on the registration (the builder's decision, encodings, window flags) is done once per
    registration and keyed by identity. ``idx``: its rank in the pool."""

    __slots__ = ("leader", "lrs", "replicas", "isr", "directories", "removing", "adding", "elr", "lke", "key",
                 "unsynced", "idx", "pool")

    def replace(self, **changes) -> "Reg":
        return self.pool.get(*(changes[f] if f in changes else getattr(self, f) for f in REG_FIELDS))


class Registrations:
    """An interning pool of :class:`Reg` (one per simulation): ``table[idx]`` is the registration ``idx``."""

    def __init__(self):
        self._interned: dict[tuple, Reg] = {}
        self.table: list[Reg] = []

    def get(self, leader, lrs, replicas, isr, directories, removing=(), adding=(), elr=(), lke=()) -> Reg:
        key = (leader, lrs, tuple(replicas), tuple(isr), tuple(directories), tuple(removing), tuple(adding),
               tuple(elr), tuple(lke))
        r = self._interned.get(key)
        if r is None:
            r = object.__new__(Reg)
            r.leader, r.lrs, r.key, r.pool = leader, lrs, key, self
            r.replicas, r.isr, r.directories = list(replicas), list(isr), list(directories)
            r.removing, r.adding, r.elr, r.lke = list(removing), list(adding), list(elr), list(lke)
            # the ISR is short of the replica set or the leader is still RECOVERING: a follower may catch up
            r.unsynced = len(r.isr) != len(r.replicas) or lrs != RECOVERED
            r.idx = len(self.table)
            self.table.append(r)
            self._interned[key] = r
        return r


DEFAULT_POOL = Registrations()  # for partitions made outside a simulation


def _reg_property(name: str):
    def get(p):
        return getattr(p.reg, name)

    def put(p, value):
        p.reg = p.reg.replace(**{name: value})
    return property(get, put, doc=f"the registration's {name} (read-only list shared with other partitions)")


class Part:
    """One partition: topic id, partition id, epochs and its :class:`Reg` (whose fields read as attributes of
    the partition; assigning one interns the new registration). ``key`` is ``(topic_id, pid)``; ``ordinal`` is
    for the simulator (its creation rank)."""

    __slots__ = ("topic_id", "pid", "reg", "leader_epoch", "partition_epoch", "key", "ordinal")

    def __init__(self, topic_id: str, pid: int, replicas: list[int], isr: list[int], leader: int,
                 directories: list[str], leader_epoch: int = 0, partition_epoch: int = 0, removing=(), adding=(),
                 elr=(), lke=(), lrs: int = RECOVERED, pool: Registrations = DEFAULT_POOL):
        self.topic_id, self.pid, self.key, self.ordinal = topic_id, pid, (topic_id, pid), -1
        self.leader_epoch, self.partition_epoch = leader_epoch, partition_epoch
        self.reg = pool.get(leader, lrs, replicas, isr, directories, removing, adding, elr, lke)

    @classmethod
    def with_reg(cls, topic_id: str, pid: int, reg: Reg, leader_epoch: int = 0, partition_epoch: int = 0) -> "Part":
        p = object.__new__(cls)
        p.topic_id, p.pid, p.reg, p.key, p.ordinal = topic_id, pid, reg, (topic_id, pid), -1
        p.leader_epoch, p.partition_epoch = leader_epoch, partition_epoch
        return p

    leader = _reg_property("leader")
    lrs = _reg_property("lrs")
    replicas = _reg_property("replicas")
    isr = _reg_property("isr")
    directories = _reg_property("directories")
    removing = _reg_property("removing")
    adding = _reg_property("adding")
    elr = _reg_property("elr")
    lke = _reg_property("lke")


@dataclass
class Ask:
    """What a trigger asks of the builder (the inputs of §2.1)."""

    election: str
    acceptable: object                 # callable(broker) -> bool
    elr: bool
    min_isr: int
    mv: int
    target_isr: list[int] | None = None
    target_replicas: list[int] | None = None
    target_removing: list[int] | None = None
    target_adding: list[int] | None = None
    target_lrs: int | None = None
    unclean_brokers: frozenset = frozenset()
    default_dir: object = None         # callable(broker) -> directory id, for new replicas


def change_version(mv: int) -> int:
    return 2 if mv >= LV_4_0_IV1 else 1 if mv >= LV_3_7_IV2 else 0


def _without(xs, drop) -> list[int]:
    return [x for x in xs if x not in drop]


def decide(p: Part, a: Ask) -> tuple[dict | None, bool]:
    """The model controller's decision for one partition: the assignment and ISR the request asks for, the
    ELR they leave, the leader, then the change record -- every field whose value moves, plus the leader
    re-written where the epoch must be bumped.  Returns (record body or None, leader from outside ISR/ELR?)."""
    def pick(target, current):
        return list(current if target is None else target)

    isr, rep = pick(a.target_isr, p.isr), pick(a.target_replicas, p.replicas)
    rem, add = pick(a.target_removing, p.removing), pick(a.target_adding, p.adding)
    if rem or add:  # the reassignment is over once the staying ISR holds every staying replica
        stay_isr, stay_rep = _without(isr, rem), _without(rep, rem)
        emptied = bool(rem) and not (stay_isr and stay_rep)
        if not emptied and set(stay_rep).issubset(stay_isr):
            isr, rep, rem, add = stay_isr, stay_rep, [], []
    if not a.elr:
        elr = list(p.elr)
    elif len(isr) >= a.min_isr:
        elr = []
    else:  # members leaving the ISR wait in the ELR, unless their shutdown was unclean
        elr = sorted(set(p.elr).union(p.isr).difference(isr, a.unclean_brokers))
    leader, unclean = _elect(p, a, isr, rep, elr)

    rec: dict = {}
    if leader == p.leader:
        if not set(p.replicas).issubset(rep):  # a replica left: the leader epoch moves anyway
            rec["leader"] = p.leader
    else:
        rec["leader"] = leader
        if leader in elr:  # taken from the ELR: it alone is in sync now
            isr = [leader]
            elr.remove(leader)
        if unclean:
            rec["isr"] = [leader]
            if a.mv >= LV_3_2_IV0 and p.lrs != RECOVERING:
                rec["leaderRecoveryState"] = RECOVERING
    elr_out = [] if (unclean or not a.elr) else elr
    if elr_out != p.elr:
        rec["eligibleLeaderReplicas"] = elr_out
    if "isr" not in rec and isr != p.isr and (a.elr or len(isr) > 0):
        rec["isr"] = isr
    shrunk = not set(p.isr).issubset(isr)
    if a.mv < LV_3_6_IV0 and shrunk and "leader" not in rec:  # old versions bump on every shrink
        rec["leader"] = p.leader
    if a.elr:
        lead = rec.get("leader", UNCHANGED)
        had_leader_after = lead >= 0 or (lead != NONE and p.leader != NONE)
        if rec.get("isr") == [] and p.lke != [p.leader]:
            rec["lastKnownElr"] = [p.leader]
        elif p.lke and had_leader_after:
            rec["lastKnownElr"] = []
    if rep:
        moves = []
        if a.mv >= LV_3_7_IV2:
            moves.append(("directories", [a.default_dir(b) if b not in p.replicas else
                                          p.directories[p.replicas.index(b)] for b in rep], p.directories))
        moves += [("replicas", rep, p.replicas), ("removingReplicas", rem, p.removing),
                  ("addingReplicas", add, p.adding)]
        rec.update((key, new) for key, new, old in moves if new != old)
    if a.target_lrs not in (None, p.lrs):
        rec["leaderRecoveryState"] = a.target_lrs
    if not rec:
        return None, False
    return {"partitionId": p.pid, "topicId": p.topic_id, **rec}, unclean


def _elect(p: Part, a: Ask, t_isr, t_rep, elr) -> tuple[int, bool]:
    """The leader the model elects, as tiers tried in order: clean candidates (the sitting leader and the
    replicas, the first replica first for a preferred election) among the eligible (the target ISR, or the
    ELR when the ISR is empty); then the single last known leader; then, for an unclean election, any
    acceptable replica.  Returns (leader, unclean?)."""
    eligible = set(t_isr) if t_isr else set(elr)
    sitting = [p.leader] if p.leader != NONE else []
    order = t_rep[:1] + sitting + t_rep[1:] if a.election == PREFERRED else sitting + list(t_rep)
    clean = [b for b in order if b in eligible and a.acceptable(b)]
    if clean:
        return clean[0], False
    # Balanced-recovery stand-in; 4.x elects the last known leader only when it is acceptable
    lone = p.lke[0] if len(p.lke) == 1 else NONE
    if a.elr and not t_isr and not elr and lone >= 0 and a.acceptable(lone):
        return lone, True
    if a.election == UNCLEAN:
        anyone = [b for b in t_rep if a.acceptable(b)]
        if anyone:
            return anyone[0], True
    return NONE, False


_LIST_FIELDS = {"isr": "isr", "replicas": "replicas", "removingReplicas": "removing",
                "addingReplicas": "adding", "directories": "directories", "eligibleLeaderReplicas": "elr",
                "lastKnownElr": "lke"}


def changed(reg: Reg, d: dict) -> tuple[Reg, int]:
    """§1.3 on a registration: (the registration after the change body ``d``, 1 if it writes a leader)."""
    changes = {}
    bump = 0
    for key, v in d.items():  # only the fields present; each field is independent of the others
        attr = _LIST_FIELDS.get(key)
        if attr is not None:
            if v is not None:
                changes[attr] = v
        elif key == "leader":
            if v != UNCHANGED:
                changes["leader"] = v
                bump = 1
        elif key == "leaderRecoveryState":
            if v != -1:
                changes["lrs"] = v
    return (reg.replace(**changes) if changes else reg), bump


def apply_change(p: Part, d: dict) -> None:
    """§1.3: merge a change body into ``p`` in place (PE +1 always, LE +1 when a leader is written)."""
    p.reg, bump = changed(p.reg, d)
    p.leader_epoch += bump
    p.partition_epoch += 1


def partition_record(p: Part, mv: int) -> tuple[str, int, dict]:
    """The PartitionRecord of a snapshot or of a creation (§1.2-6)."""
    version = change_version(mv)
    d = {"partitionId": p.pid, "topicId": p.topic_id, "replicas": list(p.replicas), "isr": list(p.isr),
         "removingReplicas": list(p.removing), "addingReplicas": list(p.adding), "leader": p.leader,
         "leaderRecoveryState": p.lrs, "leaderEpoch": p.leader_epoch, "partitionEpoch": p.partition_epoch}
    if version >= 1:
        d["directories"] = list(p.directories)
    if version >= 2:
        if p.elr:
            d["eligibleLeaderReplicas"] = list(p.elr)
        if p.lke:
            d["lastKnownElr"] = list(p.lke)
    return ("PARTITION_RECORD", version, d)
