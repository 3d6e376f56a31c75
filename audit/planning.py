"""One election plan of one cluster at one point: silver tables in, a checked plan out.

What ``kraft-audit plan`` does between reading its inputs and writing files, here so that tests and
other callers get exactly the command's plan: cut the tables at the audited offset, take the partitions'
and brokers' state there, rank recovery candidates from the log info captured by then, and build the
plan against the cluster image at that point, so that every election in it is one Kafka accepts.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import pyarrow as pa

from audit import plans
from audit.image_at import whatif_spec
from audit.recovery import recovery_candidates_table
from audit.run import log_info_as_of, state_at, truncate
from controller_core.brokers import active_broker_ids

# the recovery strategy each election type stands for; the others use the configured one
STRATEGY_OF = {plans.LONGEST_LOG_BALANCED: "balanced", plans.LONGEST_LOG_AGGRESSIVE: "aggressive"}


def plan_at(tables: dict[str, pa.Table], end_offset: int, log_info: pa.Table | None, election_type: str, *,
            at_offset: int | None = None, strategy: str = "balanced", leader_epoch_check: str = "strict",
            bootstrap_server: str = "BROKER:9092") -> dict:
    """The plan (:func:`audit.plans.build_plan`) for the state after ``at_offset`` (default: the end)."""
    if at_offset is not None and at_offset < end_offset:
        tables, _ = truncate(tables, at_offset)
    parts, brokers = state_at(tables)
    info = log_info_as_of(log_info, at_offset)
    cands = recovery_candidates_table(parts, brokers, info, STRATEGY_OF.get(election_type, strategy),
                                      leader_epoch_check)
    return plans.build_plan(election_type, parts.to_pylist(), active_broker_ids(brokers), cands.to_pylist(),
                            bootstrap_server=bootstrap_server, image=whatif_spec(tables))
