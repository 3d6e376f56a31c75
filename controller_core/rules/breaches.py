"""What each §4 invariant breach says: the ``recorded`` and ``expected`` values and the operator's sentence.

One builder per breach variant, fed plain values (broker-id lists, ints, names).  Two callers decide
*when* a rule is broken -- the scalar reference (:mod:`controller_core.rules.invariants`) and the
compiled pass (:mod:`controller_core.kernels.invariants`) -- and both describe the breach here, so the
two can only differ in their verdicts, never in their words.

Every builder returns ``(recorded, expected, message)``; ``recorded`` and ``expected`` are JSON-able.
"""
from __future__ import annotations

from controller_core.image import ELR_FEATURE, LEADER_UNCHANGED, MV_4_0_IV1, RECOVERED, RECOVERING


def _dups(xs) -> list[int]:
    seen, out = set(), []
    for x in xs:
        if x in seen and x not in out:
            out.append(x)
        seen.add(x)
    return out


def elr_off_reason(mv: int, elr_feature: int | None, override: bool | None) -> str:
    """Why ELR is not in effect at this point of the log (§1.8), for INV-ELR-DISABLED-EMPTY's message."""
    if mv < MV_4_0_IV1:
        return f"metadata.version {mv} < 4.0-IV1"
    if elr_feature is not None:
        return f"{ELR_FEATURE} is {elr_feature}"
    if override is False:
        return "ELR was declared off"
    return "no earlier evidence of ELR; the auditor now infers ELR on from this record"


# ------------------------------------------------------------------------------------------ topics
def topic_unique(name, topic_id, live_id):
    return ({"name": name, "topicId": topic_id}, {"liveTopicId": live_id},
            f"TopicRecord creates topic {name!r} while a topic of that name is live "
            f"(id {live_id}); the name must be deleted first")


def remove_unknown_topic(topic_id):
    return ({"topicId": topic_id}, "a live topic id",
            f"RemoveTopicRecord deletes topic id {topic_id}, which is not a live topic")


def clear_elr_unknown_topic(name):
    return {"topicName": name}, "a live topic name", f"ClearElrRecord names topic {name!r}, which is not a live topic"


def partition_of_unknown_topic(topic_id, partition_id):
    return ({"topicId": topic_id}, "a live topic id",
            f"PartitionRecord for partition {partition_id} of topic id {topic_id}, which is not a live topic")


def change_of_unknown_partition(topic_id, partition_id, topic_live: bool, topic):
    what = f"partition {partition_id} of topic" if topic_live else "topic id"
    return ({"topicId": topic_id, "partitionId": partition_id}, "a live partition",
            f"PartitionChangeRecord for a {what} that does not exist ({topic}-{partition_id})")


# ------------------------------------------------------------------------------------------ partition records
def epochs_lowered(le, pe, before_le, before_pe):
    return ({"leaderEpoch": le, "partitionEpoch": pe}, {"leaderEpoch>=": before_le, "partitionEpoch>=": before_pe},
            f"PartitionRecord for an existing partition lowers its epochs from "
            f"{before_le}/{before_pe} to {le}/{pe} (leader/partition)")


def epochs_of_new_partition(le, pe):
    return ({"leaderEpoch": le, "partitionEpoch": pe}, {"leaderEpoch": 0, "partitionEpoch": 0},
            f"new partition created with leader/partition epochs {le}/{pe}; the controller creates partitions at 0/0")


def created_recovering():
    return (RECOVERING, RECOVERED, "new partition created in leader recovery state RECOVERING; the controller "
                                   "creates partitions RECOVERED")


def record_noop(data):
    return (data, "at least one field changed",
            "PartitionChangeRecord with every field \"unchanged\"; the controller never writes an empty change")


# ------------------------------------------------------------------------------------------ state a record leaves
def replicas_invalid(R, removing, adding):
    """INV-REPLICAS-DISTINCT, or None when the assignment is valid."""
    bad = []
    if _dups(R):
        bad.append(f"duplicate replicas {_dups(R)}")
    if any(x < 0 for x in R):
        bad.append("negative replica ids")
    if set(removing) - set(R):
        bad.append(f"removing replicas {sorted(set(removing) - set(R))} not in the replica set")
    if set(adding) - set(R):
        bad.append(f"adding replicas {sorted(set(adding) - set(R))} not in the replica set")
    if set(removing) & set(adding):
        bad.append(f"replicas {sorted(set(removing) & set(adding))} both removing and adding")
    if not bad:
        return None
    return ({"replicas": R, "removingReplicas": removing, "addingReplicas": adding},
            "distinct non-negative replicas; removing, adding ⊆ replicas and disjoint",
            "replica assignment is invalid: " + "; ".join(bad))


def directories_length(n_dirs, n_replicas):
    return ({"directories": n_dirs, "replicas": n_replicas}, f"0 or {n_replicas} directories",
            f"{n_dirs} directories written for {n_replicas} replicas; each replica needs one")


