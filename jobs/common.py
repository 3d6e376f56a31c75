"""What every ``kraft-audit`` command shares: the exit codes, the one-line error, and the checks of its
arguments that run before any heavy work (before a SparkSession starts, before a log is replayed).

The contract (README "CLI contract"): exit 0 ran and found nothing at or above the threshold, 1 findings,
2 cannot run -- with exactly one line on stderr, ``kraft-audit <command>: <what> (<where>)``.  A
scheduler reads 1 as "look at the findings" and 2 as "the run produced no verdict": an error of the
input or setup must never end as a traceback with Python's exit 1.

Imports stay light (no Spark, no pandas): ``decode`` and ``describe`` start in a fraction of a second.
"""
from __future__ import annotations

import re
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lake import catalog

EXIT_OK, EXIT_FINDINGS, EXIT_CANNOT_RUN = 0, 1, 2
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64
# The table that says which clusters a lake holds: every cluster starts with `kraft-audit ingest`.
CLUSTERS_TABLE = catalog.METADATA_RECORDS.name
# Commands whose --cluster must already be in the lake (ingest adds a new one).
READS_CLUSTER = {"replay", "audit", "plan", "quality", "describe", "report"}
# Commands that read conf/defaults.yaml (+ --conf, KRAFT_AUDIT_LAKE).
USES_CONFIG = {"replay", "ingest", "audit", "plan", "quality", "report"}


class CannotRun(Exception):
    """The command cannot run on these inputs: exit 2 with ``what (where)``."""

    def __init__(self, what: str, where: str | None = None):
        super().__init__(what)
        self.what, self.where = what, where

    def __str__(self) -> str:
        return f"{self.what} ({self.where})" if self.where else self.what


# Errors raised by the project's modules that mean "cannot run", by module.  Looked up in sys.modules
# (an exception of a module can only exist once the module is loaded): telling them apart never
# imports anything.
_CANNOT_RUN_BY_MODULE = {
    "lake.config": ("ConfigError",),
    "lake.gold": ("GoldError",),
    "lake.delta": ("StagedOutputError", "BackendError", "CommitCheckError", "DamagedTableError"),
    "lake.lock": ("LockBusy",),  # another job holds the cluster: say who, exit 2
    "controller_core.point": ("PointError",),
    "controller_core.rules.whatif": ("WhatIfError",),
    "simulator.scenario": ("ScenarioError",),
    "simulator.writer": ("OutputError",),
    "audit.plans": ("PlanOutputError",),
    "yaml": ("YAMLError",),
}
# OSError: a missing, wrong-kind, unreadable or unwritable path (FileNotFoundError, NotADirectoryError,
# IsADirectoryError, PermissionError, a full disk); OverflowError: a number past what a field holds;
# UnicodeDecodeError: a text input (JSON, YAML) that is not text.
_CANNOT_RUN = (CannotRun, OSError, OverflowError, UnicodeDecodeError)


class Progress:
    """Stage lines for a person watching a long job at a terminal (``kraft-audit ingest: [  12.3 s] decoding 3
    files, 26.1 MB``): written to stderr only when it is a terminal and ``CI`` is not set, so scheduled runs,
    pipes and CI logs stay as they are.  Callable with a message; ``enabled`` overrides the guess."""

    def __init__(self, prog: str, err=None, enabled: bool | None = None):
        import time

        self.prog, self.err = prog, err or sys.stderr
        isatty = getattr(self.err, "isatty", lambda: False)
        self.enabled = enabled if enabled is not None else bool(isatty()) and not os.environ.get("CI")
        self._clock = time.monotonic
        self._t0 = self._clock()

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"{self.prog}: [{self._clock() - self._t0:7.1f} s] {message}", file=self.err, flush=True)


def _lake_file_missing(exc: BaseException) -> str | None:
    """The path Spark reports missing (its PATH_NOT_FOUND: a data file a table lists was deleted or moved
    outside kraft-audit), None for any other error."""
    base = sys.modules.get("pyspark.errors.exceptions.base")
    if base is None or not isinstance(exc, base.AnalysisException):
        return None
    try:
        if exc.getCondition() != "PATH_NOT_FOUND":
            return None
        return (exc.getMessageParameters() or {}).get("path") or "?"
    except Exception:  # an exception without its condition: not ours to explain
        return None


