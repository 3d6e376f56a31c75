"""The cluster image at the audited point, in ``kraft-audit whatif``'s input form, from silver tables.

``plan`` checks every election it proposes by asking the what-if controller
(:mod:`controller_core.rules.whatif`) on this image, so a plan carries only elections Kafka accepts.  The
image comes from the silver tables (the lake, or a log directory replayed in process) cut at the audited
offset, because that is all ``plan --cluster`` has: each partition's, broker's and topic's row that
nothing follows.  Being whatif's own JSON shape, it can be saved and replayed by hand with
``kraft-audit whatif``.

Pure Arrow; never imports Spark.
"""
from __future__ import annotations

import pyarrow as pa

from controller_core import timelines
from controller_core.image import MIN_ISR, MV_4_0_IV1, UNCLEAN
from controller_core.vector import fold
from lake import catalog


def whatif_spec(tables: dict[str, pa.Table]) -> dict:
    """The image after the last row of the (possibly truncated, :func:`audit.run.truncate`) silver tables
    ``partition_state_history``, ``broker_state_history`` and ``topic_config_history``, as a whatif spec
    (``metadataVersion``, ``elrEnabled``, ``controllerId``, ``brokers``, ``configs``, ``topics``,
    ``partitions``) without an event."""
    topics = [r for r in timelines.current(tables[catalog.TOPIC_CONFIG_HISTORY.name]).to_pylist() if not r["deleted"]]
    mv = max((r["metadata_version"] or 0 for r in topics), default=0)
    spec: dict = {"metadataVersion": mv, "topics": {}, "configs": {"topics": {}}, "brokers": {}, "partitions": []}
    if topics:
        spec["controllerId"] = topics[0]["active_controller"] if topics[0]["active_controller"] is not None else -1
        if mv >= MV_4_0_IV1:  # whatif refuses an ELR flag below 4.0-IV1, where ELR cannot be on
            spec["elrEnabled"] = bool(topics[0]["elr_enabled"])
    names = {}
    for r in topics:
        names[r["topic_id"]] = r["topic_name"]
        spec["topics"][r["topic_name"]] = r["topic_id"]
        # the topic's resolved settings; a min ISR the log never set stays unset (Kafka's default 1)
        conf = {UNCLEAN: "true" if r["unclean_leader_election_enable"] else "false"}
        if r["min_isr_resolved_from_log"]:
            conf[MIN_ISR] = str(r["min_insync_replicas"])
        spec["configs"]["topics"][r["topic_name"]] = conf
    for r in timelines.current(tables[catalog.BROKER_STATE_HISTORY.name]).to_pylist():
        if r["registered"]:
            spec["brokers"][str(r["broker_id"])] = {
                "epoch": r["broker_epoch"], "incarnationId": r["incarnation_id"], "fenced": bool(r["fenced"]),
                "inControlledShutdown": bool(r["in_controlled_shutdown"]), "logDirs": list(r["log_dirs"] or []),
                "rack": r["rack"]}
            if r.get("cordoned_log_dirs") is not None:  # KIP-1066, where a record carried them (older lakes: absent)
                spec["brokers"][str(r["broker_id"])]["cordonedLogDirs"] = list(r["cordoned_log_dirs"])
    for r in fold.state_at(tables[catalog.PARTITION_STATE_HISTORY.name]).to_pylist():
        if r["topic_id"] not in names:
            continue
        spec["partitions"].append({
            "topic": names[r["topic_id"]], "topicId": r["topic_id"], "partition": r["partition_id"],
            "replicas": list(r["replicas"] or []), "isr": list(r["isr"] or []), "leader": r["leader"],
            "leaderEpoch": r["leader_epoch"], "partitionEpoch": r["partition_epoch"],
            "removingReplicas": list(r["removing_replicas"] or []), "addingReplicas": list(r["adding_replicas"] or []),
            "eligibleLeaderReplicas": list(r["eligible_leader_replicas"] or []),
            "lastKnownElr": list(r["last_known_elr"] or []), "leaderRecoveryState": r["leader_recovery_state"],
            "directories": list(r["directories"] or [])})
    return spec
