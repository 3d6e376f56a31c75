"""controller-rules.md §1.3 and §2: the scalar change builder and merge, one test per rule.

Expected records are written out from the spec's text, not computed."""
from __future__ import annotations

import pytest

from controller_core.rules.builder import ONLINE, PREFERRED, UNCLEAN, Inputs, build, elect
from controller_core.image import MIGRATING, Partition, merge

T = "AAAAAAAAAAAAAAAAAAAAAQ"


def part(replicas=(1, 2, 3), isr=None, leader=None, le=5, pe=9, elr=(), lke=(), lrs=0, removing=(), adding=()):
    replicas = list(replicas)
    isr = list(replicas if isr is None else isr)
    return Partition(T, 0, replicas, isr, isr[0] if leader is None and isr else (-1 if leader is None else leader),
                     le, pe, list(removing), list(adding), list(elr), list(lke), lrs, [MIGRATING] * len(replicas))


def inputs(active=(1, 2, 3), exclude=None, include=None, m=2, elr=False, mv=21, **kw):
    def acceptable(b):
        return b != exclude and (b in active or b == include)
    return Inputs(acceptable=acceptable, min_isr=m, elr_enabled=elr, metadata_version=mv, **kw)


# --------------------------------------------------------------------------------- §1.3 merge
def test_leader_field_other_than_minus_two_bumps_leader_epoch_even_for_the_same_leader():
    p = part(leader=1)
    assert merge(p, {"leader": 1}).leader_epoch == 6
    assert merge(p, {"leader": -1}).leader_epoch == 6
    assert merge(p, {"leader": -2}).leader_epoch == 5


def test_partition_epoch_bumps_on_every_change_record():
    p = part()
    assert merge(p, {"isr": [1, 2]}).partition_epoch == 10
    assert merge(p, {"directories": ["AAAAAAAAAAAAAAAAAAAAAQ"] * 3}).partition_epoch == 10
    assert merge(p, {"eligibleLeaderReplicas": [2]}).partition_epoch == 10


def test_empty_isr_is_a_change_and_null_is_not():
    p = part()
    assert merge(p, {"isr": []}).isr == []
    assert merge(p, {"isr": None}).isr == [1, 2, 3]


# ---------------------------------------------------------------------------- §2.1 the builder
def test_isr_shrink_does_not_bump_leader_epoch_from_3_6():
    p = part(leader=1)
    assert build(p, inputs(mv=12, target_isr=[1, 2])) == {"isr": [1, 2]}


def test_isr_shrink_re_sets_the_leader_before_3_6_kafka_15021():
    p = part(leader=1)
    assert build(p, inputs(mv=11, target_isr=[1, 2])) == {"leader": 1, "isr": [1, 2]}


def test_fencing_the_sole_isr_member_of_a_leaderless_partition_before_3_6_writes_leader_minus_one():
    p = part(isr=[3], leader=-1)
    assert build(p, inputs(mv=5, active=(1, 2), exclude=3, target_isr=[])) == {"leader": -1}
    assert build(p, inputs(mv=12, active=(1, 2), exclude=3, target_isr=[])) is None


def test_with_elr_off_an_empty_isr_is_never_written_and_the_last_member_stays():
    p = part(isr=[2], leader=2)
    assert build(p, inputs(mv=21, active=(1, 3), exclude=2, target_isr=[])) == {"leader": -1}


def test_with_elr_on_the_current_isr_feeds_the_elr_below_min_isr():
    p = part(isr=[1, 2], leader=1)
    out = build(p, inputs(mv=23, elr=True, active=(1, 3), exclude=2, target_isr=[1]))
    assert out == {"eligibleLeaderReplicas": [2], "isr": [1]}


def test_elr_and_last_known_elr_are_cleared_once_the_target_isr_reaches_min_isr():
    p = part(isr=[1], leader=1, elr=[2])
    assert build(p, inputs(mv=23, elr=True, target_isr=[1, 3])) == {"eligibleLeaderReplicas": [], "isr": [1, 3]}


def test_last_known_elr_records_the_last_leader_when_the_isr_empties():
    p = part(replicas=(1,), isr=[1], leader=1)
    out = build(p, inputs(mv=29, elr=True, active=(), exclude=1, m=1, target_isr=[]))
    assert out == {"leader": -1, "eligibleLeaderReplicas": [1], "isr": [], "lastKnownElr": [1]}


def test_last_known_elr_is_minus_one_when_the_isr_empties_on_a_leaderless_partition():
    p = part(isr=[2], leader=-1)
    out = build(p, inputs(mv=29, elr=True, active=(1,), exclude=2, m=2, target_isr=[]))
    assert out == {"eligibleLeaderReplicas": [2], "isr": [], "lastKnownElr": [-1]}