def isr_invalid(I, R):
    """INV-ISR-SUBSET-REPLICAS, or None when the ISR is a set of replicas."""
    bad = []
    if _dups(I):
        bad.append(f"duplicate members {_dups(I)}")
    if any(x < 0 for x in I):
        bad.append("negative ids")
    if set(I) - set(R):
        bad.append(f"members {sorted(set(I) - set(R))} that are not replicas")
    if not bad:
        return None
    return {"isr": I, "replicas": R}, "ISR ⊆ replicas, distinct, non-negative", "ISR has " + "; ".join(bad)


def leader_not_in_isr(L, I):
    return {"leader": L, "isr": I}, "leader ∈ ISR", f"leader {L} is not in the ISR {I}"


def leader_not_replica(L, R):
    return ({"leader": L, "replicas": R}, "leader = -1 or leader ∈ replicas",
            f"leader {L} is not a replica of the partition {R}")


def elr_overlaps_isr(I, E):
    return ({"isr": I, "elr": E}, "ELR ∩ ISR = ∅", f"brokers {sorted(set(E) & set(I))} are in both the ISR and the ELR")


def elr_state_while_off(E, K, reason):
    return ({"elr": E, "lastKnownElr": K}, {"elr": [], "lastKnownElr": []},
            f"ELR state written while ELR is not in effect ({reason})")


def isr_emptied_while_elr_off(I):
    return (I, "a non-empty ISR", "ISR written as [] while ELR is not in effect; without ELR the last ISR "
                                  "member stays in the ISR")


def elr_not_replicas(E, R):
    return ({"elr": E, "replicas": R}, "ELR ⊆ replicas",
            f"ELR members {sorted(set(E) - set(R))} are no longer replicas (a reassignment removed them)")


def last_known_elr_too_long(K):
    return K, "at most one member", f"LastKnownElr {K} holds more than the last known leader"


def last_known_elr_negative(K):
    return (K, "a broker id", f"LastKnownElr is {K}: the ISR emptied on a partition that already had no "
                              "leader (Kafka quirk), so no last leader is known")


def last_known_elr_with_leader(K, L):
    return ({"lastKnownElr": K, "leader": L}, {"lastKnownElr": [], "leader": L},
            f"LastKnownElr {K} kept while the partition has leader {L}")


def recovering_isr(L, I):
    return ({"leader": L, "isr": I}, "ISR = [leader] or (leader = -1 and |ISR| <= 1)",
            f"partition in leader recovery (RECOVERING) has ISR {I} with leader {L}; "
            "recovery allows only the leader in the ISR")


# ------------------------------------------------------------------------------------------ transitions
def replica_loss_without_bump(before_R, after_R, before_L):
    return ({"replicas": after_R, "leader": LEADER_UNCHANGED}, {"leader": before_L},
            f"replicas {sorted(set(before_R) - set(after_R))} removed without a leader "
            "epoch bump; the controller re-writes the leader when the replica set loses a member")


def shrink_without_bump(before_I, after_I, before_L):
    return ({"isr": after_I, "leader": LEADER_UNCHANGED}, {"leader": before_L},
            f"ISR shrank from {before_I} to {after_I} without a leader epoch bump, which "
            "metadata.version < 3.6-IV0 always carries (KAFKA-15021)")


def spurious_bump(leader, old_mv: bool):
    return ({"leader": leader}, {"leader": LEADER_UNCHANGED},
            f"leader field re-writes the current leader {leader} (leader epoch bump) although no replica was removed"
            + (" and no ISR member was dropped" if old_mv else ""))


def recovering_without_unclean(data):
    return ({k: data[k] for k in ("leader", "isr", "leaderRecoveryState") if k in data},
            "an unclean election: leader >= 0 not in the previous ISR/ELR, isr = [leader]",
            "partition entered leader recovery (RECOVERING) without an unclean election")


def recovering_below_3_2(mv):
    return ({"metadata.version": mv}, ">= 3.2-IV0",
            f"unclean election set RECOVERING at metadata.version {mv}, below 3.2-IV0 where the controller does not")


def recovered_without_leader(before_L):
    return ({"leader": before_L}, "a sitting leader", "leader recovery ended (RECOVERED) on a partition without a "
                                                      "leader; only the leader's AlterPartition ends it")


def recovered_with_new_leader(leader, before_L):
    return ({"leader": leader}, {"leader": before_L},
            f"leader recovery ended in a record that also moves leadership from {before_L} "
            f"to {leader}; the sitting leader's AlterPartition keeps the leader")