def cannot_run(exc: BaseException) -> bool:
    if isinstance(exc, _CANNOT_RUN) or _lake_file_missing(exc) is not None:
        return True
    for module, names in _CANNOT_RUN_BY_MODULE.items():
        mod = sys.modules.get(module)
        if mod is not None and isinstance(exc, tuple(getattr(mod, n) for n in names)):
            return True
    return False


def error_line(command: str, exc: BaseException) -> str:
    """The one line for a cannot-run error: ``kraft-audit <command>: <what> (<where>)``."""
    from lake.files import MissingDataFile

    missing = _lake_file_missing(exc)
    if missing is None and isinstance(exc, MissingDataFile):  # read by this process from the table's files
        missing = exc.path
    elif missing is None and isinstance(exc, FileNotFoundError):  # delta-rs: "Object at location P not found ..."
        found = re.search(r"Object at location (\S+) not found", str(exc))
        missing = found.group(1) if found else None
    if missing is not None:
        text = (f"a data file the lake's tables list is missing ({missing}): deleted or moved outside "
                "kraft-audit; the table cannot be read until it is restored")
    elif isinstance(exc, OSError) and exc.filename is not None:  # "[Errno 13] ..." -> what (path)
        text = f"{exc.strerror or type(exc).__name__} ({exc.filename})"
    else:
        text = str(exc) or type(exc).__name__
    return f"kraft-audit {command}: {_one_line(text)}"


def internal_error_line(command: str, exc: BaseException, debug: bool = False) -> str:
    hint = "the traceback is above" if debug else "run with --debug for the traceback"
    return f"kraft-audit {command}: internal error: {type(exc).__name__}: {_one_line(_raised(str(exc)))} ({hint})"


def _raised(text: str) -> str:
    """What an error message says was raised, without the stack frames it may carry: after a Spark
    task's Python traceback (PythonException), the first line that is not indented is the exception
    that stopped the task (anything after it is the JVM's stack trace); a JVM error's frames are
    indented (``\tat ...``)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Traceback (most recent call last):"]
    if starts:
        raised = [line for line in lines[starts[-1] + 1:] if line.strip() and not line[0].isspace()]
        if raised:
            return raised[0]
    return " ".join(line for line in lines if line.strip() and not line[0].isspace())


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colours some libraries put in messages (delta-rs: "↳")


def _one_line(text: str) -> str:
    # a multi-line message (YAML, Py4J) folded: one line per error, without colour codes in a log file
    return " ".join(_ANSI.sub("", text).split())


# ------------------------------------------------------------------------------------------ arguments
def offset(value: int | None, flag: str = "--at-offset") -> int | None:
    if value is not None and not 0 <= value <= MAX_OFFSET:
        raise CannotRun(f"{value}: offsets start at 0" if value < 0 else f"{value}: larger than any offset", flag)
    return value


def parse_time(text: str, flag: str = "--at-time") -> int:
    """Epoch microseconds of an ISO 8601 time (UTC when it has no offset) or of epoch milliseconds."""
    s = text.strip()
    try:
        if re.fullmatch(r"\d+", s):
            EPOCH + timedelta(milliseconds=int(s))  # in datetime's range, or OverflowError
            return int(s) * 1000
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s[-1:] in ("Z", "z") else s)
    except (ValueError, OverflowError):
        raise CannotRun(f"{text!r}: not an ISO 8601 time such as 2025-09-22T12:00:00Z (nor epoch milliseconds)",
                        flag) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - EPOCH) // timedelta(microseconds=1)


# A cluster name is a partition value of every table (``cluster=<name>`` folders, Delta partition values,
# filters): one character set that needs no escaping anywhere, so no name can make a lake unreadable for the
# others.  README "CLI contract" states it; every command taking --cluster is checked in preflight().
CLUSTER_NAME_MAX = 128
CLUSTER_NAME_RULE = (f"a cluster name is 1 to {CLUSTER_NAME_MAX} characters of A-Z a-z 0-9 . _ -, "
                     "starting with a letter or a digit")
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def cluster_name(name: str, flag: str = "--cluster") -> str:
    """``name`` when it follows CLUSTER_NAME_RULE, else CannotRun naming the flag, the fault and the rule."""
    if _CLUSTER_NAME.fullmatch(name) and len(name) <= CLUSTER_NAME_MAX:
        return name
    shown = repr(name) if len(name) <= 40 else repr(name[:37]) + "..."
    if not name:
        why = "empty"
    elif len(name) > CLUSTER_NAME_MAX:
        why = f"{len(name)} characters"
    elif bad := [c for c in name if c not in "._-" and not (c.isascii() and c.isalnum())]:
        why = f"{bad[0]!r} is not allowed"
    else:
        why = f"starts with {name[0]!r}"
    raise CannotRun(f"{shown}: {why}; {CLUSTER_NAME_RULE}", flag)


def add_cluster_or_log_dir(p, log_dir_help: str) -> None:
    """``--cluster`` (with ``--lake``) or ``--log-dir``, and ``--conf``: where a command reads a history from."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--cluster", help="cluster name in the lake (after kraft-audit ingest + replay)")
    src.add_argument("--log-dir", help=log_dir_help)
    p.add_argument("--lake", help="lake root (default: conf lake, env KRAFT_AUDIT_LAKE)")
    p.add_argument("--conf", help="YAML file overriding conf/defaults.yaml")


