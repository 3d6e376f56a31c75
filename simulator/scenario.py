"""Scenario files: load, apply ``--param`` overrides, validate with errors naming the file and key."""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import yaml

from simulator.controller import MV_LEVELS

# Package data of ``conf`` (see conf/__init__.py): a Path when installed as files, a zipfile.Path in a zip.
SCENARIO_DIR = resources.files("conf") / "scenarios"


class ScenarioError(ValueError):
    """A scenario file that cannot be simulated; the message names the file and the key."""


DEFAULTS = {
    "description": "",
    "metadata_version": "3.9-IV0",
    "elr": False,
    "start_time": "2026-01-01T00:00:00Z",
    "heartbeat_interval_ms": 5000,
    "session_timeout_ms": 9000,
    "unfence_delay_ms": 1500,
    "catch_up_ms": 4000,
    "controlled_shutdown_ms": 800,
    "unclean_election_interval_ms": 300000,
    "segment_bytes": 1048576,
    "snapshot_every": 2000,
    "end_after_s": 30,
    "controllers": [3000, 3001, 3002],
    "cluster_configs": {},
    "brokers": None,
    "topics": [],
    "timeline": [],
    "generate": None,
    "long_window_ms": 600000,
    # the audit's defaults the ground truth follows (audit.metadata_gap_ms, audit.min_window_ms,
    # audit.incident_merge_ms): no record for metadata_gap_ms is a METADATA_GAP; a closed UNDER_MIN_ISR /
    # OFFLINE window shorter than min_window_ms is INFO; incidents merge within incident_merge_ms
    "metadata_gap_ms": 30000,
    "min_window_ms": 1000,
    "incident_merge_ms": 60000,
    # the controller splits the records of a non-atomic operation (fence, unfence, controlled shutdown,
    # AlterPartition, elections) into batches of at most this many records
    "max_batch_records": 10000,
    # list INFO findings (AT_MIN_ISR) in ground_truth.json; off for huge fleets, where they dominate
    "truth_info": True,
    # whose data directory the output is (meta.properties): a broker id for a combined node (its log directory
    # is the directory id), default the first controller
    "data_node": None,
}

# event type -> (required keys, optional keys)
EVENTS = {
    "create_topic": ({"name", "partitions", "replication_factor"}, {"configs", "assignment"}),
    "delete_topic": ({"name"}, set()),
    "broker_session_timeout": ({"broker"}, {"duration_s"}),
    "controlled_shutdown": ({"broker"}, set()),
    "unclean_shutdown": ({"broker"}, {"lose_records"}),
    "restart": ({"broker"}, set()),
    "network_partition": ({"brokers"}, {"duration_s"}),
    "rolling_restart": (set(), {"brokers", "down_s", "interval_s"}),
    "az_outage": ({"rack"}, {"lose_records", "duration_s"}),
    "reassignment": ({"topic", "partition", "replicas"}, set()),
    "preferred_election": (set(), {"topic", "partitions"}),
    "unclean_election": ({"topic"}, {"partitions"}),
    "config_change": ({"resource", "key"}, {"name", "value"}),
    "controller_failover": (set(), {"to"}),
    # KIP-853: a controller node added to / removed from the voters (KRaftVersionRecord + VotersRecord)
    "voter_change": (set(), {"add", "remove"}),
    # every broker stops (controlled shutdown, a few seconds apart), then (controllers_down, default true) the
    # controller quorum for down_s (no record at all), which comes back with a new Raft epoch; the brokers
    # start again one after another
    "cluster_restart": ({"down_s"}, {"controllers_down"}),
    # the metadata quorum writes nothing for duration_s (lost quorum); brokers keep running; then a new Raft
    # epoch (LeaderChange) and NoOps again
    "controller_outage": ({"duration_s"}, set()),
    "produce": ({"records"}, {"topic"}),
    # GetReplicaLogInfo from every broker still running (or those listed), at this point of the log
    "collect_log_info": (set(), {"brokers"}),
    # a follower falls behind (slow disk, long GC): its leaders shrink it out of their ISRs (AlterPartition)
    # and take it back once it has caught up, ``duration_s`` later
    "lagging_follower": ({"broker", "duration_s"}, {"topic", "partitions"}),
    # the active controller writes a metadata snapshot (``<endOffset>-<epoch>.checkpoint``) now
    "snapshot": (set(), set()),
}
COMMON = {"at", "event", "description"}
GENERATE_KEYS = {"brokers", "partitions", "events", "topics", "racks", "replication_factor", "min_isr",
                 "produce_records"}


def builtin_names() -> list[str]:
    return sorted(p.name[:-len(".yaml")] for p in SCENARIO_DIR.iterdir() if p.name.endswith(".yaml"))


def description(name: str) -> str:
    """A built-in scenario's one-line ``description`` (read without validating the whole file)."""
    raw = yaml.safe_load((SCENARIO_DIR / f"{name}.yaml").read_text(encoding="utf-8")) or {}
    return " ".join(str(raw.get("description") or "").split())


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ScenarioError(f"{p}: no such scenario file")
        return p
    cand = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not cand.is_file():
        raise ScenarioError(f"unknown scenario {name_or_path!r}; built-in: {', '.join(builtin_names())}")
    return cand


