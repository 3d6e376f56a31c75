"""Would Kafka accept a plan's steps?  Asked of the what-if controller, step by step.

A plan is only worth running if Kafka accepts every command in it.  Rather than re-deriving Kafka's
answers, each step is applied, in the plan's order, to the cluster image through
:class:`controller_core.rules.whatif.Run`: the same builder and trigger inputs ``kraft-audit whatif`` and
``verify`` use.  The answers are Kafka's error names (``ELECTION_NOT_NEEDED``,
``PREFERRED_LEADER_NOT_AVAILABLE``, ``ELIGIBLE_LEADERS_NOT_AVAILABLE``, ``INVALID_REPLICA_ASSIGNMENT``, ...)
or None for accepted, and the partition as the controller leaves it.
"""
from __future__ import annotations

from controller_core.image import Partition
from controller_core.rules.whatif import Run, load_cluster

Key = tuple[str, int]


class StepCheck:
    """One image, the plan's steps applied to it in order (reassignments, then elections)."""

    def __init__(self, spec: dict):
        self.run = Run(load_cluster(spec))

    def _step(self, event: dict, keys: list[Key]) -> dict[Key, str | None]:
        self.run.errors = {}
        self.run.apply(event)
        # whatif names a partition's answer "topic-partition", as Kafka's tools print it
        return {k: self.run.errors.get(f"{k[0]}-{k[1]}") for k in keys}

    def reassign(self, moves: dict[Key, list[int]]) -> dict[Key, str | None]:
        """``kafka-reassign-partitions.sh --execute`` of ``moves``: the error per partition."""
        events = [{"kind": "reassign", "topic": t, "partition": n, "replicas": list(reps)}
                  for (t, n), reps in sorted(moves.items())]
        return self._step({"kind": "sequence", "events": events}, sorted(moves))

    def elect(self, election_type: str, keys: list[Key]) -> dict[Key, str | None]:
        """``kafka-leader-election.sh --election-type preferred|unclean`` over ``keys``: the error per
        partition."""
        listed = [{"topic": t, "partition": n} for t, n in sorted(keys)]
        return self._step({"kind": "elect_leaders", "electionType": election_type.upper(), "partitions": listed},
                          sorted(keys))

    def partition(self, key: Key) -> Partition | None:
        tid = self.run.c.topic_ids.get(key[0])
        return None if tid is None else self.run.c.partitions.get((tid, key[1]))

    def leader(self, key: Key) -> int:
        p = self.partition(key)
        return -1 if p is None else p.leader

    def replica_states(self, key: Key) -> str:
        """Why a partition's election may fail, in facts: each replica's broker state and membership."""
        c, p = self.run.c, self.partition(key)
        if p is None:
            return "the partition does not exist"
        out = []
        for b in p.replicas:
            br = c.brokers.get(b)
            state = ("not registered" if br is None else "fenced" if br.fenced
                     else "in controlled shutdown" if br.in_controlled_shutdown
                     else "directory offline" if not c.dir_online(b, c.partition_dir(p, b)) else "active")
            member = [name for name, xs in (("ISR", p.isr), ("ELR", p.elr), ("LastKnownElr", p.last_known_elr))
                      if b in xs]
            out.append(f"{b} {state}" + (f" ({', '.join(member)})" if member else ""))
        return "replicas " + "; ".join(out)