def add_source_arguments(p) -> None:
    """Where ``audit`` and ``plan`` read a cluster's history from, and the point they look at."""
    add_cluster_or_log_dir(p, "audit a log directory directly (replays it; no lake, no Spark)")
    at = p.add_mutually_exclusive_group()
    at.add_argument("--at-offset", type=int, metavar="N", help="audit the history through offset N (default: end)")
    at.add_argument("--at-time", metavar="T", help="audit the history through time T (ISO 8601 or epoch ms)")
    p.add_argument("--log-info", action="append", metavar="PATH",
                   help="GetReplicaLogInfo JSON files or folders of them (default with --cluster: the "
                        "replica_log_info table)")
    p.add_argument("--strategy", choices=["balanced", "aggressive", "none"],
                   help="KIP-966 unclean recovery strategy for leaderless partitions (default: conf)")


def at_offset_of(args, tables) -> int | None:
    """The offset ``--at-offset`` / ``--at-time`` point at in a history (None: its end)."""
    from audit.run import offset_at_time

    if args.at_time is None:
        return args.at_offset
    at = offset_at_time(tables, parse_time(args.at_time))
    if at is None:
        raise CannotRun(f"{args.at_time}: before the first record of the history", "--at-time")
    return at


def config_of(args):
    """The effective configuration of a command with ``--conf`` / ``--lake`` (validated on load)."""
    from lake.config import load_config

    lake = getattr(args, "lake", None)
    return load_config(getattr(args, "conf", None), {"lake": lake} if lake else None)


# ------------------------------------------------------------------------------------------ pre-flight
def preflight(command: str, args) -> None:
    """Check what can be checked cheaply, before the command does any heavy work; raise CannotRun (or
    a mapped error such as ConfigError / FileNotFoundError) naming the argument."""
    if getattr(args, "cluster", None) is not None:  # "" too: an empty name is refused, never ingested
        cluster_name(args.cluster)
    offset(getattr(args, "at_offset", None))
    if getattr(args, "at_time", None) is not None:
        parse_time(args.at_time)
    given = getattr(args, "log_dir", None)
    for d in (given if isinstance(given, list) else [given] if given else []):  # ingest takes several copies
        log_dir(d)
    for d in getattr(args, "data_dir", None) or []:
        if not Path(d).is_dir():
            raise CannotRun("no such directory" if not Path(d).exists() else "not a directory", f"--data-dir {d}")
    config = config_of(args) if command in USES_CONFIG else None
    if command in READS_CLUSTER and getattr(args, "cluster", None):
        root = getattr(args, "lake", None) or (config or {}).get("lake")
        # describe --cluster without --lake is refused by describe itself; a remote lake (s3a://, abfss://)
        # is left to the job: its credentials may live in the Spark / Hadoop conf, not where delta-rs looks
        if root and _local(str(root)):
            known = check_cluster(root, args.cluster)
            if known is None and command == "replay":  # say it before Spark starts
                raise CannotRun(f"no {CLUSTERS_TABLE} table: run kraft-audit ingest first", f"lake {root}")