def _parse_value(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def load(name_or_path: str, params: dict[str, str] | None = None) -> dict:
    """The validated scenario as a dict (defaults filled in). ``params``: ``key=value`` overrides of
    top-level keys or of ``generate`` keys."""
    path = resolve_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: the top level must be a mapping")
    sc = copy.deepcopy(DEFAULTS)
    for k, v in raw.items():
        if k not in DEFAULTS and k != "name":
            raise ScenarioError(f"{path}: unknown key {k!r} (known: {', '.join(sorted(DEFAULTS))})")
        sc[k] = v
    sc["name"] = raw.get("name", path.stem)
    for k, v in (params or {}).items():
        value = _parse_value(v) if isinstance(v, str) else v
        if isinstance(sc.get("generate"), dict) and k in GENERATE_KEYS:
            sc["generate"][k] = value
        elif k in DEFAULTS:
            sc[k] = value
        else:
            raise ScenarioError(f"{path}: --param {k}: not a scenario key")
    validate(sc, path)
    return sc


def parse_time(value, path, where) -> int:
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    else:
        try:
            dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise ScenarioError(f"{path}: {where}: not an ISO 8601 time: {value!r}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def _need(cond, path, where, msg):
    if not cond:
        raise ScenarioError(f"{path}: {where}: {msg}")


def validate(sc: dict, path) -> None:
    """Check a loaded scenario, naming the file and the key of the first problem (ScenarioError)."""
    _validate_settings(sc, path)
    if _validate_generate(sc, path):
        return
    ids = _validate_brokers(sc, path)
    topics = set()
    for i, t in enumerate(sc["topics"] or []):
        _check_topic(t, path, f"topics[{i}]", len(ids))
        topics.add(t["name"])
    racks = {b.get("rack") for b in sc["brokers"]}
    for i, ev in enumerate(sc["timeline"] or []):
        _validate_event(sc, ev, path, f"timeline[{i}]", ids, topics, racks)


def _validate_settings(sc: dict, path) -> None:
    """The cluster-wide settings: metadata.version, ELR, times and sizes, controllers, configs."""
    mv = sc["metadata_version"]
    _need(str(mv) in MV_LEVELS or (isinstance(mv, int) and 1 <= mv <= 28), path, "metadata_version",
          f"unknown metadata.version {mv!r}")
    level = MV_LEVELS.get(str(mv), mv if isinstance(mv, int) else 0)
    for k in ("elr", "truth_info"):
        _need(isinstance(sc[k], bool), path, k, "must be true or false")
    _need(not sc["elr"] or level >= 23, path, "elr", "ELR needs metadata_version >= 4.0-IV1")
    sc["start_ms"] = parse_time(sc["start_time"], path, "start_time")
    for k in ("heartbeat_interval_ms", "session_timeout_ms", "segment_bytes", "snapshot_every", "catch_up_ms",
              "unfence_delay_ms", "controlled_shutdown_ms", "unclean_election_interval_ms", "long_window_ms",
              "max_batch_records", "metadata_gap_ms", "min_window_ms", "incident_merge_ms"):
        _need(isinstance(sc[k], int) and sc[k] > 0, path, k, "must be a positive integer")
    _need(isinstance(sc["end_after_s"], (int, float)) and sc["end_after_s"] >= 0, path, "end_after_s",
          "must be a number >= 0")
    _need(isinstance(sc["controllers"], list) and sc["controllers"] and
          all(isinstance(c, int) for c in sc["controllers"]), path, "controllers", "a non-empty list of node ids")
    _need(isinstance(sc["cluster_configs"], dict), path, "cluster_configs", "must be a mapping")
    _need(sc["data_node"] is None or isinstance(sc["data_node"], int), path, "data_node", "a node id")


def _validate_generate(sc: dict, path) -> bool:
    """A generated fleet (``generate``): its keys; True when the scenario is one (no brokers/topics lists)."""
    gen = sc["generate"]
    if gen is not None:
        _need(isinstance(gen, dict), path, "generate", "must be a mapping")
        for k, v in gen.items():
            _need(k in GENERATE_KEYS, path, f"generate.{k}", f"unknown key (known: {', '.join(sorted(GENERATE_KEYS))})")
            if k != "racks":
                _need(isinstance(v, int) and v >= 0, path, f"generate.{k}", "must be an integer >= 0")
        return True
    return False


def _validate_brokers(sc: dict, path) -> set:
    """The broker list: mappings {id, rack} with distinct ids; returns the ids."""
    brokers = sc["brokers"]
    _need(isinstance(brokers, list) and brokers, path, "brokers", "a non-empty list of {id, rack}")
    ids = set()
    for i, b in enumerate(brokers):
        where = f"brokers[{i}]"
        _need(isinstance(b, dict), path, where, "must be a mapping {id, rack}")
        for k in b:
            _need(k in ("id", "rack"), path, f"{where}.{k}", "unknown key (known: id, rack)")
        _need(isinstance(b.get("id"), int) and b["id"] >= 0, path, f"{where}.id", "a broker id (int >= 0)")
        _need(b["id"] not in ids, path, f"{where}.id", f"duplicate broker id {b['id']}")
        ids.add(b["id"])
    return ids


def _validate_event(sc: dict, ev, path, where: str, ids: set, topics: set, racks: set) -> None:
    """One timeline event: its kind, time and keys, and the brokers, topics and racks it names (a
    create_topic adds its topic to ``topics``)."""
    _need(isinstance(ev, dict), path, where, "must be a mapping with 'at' and 'event'")
    kind = ev.get("event")
    _need(kind in EVENTS, path, f"{where}.event", f"unknown event {kind!r} (known: {', '.join(sorted(EVENTS))})")
    _need("at" in ev, path, f"{where}.at", "missing (seconds after start_time, or an ISO time)")
    if isinstance(ev["at"], (int, float)):
        ev["at_ms"] = sc["start_ms"] + int(round(ev["at"] * 1000))
    else:
        ev["at_ms"] = parse_time(ev["at"], path, f"{where}.at")
    _need(ev["at_ms"] >= sc["start_ms"], path, f"{where}.at", "before start_time")
    required, optional = EVENTS[kind]
    for k in ev:
        _need(k in required | optional | COMMON | {"at_ms"}, path, f"{where}.{k}",
              f"unknown key for {kind} (known: {', '.join(sorted(required | optional | {'at', 'description'}))})")
    for k in required:
        _need(k in ev, path, f"{where}.{k}", f"missing (required for {kind})")
    for k in ("broker",):
        if k in ev:
            _need(ev[k] in ids, path, f"{where}.{k}", f"unknown broker {ev[k]!r}")
    for k in ("brokers",):
        if k in ev:
            _need(isinstance(ev[k], list) and all(b in ids for b in ev[k]), path, f"{where}.{k}",
                  "a list of known broker ids")
    if kind == "lagging_follower":
        _need(isinstance(ev["duration_s"], (int, float)) and ev["duration_s"] > 0, path, f"{where}.duration_s",
              "seconds > 0")
        _need(ev.get("topic") is None or ev["topic"] in topics, path, f"{where}.topic",
              f"{ev.get('topic')!r} is not a topic of the scenario")
    if kind == "cluster_restart":
        _need(isinstance(ev["down_s"], (int, float)) and ev["down_s"] >= 0, path, f"{where}.down_s", "seconds >= 0")
        _need(isinstance(ev.get("controllers_down", True), bool), path, f"{where}.controllers_down",
              "must be true or false")
    if kind == "voter_change":
        _need("add" in ev or "remove" in ev, path, f"{where}", "voter_change needs add or remove (a node id)")
        for k in ("add", "remove"):
            _need(k not in ev or isinstance(ev[k], int), path, f"{where}.{k}", "a node id")
    if kind == "controller_outage":
        _need(isinstance(ev["duration_s"], (int, float)) and ev["duration_s"] > 0, path, f"{where}.duration_s",
              "seconds > 0")
    if kind == "az_outage":
        _need(ev["rack"] in racks, path, f"{where}.rack", f"no broker in rack {ev['rack']!r}")
    if kind == "create_topic":
        _check_topic(ev, path, where, len(ids))
        topics.add(ev["name"])
    if kind == "config_change":
        _need(ev["resource"] in ("topic", "broker", "cluster"), path, f"{where}.resource",
              "one of topic, broker, cluster")
        _need(ev["resource"] == "cluster" or "name" in ev, path, f"{where}.name",
              "missing (topic name or broker id)")
    if kind == "produce":
        _need(isinstance(ev["records"], int) and ev["records"] >= 0, path, f"{where}.records",
              "records per partition (int >= 0)")
    if "lose_records" in ev:
        _need(isinstance(ev["lose_records"], int) and ev["lose_records"] >= 0, path, f"{where}.lose_records",
              "an integer >= 0")


def _check_topic(t, path, where, n_brokers):
    _need(isinstance(t, dict), path, where, "must be a mapping {name, partitions, replication_factor, configs}")
    for k in t:
        _need(k in ("name", "partitions", "replication_factor", "configs", "assignment", "at", "at_ms", "event",
                    "description"),
              path, f"{where}.{k}", "unknown key (known: name, partitions, replication_factor, configs, assignment)")
    _need(isinstance(t.get("name"), str) and t["name"], path, f"{where}.name", "a topic name")
    _need(isinstance(t.get("partitions"), int) and t["partitions"] > 0, path, f"{where}.partitions", "an int > 0")
    rf = t.get("replication_factor")
    _need(isinstance(rf, int) and 0 < rf <= n_brokers, path, f"{where}.replication_factor",
          f"an int between 1 and the number of brokers ({n_brokers})")
    _need(isinstance(t.get("configs", {}) or {}, dict), path, f"{where}.configs", "must be a mapping")