def inactive_joined_isr(inactive, states: dict, kip841: bool):
    tail = ("AlterPartition only admits active brokers (KIP-841)" if kip841 else
            "normal before Kafka 3.3 (no metadata.version record), whose controller admitted fenced brokers")
    return ({str(b): s for b, s in states.items()}, "active (registered, unfenced, not in controlled shutdown)",
            f"brokers {inactive} joined the ISR while " + ", ".join(f"{b} was {s}" for b, s in states.items())
            + f"; {tail}")


# ------------------------------------------------------------------------------------------ elections
def _previous(before_L, I, E, K):
    return {"previousLeader": before_L, "previousIsr": I, "previousElr": E, "previousLastKnownElr": K}


def unclean_election(leader, tp, before_L, I, E, K):
    return ({"leader": leader, **_previous(before_L, I, E, K)}, "a leader from the ISR or ELR",
            f"unclean election of broker {leader} for {tp}: previous ISR {I}, ELR {E}, LastKnownElr {K}; records "
            "only they held may be lost")


def unclean_config_off(tp, value):
    return ({"unclean.leader.election.enable": value}, "true",
            f"unclean election for {tp} while its unclean.leader.election.enable resolves to false in the log: an "
            "admin UNCLEAN election, the last-known-leader path, or a static broker config the log cannot show")


def leader_not_active(leader, tp, state):
    return {"leader": leader, "broker": state}, "an active broker", f"broker {leader} became leader of {tp} while {state}"


# ------------------------------------------------------------------------------------------ brokers
def broker_not_registered(what, bid, epoch):
    return {"brokerId": bid, "brokerEpoch": epoch}, "a registered broker", f"{what} for broker {bid}, which is not registered"


def broker_epoch_differs(what, bid, epoch, registered_epoch):
    return ({"brokerId": bid, "brokerEpoch": epoch}, {"brokerEpoch": registered_epoch},
            f"{what} for broker {bid} carries epoch {epoch}, but its registration has epoch {registered_epoch}")


def controlled_shutdown_value(bid, cs):
    return ({"inControlledShutdown": cs}, [0, 1],
            f"BrokerRegistrationChangeRecord for broker {bid} writes inControlledShutdown={cs}; only 1 (enter) and 0 "
            "(no change) exist, controlled shutdown ends only with a new registration")


def controlled_shutdown_cleared(bid):
    return ({"inControlledShutdown": False}, {"inControlledShutdown": True},
            f"RegisterBrokerRecord re-registering the same incarnation of broker {bid} "
            "clears its controlled shutdown; an amended registration keeps it")


def registered_while_member(bid, I, E, in_isr: bool, in_elr: bool):
    where = " and ".join(x for x, f in (("ISR", in_isr), ("ELR", in_elr)) if f)
    return ({"isr": I, "elr": E}, {"isr": [x for x in I if x != bid], "elr": [x for x in E if x != bid]},
            f"broker {bid} registers a new incarnation while still in the {where}; at metadata.version >= "
            "4.0-IV1 its batch should first remove it (unclean-shutdown handling"
            + ("; a 4.1+ controller keeps ELR membership after a clean shutdown, which this log shows only as a "
               "controlled shutdown before the restart)" if in_elr and not in_isr else ")"))


# ------------------------------------------------------------------------------------------ after a batch
def elr_kept_at_min_isr(E, I, m, stale: bool, known: bool):
    note = (f" (min ISR changed to {m} since the partition's previous record; ELR is only re-evaluated "
            "when the partition is rebuilt)" if stale else
            " (no min.insync.replicas in the log: the controller's static config may set a higher value)"
            if not known else "")
    return ({"elr": E, "isr": I, "minIsr": m}, f"ELR = [] while |ISR| >= {m}",
            f"ELR {E} kept while the ISR {I} has at least min ISR {m} members" + note)


def under_min_isr(I, m):
    return ({"isr": I, "minIsr": m}, f"|ISR| >= {m}",
            f"ISR {I} is below min ISR {m}: producers with acks=all are rejected until it grows back")


def offline_no_candidate(L, I, E):
    return ({"leader": L, "isr": I, "elr": E}, "a leader, an ISR member or an ELR member",
            "partition is offline with an empty ISR and ELR: only an unclean (or recovery) election can bring it back")


def still_in_isr_after_fence(bid, I, L, kind, elr_on: bool):
    return ({"isr": I, "leader": L}, {"isr": [x for x in I if x != bid]},
            f"broker {bid} is still in the ISR {I} after its {kind}; the controller removes it "
            + ("(ELR on: even the last member)" if elr_on else "unless it is the last member of a leaderless ISR"))


def still_member_after_unclean_shutdown(bid, I, E, in_elr: bool, in_isr: bool):
    where = " and ".join(x for x, f in (("ELR", in_elr), ("ISR", in_isr)) if f)
    return ({"isr": I, "elr": E}, {"isr": [x for x in I if x != bid], "elr": [x for x in E if x != bid]},
            f"broker {bid} is still in the {where} after the batch that handled its unclean shutdown")