def _local(root: str) -> bool:
    return "://" not in root or root.startswith("file://")


def log_dir(path: str) -> None:
    """A ``--log-dir`` must be a metadata folder or the data directory holding one, and every file in it named
    like a log file must be a readable regular file: a dangling symbolic link, a FIFO (recognised, never
    opened) or a file that cannot be opened stops the command here, before Spark or a replay starts (a
    replay without it would report a history with a hole as the whole one)."""
    from controller_core.logdir import discover

    discover(Path(path))  # FileNotFoundError / UnreadableLogFile naming the path and why


def known_clusters(root: str) -> list[str] | None:
    """The clusters a lake holds (partition values of its bronze records, read from the Delta log with
    delta-rs: no Spark, no data files); None when the lake has no such table yet."""
    from lake.delta import Lake

    lake = Lake(root, None, backend="delta-rs")
    if not lake.exists(CLUSTERS_TABLE):
        return None
    return sorted({p["cluster"] for p in lake.partitions(CLUSTERS_TABLE)})


def check_cluster(root: str, cluster: str) -> list[str] | None:
    """The lake's clusters (None: no bronze table yet: the command says what to run first); CannotRun
    listing them when ``cluster`` is not one of them."""
    known = known_clusters(root)
    if known is not None and cluster not in known:
        holds = ", ".join(known) if known else "no cluster"
        raise CannotRun(f"unknown cluster {cluster!r}; the lake holds: {holds}", f"lake {root}")
    return known


def warn_quarantined(prog: str, log_dir: str | None, err, spans: list) -> None:
    """One stderr line when any byte a ``--log-dir`` replay read could not be decoded (the command goes on
    with the records it could read), naming the first damaged file and byte position.  ``spans``: what the
    replay quarantined (``Replay.quarantine``)."""
    if log_dir and spans:
        more = f" (and {len(spans) - 1} more spans)" if len(spans) > 1 else ""
        print(f"{prog}: warning: the log is damaged, {sum(q.length for q in spans)} bytes quarantined "
              f"(not replayed): {spans[0].message}{more}", file=err)


# ------------------------------------------------------------------------------- a partition's history
def partition_rows(tables: dict, topic: str, partition: int | None, strict: bool = True) -> list[dict]:
    """The history rows of a topic's partitions, by partition then offset (``timeline``, and ``report``'s partition
    timelines).  ``topic``: a name (every id it had) or, for a topic whose name the history does not hold, its id --
    a finding names a topic by its id when its TopicRecord was not read (a damaged or cut log).  A topic or partition
    the history does not hold: CannotRun naming the argument, or no rows when not ``strict`` (a report's incident
    whose partition has no state of its own, e.g. only change records whose PartitionRecord was quarantined)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    topics = tables[catalog.TOPIC_CONFIG_HISTORY.name]
    ids = pc.unique(topics.filter(pc.equal(topics.column("topic_name"), topic)).column("topic_id"))
    by_name = len(ids) > 0
    h = tables[catalog.PARTITION_STATE_HISTORY.name]
    h = h.filter(pc.is_in(h.column("topic_id"), value_set=ids if by_name else pa.array([topic], pa.string())))
    if not by_name and not h.num_rows:  # neither a name nor an id of the history
        if not strict:
            return []
        raise CannotRun(f"topic '{topic}' is not in the history read", "--topic")
    if "orphan" in h.column_names:
        h = h.filter(pc.invert(pc.fill_null(h.column("orphan"), False)))
    if partition is not None:
        h = h.filter(pc.equal(h.column("partition_id"), partition))
        if not h.num_rows and strict:
            raise CannotRun(f"partition {partition} of topic '{topic}' is not in the history read", "--partition")
    if not h.num_rows and strict:  # (only changes of partitions whose PartitionRecord was not read)
        raise CannotRun(f"topic '{topic}' has no partition state in the history read", "--topic")
    return h.sort_by([("partition_id", "ascending"), ("offset", "ascending")]).to_pylist()


def change_what(r: dict) -> str:
    """What a partition history row was: its trigger, else created / change / deleted (timeline, report)."""
    if r.get("deleted"):
        return "deleted"
    if r["record_type"] == "PARTITION_RECORD":
        return r.get("trigger") or "created"
    return r.get("trigger") or "change"