def test_reassignment_completes_when_the_isr_covers_the_new_replicas():
    p = part(replicas=(1, 2, 3, 4), isr=[1, 2, 3, 4], leader=1, removing=[4], adding=[])
    out = build(p, inputs(mv=16, target_isr=[1, 2, 3, 4]))
    assert out == {"leader": 1, "isr": [1, 2, 3], "replicas": [1, 2, 3], "removingReplicas": []}
    # from 3.7-IV2 the directory list follows the replica list (B10)
    out = build(p, inputs(mv=17, target_isr=[1, 2, 3, 4]))
    assert out["directories"] == [MIGRATING] * 3


def test_losing_a_replica_bumps_the_leader_epoch_with_the_same_leader():
    p = part(replicas=(1, 2, 3), leader=1)
    assert build(p, inputs(target_replicas=[1, 2], target_isr=[1, 2]))["leader"] == 1


def test_a_change_that_changes_nothing_writes_no_record():
    assert build(part(), inputs()) is None


# --------------------------------------------------------------------------- §2.3 election order
def test_current_leader_is_kept_while_valid():
    p = part(replicas=(1, 2, 3), isr=[1, 2, 3], leader=3)
    assert elect(p, inputs(), [1, 2, 3], [1, 2, 3], []) == (3, False)


def test_new_leader_follows_replica_order_not_isr_order():
    p = part(replicas=(1, 2, 3), isr=[3, 2, 1], leader=1)
    # leader 1 fenced: ISR order would pick 3, replica order picks 2
    assert build(p, inputs(active=(2, 3), exclude=1, target_isr=[3, 2])) == {"leader": 2, "isr": [3, 2]}


def test_an_elr_member_becomes_leader_only_when_the_isr_is_empty_and_forms_isr_of_one():
    p = part(replicas=(1, 2, 3), isr=[], leader=-1, elr=[2, 3], lke=[1])
    out = build(p, inputs(mv=29, elr=True, active=(2, 3), m=2))
    assert out == {"leader": 2, "eligibleLeaderReplicas": [3], "isr": [2], "lastKnownElr": []}


def test_unclean_election_takes_the_first_acceptable_replica_and_marks_recovering():
    p = part(replicas=(1, 2, 3), isr=[1], leader=-1)
    out = build(p, inputs(active=(2, 3), election=UNCLEAN))
    assert out == {"leader": 2, "isr": [2], "leaderRecoveryState": 1}


def test_unclean_election_before_3_2_does_not_set_recovering():
    p = part(replicas=(1, 2, 3), isr=[1], leader=-1)
    assert build(p, inputs(mv=2, active=(2, 3), election=UNCLEAN)) == {"leader": 2, "isr": [2]}


def test_a_recovering_partition_stays_recovering_across_a_clean_election():
    p = part(replicas=(1, 2), isr=[1], leader=-1, lrs=1)
    assert build(p, inputs(active=(1, 2), election=ONLINE)) == {"leader": 1}


def test_preferred_election_never_goes_unclean_even_when_the_topic_allows_it():
    p = part(replicas=(1, 2, 3), isr=[1], leader=-1)
    assert build(p, inputs(active=(2, 3), election=PREFERRED)) is None


def test_preferred_election_moves_leadership_to_the_first_replica():
    p = part(replicas=(1, 2, 3), isr=[1, 2, 3], leader=2)
    assert build(p, inputs(election=PREFERRED)) == {"leader": 1}


@pytest.mark.parametrize("check, expected", [(False, {"leader": 1, "isr": [1], "leaderRecoveryState": 1,
                                                      "lastKnownElr": []}),
                                             (True, None)])
def test_last_known_leader_is_elected_unchecked_at_the_pinned_commit_and_only_if_acceptable_later(check, expected):
    p = part(replicas=(1,), isr=[], leader=-1, lke=[1])
    assert build(p, inputs(mv=29, elr=True, active=(), m=1, check_last_known_leader=check)) == expected


def test_unclean_shutdown_removes_the_broker_from_elr():
    """induswargods offset 3599: the ELR member restarts uncleanly and leaves the ELR."""
    p = part(replicas=(1,), isr=[], leader=-1, elr=[1], lke=[1])
    out = build(p, inputs(mv=29, elr=True, active=(), exclude=1, m=1, unclean_shutdown=frozenset({1})))
    assert out == {"eligibleLeaderReplicas": []}
