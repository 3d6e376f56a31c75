"""Election plans: the files and commands an operator runs with Kafka's own tools.

Pure functions over partition states (``describe --json`` dicts: topic, topicId, partition, replicas, isr,
eligibleLeaderReplicas, lastKnownElr, leader, leaderEpoch) and the set of *active* brokers (registered,
unfenced, not in controlled shutdown: :mod:`controller_core.brokers`), optionally with recovery candidates
(``audit.recovery`` rows) and the cluster image at the same point (``audit.image_at``).

Election types:

* ``preferred`` — partitions whose leader is not the first replica while that replica is an ISR member
  → ``election-preferred.json`` for ``kafka-leader-election.sh --election-type preferred``.
* ``unclean`` — leaderless partitions without a clean candidate (no active ISR or ELR member) →
  ``election-unclean.json`` for ``--election-type unclean``.  The controller then elects the first active
  replica in replica order (controller-rules §2.3 step 4), or the single LastKnownElr member (step 3).
* ``longest_log_balanced`` / ``longest_log_aggressive`` / ``designation`` — a chosen leader per partition,
  from recovery candidates of strategy balanced / aggressive / any.  Three artefacts:

  a. ``designation.json``: KIP-966's form for ``--election-type designation`` (ElectLeaders v3
     DesiredLeaders): ``{"partitions": [{"topic", "partition", "desiredLeader"}]}``.  **No released Kafka
     accepts it** (the RPC field and the election type were never implemented); it records intent.
  b. ``reassign.json`` for ``kafka-reassign-partitions.sh --execute``: the same replicas with the chosen
     broker moved to the front (a reorder adds and removes no replica, so it completes at once).
  c. an election over those partitions.  A chosen broker in the ISR or ELR is now the preferred replica
     and a *preferred* election elects it (``election-preferred.json``).  Any other chosen broker is not
     a valid preferred leader (a preferred election only elects ISR / ELR members), so its partitions go
     to ``election-unclean.json``: an unclean election takes the first active replica, which the
     reassignment made the chosen broker.

Checked against Kafka: given the image (whatif's JSON form, as ``kraft-audit plan`` always gives it),
every step is applied, in the plan's order, through the what-if controller (:mod:`audit.acceptance`).  A
partition whose step Kafka would refuse (``ELECTION_NOT_NEEDED``, ``PREFERRED_LEADER_NOT_AVAILABLE``,
``ELIGIBLE_LEADERS_NOT_AVAILABLE``, ...) is left out of every file and listed with the error and its
replicas' states; the new leader of an accepted election is the one the controller picks.  A
reassignment of a leaderless partition runs the controller's election itself (§2.7), so when it already
elects the chosen broker no election command follows for that partition.  Without an image the
selection above is all there is (unchecked).

All output is deterministic: partitions sorted by (topic, partition), JSON with sorted file names.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from audit.acceptance import StepCheck

PREFERRED, UNCLEAN = "preferred", "unclean"
LONGEST_LOG_BALANCED, LONGEST_LOG_AGGRESSIVE, DESIGNATION = "longest_log_balanced", "longest_log_aggressive", "designation"
ELECTION_TYPES = (PREFERRED, UNCLEAN, LONGEST_LOG_BALANCED, LONGEST_LOG_AGGRESSIVE, DESIGNATION)
_STRATEGY_OF = {LONGEST_LOG_BALANCED: "balanced", LONGEST_LOG_AGGRESSIVE: "aggressive", DESIGNATION: None}

ELECTION_PREFERRED_FILE = "election-preferred.json"
ELECTION_UNCLEAN_FILE = "election-unclean.json"
REASSIGN_FILE = "reassign.json"
DESIGNATION_FILE = "designation.json"
SUMMARY_FILE = "PLAN.md"


def _get(p: dict, camel: str, snake: str, default=None):
    return p.get(camel, p.get(snake, default))


def _key(p: dict) -> tuple[str, int]:
    return (p["topic"], int(p["partition"]))


def _lists(p: dict) -> tuple[list[int], list[int], list[int], list[int]]:
    return (list(p["replicas"]), list(p.get("isr") or []),
            list(_get(p, "eligibleLeaderReplicas", "eligible_leader_replicas") or []),
            list(_get(p, "lastKnownElr", "last_known_elr") or []))


# --------------------------------------------------------------------------------------------------
# Selection


def preferred_partitions(partitions: list[dict], active: set[int]) -> list[dict]:
    """Partitions whose leader is not the first replica while the first replica is an active ISR member."""
    out = []
    for p in partitions:
        replicas, isr, _, _ = _lists(p)
        if replicas and p["leader"] != replicas[0] and replicas[0] in isr and replicas[0] in active:
            out.append(p)
    return sorted(out, key=_key)


def has_clean_candidate(p: dict, active: set[int]) -> bool:
    _, isr, elr, _ = _lists(p)
    return any(b in active for b in isr) or any(b in active for b in elr)


def unclean_winner(p: dict, active: set[int], replicas: list[int] | None = None) -> int:
    """Who an UNCLEAN election would pick on a leaderless partition without a clean candidate: the single
    LastKnownElr member if it is active (§2.3 step 3, later Kafka), else the first active replica; -1."""
    replicas = list(replicas if replicas is not None else p["replicas"])
    _, isr, elr, lke = _lists(p)
    if not isr and not elr and len(lke) == 1 and lke[0] in active:
        return lke[0]
    return next((b for b in replicas if b in active), -1)


def unclean_partitions(partitions: list[dict], active: set[int]) -> tuple[list[dict], list[dict]]:
    """(leaderless partitions with no clean candidate and at least one active replica, skipped ones with
    the reason)."""
    chosen, skipped = [], []
    for p in sorted(partitions, key=_key):
        if p["leader"] != -1 or has_clean_candidate(p, active):
            continue
        if unclean_winner(p, active) == -1:
            skipped.append({"topic": p["topic"], "partition": int(p["partition"]),
                            "reason": "no replica is active: an unclean election would fail "
                                      "(ELIGIBLE_LEADERS_NOT_AVAILABLE)"})
        else:
            chosen.append(p)
    return chosen, skipped


# --------------------------------------------------------------------------------------------------
# File contents (exactly the tools' documented shapes)


def election_file(parts) -> dict:
    """``kafka-leader-election.sh --path-to-json-file``: ``{"partitions": [{"topic", "partition"}]}``."""
    return {"partitions": [{"topic": t, "partition": int(n)} for t, n in sorted(parts)]}


def designation_file(choices: dict[tuple[str, int], int]) -> dict:
    """KIP-966 DESIGNATION form: ``{"partitions": [{"topic", "partition", "desiredLeader"}]}``."""
    return {"partitions": [{"topic": t, "partition": int(n), "desiredLeader": int(b)}
                           for (t, n), b in sorted(choices.items())]}


def candidate_first(replicas: list[int], candidate: int) -> list[int]:
    """The replica list with ``candidate`` first and the others in their order."""
    if candidate not in replicas:
        raise ValueError(f"broker {candidate} is not a replica of {replicas}")
    return [candidate] + [b for b in replicas if b != candidate]


def reassignment_file(moves: dict[tuple[str, int], list[int]]) -> dict:
    """``kafka-reassign-partitions.sh --reassignment-json-file``: version 1, each partition's full new
    replica list and one log dir per replica (``any``: keep the broker's choice)."""
    return {"version": 1, "partitions": [
        {"topic": t, "partition": int(n), "replicas": [int(b) for b in reps], "log_dirs": ["any"] * len(reps)}
        for (t, n), reps in sorted(moves.items())]}


# --------------------------------------------------------------------------------------------------
# Plans


def _candidate_rows(candidates) -> list[dict]:
    if candidates is None:
        return []
    return candidates.to_pylist() if hasattr(candidates, "to_pylist") else list(candidates)


def _candidate_index(partitions: list[dict], rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """Candidate rows by (topic, partition), joined on topic id (or topic name when the row has no id)."""
    names = {(_get(p, "topicId", "topic_id"), int(p["partition"])): p["topic"] for p in partitions}
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        topic = names.get((r.get("topic_id"), int(r["partition"]))) or r.get("topic")
        if topic is not None:
            out.setdefault((topic, int(r["partition"])), []).append(r)
    return out


def build_plan(election_type: str, partitions: list[dict], active, candidates=None,
               bootstrap_server: str = "BROKER:9092", desired_leaders: dict | None = None,
               image: dict | None = None) -> dict:
    """A plan: ``{"electionType", "files": {name: content}, "commands": [...], "partitions": [...],
    "skipped": [...], "summary": text}``.  ``partitions`` lists each partition acted on with its current
    and expected leader, its replicas / ISR / ELR / LastKnownElr, ``steps`` (each command's kind and
    estimated records lost) and ``estimatedRecordsLost`` (null when unknown).  ``skipped`` lists the
    partitions left out with the ``reason`` and, when Kafka would refuse the step, its ``error`` name.
    ``candidates``: recovery rows (list of dicts or an Arrow table); ``desired_leaders``: {(topic,
    partition): broker} overriding them for ``designation``; ``image``: the cluster at the same point in
    whatif's input form (:func:`audit.image_at.whatif_spec`): every step is checked against it."""
    if election_type not in ELECTION_TYPES:
        raise ValueError(f"election type {election_type!r}, expected one of {ELECTION_TYPES}")
    active = set(active)
    parts = sorted(partitions, key=_key)
    by_key = {_key(p): p for p in parts}
    cands = _candidate_index(parts, _candidate_rows(candidates))
    plan = {"electionType": election_type, "bootstrapServer": bootstrap_server, "files": {}, "commands": [],
            "partitions": [], "skipped": []}
    tool = f"kafka-leader-election.sh --bootstrap-server {bootstrap_server}"
    check = StepCheck(image) if image is not None else None

    def lost(key, broker):
        return next((r.get("estimated_records_lost") for r in cands.get(key, []) if r["broker"] == broker), None)

    if election_type in (PREFERRED, UNCLEAN):
        if check is not None:
            # every partition the election is meant for; the controller says which it accepts, and why not
            wanted = preferred_wanted(parts) if election_type == PREFERRED else unclean_wanted(parts, active)
            chosen, leaders = _accepted(plan, check, election_type, wanted)
        else:  # unchecked: only what broker availability alone promises
            if election_type == PREFERRED:
                chosen = preferred_partitions(parts, active)
            else:
                chosen, plan["skipped"] = unclean_partitions(parts, active)
            leaders = {_key(p): (p["replicas"][0] if election_type == PREFERRED else unclean_winner(p, active))
                       for p in chosen}
        for p in chosen:
            key, w = _key(p), leaders[_key(p)]
            loss = 0 if election_type == PREFERRED else lost(key, w)
            plan["partitions"].append({**_facts(p), "leader": p["leader"], "newLeader": w,
                                       "election": election_type, "estimatedRecordsLost": loss,
                                       "steps": [{"step": f"{election_type} election", "estimatedRecordsLost": loss}]})
        if chosen:
            name = ELECTION_PREFERRED_FILE if election_type == PREFERRED else ELECTION_UNCLEAN_FILE
            plan["files"][name] = election_file(_key(p) for p in chosen)
            plan["commands"].append(f"{tool} --election-type {election_type} --path-to-json-file {name}")
    else:
        _recovery_plan(plan, election_type, by_key, cands, active, desired_leaders or {}, tool, bootstrap_server,
                       check)
    plan["summary"] = plan_summary(plan)
    return plan


def preferred_wanted(partitions: list[dict]) -> list[dict]:
    """Partitions a preferred election is meant for: led by another broker (or by none) while the first
    replica is in the ISR.  Whether Kafka can elect it now is the controller's question."""
    out = []
    for p in partitions:
        replicas, isr, _, _ = _lists(p)
        if replicas and p["leader"] != replicas[0] and replicas[0] in isr:
            out.append(p)
    return sorted(out, key=_key)


def unclean_wanted(partitions: list[dict], active: set[int]) -> list[dict]:
    """Leaderless partitions without a clean candidate: only an unclean election gives them a leader."""
    return sorted((p for p in partitions if p["leader"] == -1 and not has_clean_candidate(p, active)), key=_key)


def _facts(p: dict) -> dict:
    replicas, isr, elr, lke = _lists(p)
    return {"topic": p["topic"], "partition": int(p["partition"]), "replicas": replicas, "isr": isr,
            "eligibleLeaderReplicas": elr, "lastKnownElr": lke}


def _refused(plan: dict, check: StepCheck, key, error: str, what: str) -> None:
    plan["skipped"].append({"topic": key[0], "partition": key[1], "error": error,
                            "reason": f"Kafka would refuse the {what} with {error}: {check.replica_states(key)}"})


def _accepted(plan: dict, check: StepCheck, election_type: str, chosen: list[dict]):
    """(the partitions whose election Kafka accepts and that end with a leader, {key: that leader}); the
    others go to ``plan["skipped"]`` with the reason."""
    answers = check.elect(election_type, [_key(p) for p in chosen])
    kept, leaders = [], {}
    for p in chosen:
        key = _key(p)
        if answers[key] is not None:
            _refused(plan, check, key, answers[key], f"{election_type} election")
        elif check.leader(key) == -1:  # accepted, but the controller found nobody: it would only unseat p's leader
            plan["skipped"].append({"topic": key[0], "partition": key[1], "error": None,
                                    "reason": f"the {election_type} election would leave it without a leader: "
                                              f"{check.replica_states(key)}"})
        else:
            kept.append(p)
            leaders[key] = check.leader(key)
    plan["skipped"].sort(key=lambda s: (s["topic"], s["partition"]))
    return kept, leaders


def _recovery_plan(plan, election_type, by_key, cands, active, desired, tool, bootstrap_server, check=None) -> None:
    """The longest-log / designation plans: choose a broker per leaderless partition, reorder its replicas
    so the chosen broker comes first, then elect it (checked through the controller when ``check``)."""
    choices = _recovery_choices(plan, _STRATEGY_OF[election_type], by_key, cands, active, desired)
    moves, elections, winners, clean_choice = _reorder_then_elect(choices, by_key)
    if check is not None:
        _check_recovery(plan, check, choices, moves, elections, winners)
    for key in sorted(moves):
        b, row = choices[key]
        loss = 0 if clean_choice[key] else (row or {}).get("estimated_records_lost")
        plan["partitions"].append(_recovery_entry(by_key[key], b, loss, moves[key], elections[key], winners[key],
                                                  active, check))
    if moves:
        _recovery_files_and_commands(plan, choices, moves, elections, tool, bootstrap_server)


def _recovery_choices(plan, strategy, by_key, cands, active, desired) -> dict[tuple[str, int], tuple[int, dict | None]]:
    """{key: (chosen broker, its candidate row or None)} for every partition with candidates or a desired
    leader; the others go to ``plan["skipped"]``: unknown, already led (the tools only elect leaderless
    partitions here), nothing recommended, or a chosen broker that is not an active replica."""
    choices: dict[tuple[str, int], tuple[int, dict | None]] = {}
    for key in sorted(set(cands) | set(desired)):
        p = by_key.get(key)
        if p is None:
            reason = "not in the partition states"
        elif p["leader"] != -1:
            reason = f"has leader {p['leader']}: the tools only elect leaderless partitions here"
        else:
            b, row, reason = _chosen_broker(key, cands.get(key, []), desired, strategy)
            if reason is None and (b not in p["replicas"] or b not in active):
                reason = f"broker {b} is {'not a replica' if b not in p['replicas'] else 'not active'}"
        if reason is not None:
            plan["skipped"].append({"topic": key[0], "partition": key[1], "reason": reason})
        else:
            choices[key] = (b, row)
    return choices


def _chosen_broker(key, rows: list[dict], desired: dict, strategy: str | None):
    """(broker, its candidate row, None), or (None, None, why nothing is chosen).  A desired leader (the
    operator's designation) wins; else the row recommended under ``strategy`` (any strategy when None)."""
    if key in desired:
        b = int(desired[key])
        return b, next((r for r in rows if r["broker"] == b), None), None
    mine = [r for r in rows if strategy is None or r["strategy"] == strategy]
    recommended = [r for r in mine if r["recommended"]]
    if not recommended:
        why = next((r["note"] for r in mine), f"no {strategy or 'recovery'} candidate rows")
        return None, None, f"nothing recommended: {why}"
    return recommended[0]["broker"], recommended[0], None


def _reorder_then_elect(choices, by_key):
    """(moves, elections, winners, clean_choice) per chosen partition: the replica list with the chosen
    broker first, and the election that then elects it -- preferred when the controller's clean rule
    allows it (an ISR member, or an ELR member of an empty ISR: §2.3), else unclean (first active replica,
    which the reorder made the chosen broker)."""
    moves, elections, winners, clean_choice = {}, {}, {}, {}
    for key, (b, _) in sorted(choices.items()):
        _, isr, elr, _ = _lists(by_key[key])
        moves[key] = candidate_first(list(by_key[key]["replicas"]), b)
        clean_choice[key] = b in isr or (not isr and b in elr)
        elections[key] = PREFERRED if clean_choice[key] else UNCLEAN
        winners[key] = b
    return moves, elections, winners, clean_choice


def _recovery_entry(p: dict, b: int, loss, replicas: list[int], kind, winner: int, active, check) -> dict:
    """The plan's entry for one partition: the reorder (which elects by itself when ``kind`` is None, §2.7)
    and the election after it, each with what it may lose."""
    steps = [{"step": "reassign" if kind else "reassign (elects it)", "estimatedRecordsLost": 0 if kind else loss}]
    if kind:
        steps.append({"step": f"{kind} election", "estimatedRecordsLost": loss})
    return {**_facts(p), "leader": -1, "newLeader": winner, "newReplicas": replicas, "election": kind,
            "estimatedRecordsLost": loss, "steps": steps,
            "caveat": _caveat(p, b, winner, active, check) if kind == UNCLEAN else None}


def _recovery_files_and_commands(plan, choices, moves, elections, tool, bootstrap_server) -> None:
    """designation.json (the KIP's form, for the record), reassign.json and its execute / verify commands,
    then one election file and command per election kind still needed."""
    plan["files"][DESIGNATION_FILE] = designation_file({k: choices[k][0] for k in moves})
    plan["files"][REASSIGN_FILE] = reassignment_file(moves)
    reassign = f"kafka-reassign-partitions.sh --bootstrap-server {bootstrap_server} --reassignment-json-file {REASSIGN_FILE}"
    plan["commands"] += [f"{reassign} --execute", f"{reassign} --verify"]
    for kind, name in ((PREFERRED, ELECTION_PREFERRED_FILE), (UNCLEAN, ELECTION_UNCLEAN_FILE)):
        keys = [k for k in sorted(moves) if elections[k] == kind]
        if keys:
            plan["files"][name] = election_file(keys)
            plan["commands"].append(f"{tool} --election-type {kind} --path-to-json-file {name}")


def _check_recovery(plan, check: StepCheck, choices, moves, elections, winners) -> None:
    """Step 1 (the reorder), then step 2 (the election) through the what-if controller, in the plan's order.
    Partitions Kafka would refuse at either step leave ``moves``; a reorder that already elects the chosen
    broker (the controller elects on any change of a leaderless partition, §2.7) needs no election:
    ``elections[key]`` becomes None.  ``winners`` gets the broker the controller actually elects."""
    for key, error in check.reassign(moves).items():
        if error is not None:
            _refused(plan, check, key, error, "reassignment")
            del moves[key]
    for key in sorted(moves):
        now = check.leader(key)
        if now == choices[key][0]:
            elections[key] = None
        elif now != -1:
            plan["skipped"].append({"topic": key[0], "partition": key[1], "error": None, "reason": (
                f"the reassignment itself would elect broker {now}, not broker {choices[key][0]}: "
                f"{check.replica_states(key)}")})
            del moves[key]
    for kind in (PREFERRED, UNCLEAN):
        keys = [k for k in sorted(moves) if elections[k] == kind]
        for key, error in (check.elect(kind, keys) if keys else {}).items():
            if error is not None or check.leader(key) == -1:
                if error is not None:
                    _refused(plan, check, key, error, f"{kind} election after the reassignment")
                else:
                    plan["skipped"].append({"topic": key[0], "partition": key[1], "error": None, "reason": (
                        f"the {kind} election after the reassignment would elect nobody: {check.replica_states(key)}")})
                del moves[key]
            else:
                winners[key] = check.leader(key)
    plan["skipped"].sort(key=lambda s: (s["topic"], s["partition"]))


def _caveat(p: dict, b: int, winner: int, active: set[int], check) -> str | None:
    """Why the commands may elect another broker than the chosen ``b``: the controller's own pick when the
    plan was checked, else the single-LastKnownElr rule of §2.3 step 3 (later Kafka)."""
    w = winner if check is not None else unclean_winner(p, active, candidate_first(list(p["replicas"]), b))
    if w == b:
        return None
    why = "the single LastKnownElr member" if _lists(p)[3] == [w] else "the controller's choice"
    return f"an unclean election elects broker {w} ({why}) ahead of broker {b}, so these commands give broker {w}, not {b}"


# --------------------------------------------------------------------------------------------------
# Text and files


_WHAT = {
    PREFERRED: "Moves leadership back to each partition's preferred (first) replica, an in-sync replica: "
               "no data is lost.",
    UNCLEAN: "Elects a leader for leaderless partitions that have no in-sync or eligible replica left. The "
             "controller takes the first active replica in replica order; records it never received are lost.",
    LONGEST_LOG_BALANCED: "KIP-966 balanced recovery done by hand: for each leaderless partition, the replica "
                          "with the newest and longest log, chosen only once every replica that may hold "
                          "committed data has reported.",
    LONGEST_LOG_AGGRESSIVE: "KIP-966 aggressive recovery done by hand: for each leaderless partition, the "
                            "replica with the newest and longest log among those that reported.",
    DESIGNATION: "Elects the designated broker for each leaderless partition.",
}


def plan_summary(plan: dict) -> str:
    """PLAN.md: what the plan does, the commands in order, the partitions and what each may lose."""
    et, files = plan["electionType"], plan["files"]
    out = [f"# Election plan: {et}", "", _WHAT[et], ""]
    if not plan["partitions"]:
        out += ["No partition needs this election." if not any(s.get("error") for s in plan["skipped"]) else
                "Nothing to run: Kafka would refuse every election this plan looked at (below).", ""]
    else:
        if DESIGNATION_FILE in files:
            out += [f"`{DESIGNATION_FILE}` is the KIP-966 `--election-type designation` form "
                    "(ElectLeaders v3 DesiredLeaders). No released Kafka accepts it; it is kept as the record of "
                    "the decision. The commands below reach the same result with released tools:", "",
                    f"1. `{REASSIGN_FILE}` puts the chosen broker first in each replica list, keeping the other "
                    "replicas and their order (no data moves).",
                    "2. The election then elects that first replica: a preferred election when it is an in-sync "
                    "or eligible replica, otherwise an unclean election, which takes the first active replica. "
                    "Where the reassignment already elects it (the controller elects on any change of a "
                    "leaderless partition), no election follows.", ""]
        out += ["## Commands", "", "Run in this order from this folder:", "", "```"]
        out += plan["commands"] + ["```", "", "## Partitions", "",
                                   "The state at the audited point, and what each step may lose (records).", "",
                                   "| topic | partition | leader now | new leader | replicas | estimated records lost "
                                   "| replicas now | ISR | ELR | LastKnownElr | steps |",
                                   "|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in plan["partitions"]:
            steps = "; ".join(f"{s['step']}: {_lost(s['estimatedRecordsLost'])}" for s in p.get("steps") or [])
            out.append(f"| {p['topic']} | {p['partition']} | {p['leader']} | {p['newLeader']} | "
                       f"{_ids(p.get('newReplicas') or p.get('replicas'))} | {_lost(p['estimatedRecordsLost'])} | "
                       f"{_ids(p.get('replicas'))} | {_ids(p.get('isr'))} | {_ids(p.get('eligibleLeaderReplicas'))} | "
                       f"{_ids(p.get('lastKnownElr'))} | {steps} |")
        caveats = [p for p in plan["partitions"] if p.get("caveat")]
        out.append("")
        if caveats:
            out += ["## Caveats", ""] + [f"- {p['topic']}-{p['partition']}: {p['caveat']}" for p in caveats] + [""]
        if et != PREFERRED:
            out += ["Estimated records lost: the longest log end offset among the replicas that reported minus "
                    "the new leader's; an estimate (logs of different leader epochs can differ below their "
                    "ends), unknown without per-replica log info.", ""]
    refused = [s for s in plan["skipped"] if s.get("error")]
    other = [s for s in plan["skipped"] if not s.get("error")]
    if refused:
        out += ["## Refused by Kafka (not included)", "",
                "Checked with the same decision code as `kraft-audit whatif`; the files above leave these out.", ""]
        out += [f"- {s['topic']}-{s['partition']}: {s['reason']}" for s in refused] + [""]
    if other:
        out += ["## Not included", ""] + [f"- {s['topic']}-{s['partition']}: {s['reason']}" for s in other] + [""]
    return "\n".join(out)


def _ids(xs) -> str:
    return ",".join(map(str, xs)) if xs else "none"


def _lost(n) -> str:
    return "unknown" if n is None else str(n)


# ``-o DIR`` holds one plan at a time: the manifest lists the files the plan command wrote there, and the next
# plan removes exactly those (the runnable files of an earlier plan never stay beside a new one) and nothing
# else: a file it did not write survives, and a file named like a plan file that no manifest lists is never
# overwritten nor left beside the new plan (PlanOutputError: exit 2).
MANIFEST_FILE = "plan-manifest.json"
PLAN_FILES = (ELECTION_PREFERRED_FILE, ELECTION_UNCLEAN_FILE, REASSIGN_FILE, DESIGNATION_FILE, SUMMARY_FILE)


class PlanOutputError(Exception):
    """The plan cannot be written into the output directory without touching files it did not write."""


def _plain(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


def _manifest(out: Path) -> list[str]:
    """The files an earlier plan wrote into ``out`` (its manifest), [] when there is none."""
    path = out / MANIFEST_FILE
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        files = doc["files"]
        if doc.get("writtenBy") != "kraft-audit plan" or not isinstance(files, list):
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise PlanOutputError(f"{MANIFEST_FILE} is not a manifest kraft-audit plan wrote: remove it or choose "
                              f"another directory (-o {out})") from None
    return [f for f in files if _plain(f)]  # only names inside out: a manifest never removes anything elsewhere


def _write_manifest(out: Path, plan: dict, files: list[str]) -> None:
    doc = {"writtenBy": "kraft-audit plan", "electionType": plan.get("electionType"), "files": sorted(files)}
    _write_text(out / MANIFEST_FILE, json.dumps(doc, indent=2) + "\n")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_plan(plan: dict, out_dir) -> list[Path]:
    """Write the plan's files and PLAN.md into ``out_dir`` (created), replacing the earlier plan there (the
    files its manifest lists, and only those); returns the plan's paths, sorted (the manifest apart)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    new = sorted(plan["files"]) + [SUMMARY_FILE]
    earlier = _manifest(out)
    strays = sorted(n for n in set(PLAN_FILES) | set(new)
                    if n not in earlier and (os.path.lexists(out / n)))
    if strays:
        raise PlanOutputError(f"{strays[0]} is there and no {MANIFEST_FILE} lists it (a plan written before "
                              f"manifests, or not kraft-audit plan's): move it away or choose another directory "
                              f"(-o {out})")
    # list the earlier and the new files before touching any: an interrupted run leaves nothing unlisted
    _write_manifest(out, plan, sorted(set(earlier) | set(new)))
    for name in earlier:
        path = out / name
        if name not in new and (path.is_symlink() or path.is_file()):
            path.unlink()
    written = []
    for name, content in sorted(plan["files"].items()):
        _write_text(out / name, json.dumps(content, indent=2) + "\n")
        written.append(out / name)
    _write_text(out / SUMMARY_FILE, plan.get("summary") or plan_summary(plan))
    written.append(out / SUMMARY_FILE)
    _write_manifest(out, plan, new)
    return sorted(written)
