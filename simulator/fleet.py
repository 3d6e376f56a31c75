"""``generate:`` scenarios (fleet-large): brokers, topics and a random timeline built from a few numbers.

Every random choice comes from the simulator's seeded generator, so the same seed gives the same fleet.
"""
from __future__ import annotations

import random

PER_TOPIC = 1000  # partitions per generated topic


def expand(sc: dict, rng: random.Random) -> None:
    """Fill ``brokers``, ``topics`` and ``timeline`` of a scenario from its ``generate`` block."""
    g = sc["generate"]
    n_brokers = max(3, g.get("brokers", 6))
    n_racks = max(1, g.get("racks", 3))
    n_parts = max(1, g.get("partitions", 60))
    n_events = g.get("events", 8)
    rf = min(g.get("replication_factor", 3), n_brokers)
    min_isr = g.get("min_isr", 2)
    produce = g.get("produce_records", 100)
    sc["brokers"] = [{"id": b, "rack": f"rack-{(b - 1) % n_racks}"} for b in range(1, n_brokers + 1)]
    n_topics = (n_parts + PER_TOPIC - 1) // PER_TOPIC
    sc["topics"] = [{"name": f"topic-{t:05d}", "partitions": min(PER_TOPIC, n_parts - t * PER_TOPIC),
                     "replication_factor": rf, "configs": {"min.insync.replicas": min_isr}}
                    for t in range(n_topics)]
    start = sc["start_ms"] + 10_000 + 1000 * n_topics
    slot = 120_000
    timeline = []
    for i in range(n_events):
        t = start + i * slot
        kind = rng.choice(["bounce", "crash", "timeout", "preferred", "produce", "partition"])
        b = rng.randint(1, n_brokers)
        if kind == "bounce":
            timeline.append({"event": "controlled_shutdown", "at_ms": t, "broker": b})
            timeline.append({"event": "restart", "at_ms": t + 30_000, "broker": b})
        elif kind == "crash":
            timeline.append({"event": "unclean_shutdown", "at_ms": t, "broker": b,
                             "lose_records": rng.randint(0, produce)})
            timeline.append({"event": "restart", "at_ms": t + 40_000, "broker": b})
        elif kind == "timeout":
            timeline.append({"event": "broker_session_timeout", "at_ms": t, "broker": b, "duration_s": 45})
        elif kind == "partition":
            others = [x for x in range(1, n_brokers + 1) if x != b]
            timeline.append({"event": "network_partition", "at_ms": t,
                             "brokers": sorted([b, rng.choice(others)]), "duration_s": 50})
        elif kind == "preferred":
            timeline.append({"event": "preferred_election", "at_ms": t})
        else:
            timeline.append({"event": "produce", "at_ms": t, "records": produce})
        timeline.append({"event": "preferred_election", "at_ms": t + 100_000})
    for ev in timeline:
        ev["at"] = (ev["at_ms"] - sc["start_ms"]) / 1000
    sc["timeline"] = timeline


def simulate_fleet(out, partitions: int, events: int, seed: int = 0, **params) -> dict:
    """The built-in ``fleet-large`` scenario at ``partitions`` partitions with ``events`` timeline events (and any
    other ``generate`` or top-level scenario key in ``params``), written to ``out``; returns the simulator's
    figures (records, batches, bytes, segments, snapshots). The benchmarks' inputs: its log segments are a
    change-heavy live log, its newest ``.checkpoint`` a PartitionRecord-dominated snapshot of the whole fleet."""
    from simulator.engine import simulate
    from simulator.scenario import load

    overrides = {"partitions": partitions, "events": events, **params}
    return simulate(load("fleet-large", overrides), out, seed)
