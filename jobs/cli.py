"""The ``kraft-audit`` command.  Each sub-command imports only what it needs, so ``decode`` starts
without loading Spark.

Every command keeps one contract (README "CLI contract"): exit 0 ran and nothing at or above the
threshold, 1 findings, 2 cannot run -- one stderr line ``kraft-audit <command>: <what> (<where>)``,
never a traceback unless ``--debug``.  :func:`main` owns that mapping, so the jobs just raise.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    # run as a file (`spark-submit jobs/cli.py ...`): Python puts jobs/ first on the path, where
    # jobs/audit.py would hide the audit package
    del sys.path[0]

from jobs import common


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (exit 2 as before): ``kraft-audit audit: argument
    --fail-on: invalid choice: 'X' ... (kraft-audit audit --help)`` instead of usage + error."""

    def error(self, message: str):
        self.exit(common.EXIT_CANNOT_RUN, f"{self.prog}: {' '.join(message.split())} ({self.prog} --help)\n")


def _add_debug(p, default) -> None:
    p.add_argument("--debug", action="store_true", default=default,
                   help="on an error, print the Python traceback too (the exit code stays the same)")


def _add_log_dir(p):
    p.add_argument("--log-dir", required=True,
                   help="a __cluster_metadata-0 folder, or the data directory holding it and bootstrap.checkpoint")


def _add_master(p):
    p.add_argument("--master", help="Spark master, e.g. spark://host:7077, yarn, k8s://https://host:443 (default: "
                                    "spark-submit's --master, else spark.master of the config, else local[*])")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line.  ``command``: the one command about to run; the options of the commands defined in
    their own modules are then added for it alone, so that ``decode`` does not import the audit, the copies'
    comparison and the simulator to start (a fifth of its start-up).  None: every command's options."""
    def options(p, name: str) -> None:
        if command is None or command == name:
            importlib.import_module(f"jobs.{_COMMANDS[name][0]}").add_arguments(p)

    ap = Parser(prog="kraft-audit", description="Offline auditor and forensic replayer for Kafka KRaft metadata logs")
    _add_debug(ap, False)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("decode", help="dump metadata log files as JSON Lines (no Spark)")
    p.add_argument("paths", nargs="+", help="log segments, snapshots, bootstrap.checkpoint, or folders")
    p.add_argument("--summary", action="store_true", help="one JSON object per file: batches, records, types, errors")
    p.add_argument("--strict", action="store_true", help="exit 1 if any input could not be decoded")

    p = sub.add_parser("verify", help="replay a log, recompute every controller decision, check invariants (no Spark)")
    _add_log_dir(p)
    p.add_argument("--json", action="store_true", help='{"records","partitionChanges","divergences","invariantBreaches"}')
    p.add_argument("--elr", choices=["auto", "on", "off"], default="auto",
                   help="was eligible.leader.replicas.enable on? (only needed at MV >= 4.0-IV1 without the feature record)")

    p = sub.add_parser("whatif", help="the records the controller would write for a hypothetical event (no Spark)")
    p.add_argument("file", help="JSON: cluster image + event ('-' for stdin)")

    p = sub.add_parser("describe", help="kafka-topics.sh --describe at any offset or time of a log (no Spark)")
    p.add_argument("--log-dir", help="a __cluster_metadata-0 folder, or the data directory holding it")
    p.add_argument("--lake", help="lake root, with --cluster: the silver tables of kraft-audit replay")
    p.add_argument("--cluster", help="cluster name in the lake, with --lake")
    at = p.add_mutually_exclusive_group()
    at.add_argument("--at-offset", type=int, metavar="N", help="state after every record up to offset N (default: end)")
    at.add_argument("--at-time", metavar="T", help="state after every batch written at or before T: ISO 8601 "
                    "(2025-09-22T12:00:00Z, +02:00; UTC without an offset) or epoch milliseconds")
    p.add_argument("--topic", action="append", metavar="NAME", help="only these topics (repeatable or comma list)")
    p.add_argument("--under-min-isr-partitions", action="store_true", help="|ISR| < effective min ISR")
    p.add_argument("--at-min-isr-partitions", action="store_true", help="|ISR| = effective min ISR")
    p.add_argument("--under-replicated-partitions", action="store_true", help="|ISR| < replication factor")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="no leader, or the leader is not a registered unfenced broker")
    p.add_argument("--elr-partitions", action="store_true", help="non-empty eligible leader replicas")
    p.add_argument("--quorum", action="store_true", help="the metadata quorum instead of the topics: active "
                   "controller, epoch, voters, registered controllers, every election (--log-dir)")
    p.add_argument("--brokers", action="store_true", help="the registered brokers instead of the topics: epoch, "
                   "fenced, controlled shutdown, rack, log dirs and (KIP-1066) cordoned log dirs")
    p.add_argument("--json", action="store_true", help="a JSON array, one object per partition")

    p = sub.add_parser("replay", help="bronze -> silver: partition/broker/topic history, divergences, invariants (Spark)")
    p.add_argument("--cluster", required=True)
    p.add_argument("--full", action="store_true",
                   help="replay everything again instead of extending the history from the last replay")
    p.add_argument("--lake", help="lake root (default: conf lake, env KRAFT_AUDIT_LAKE)")
    p.add_argument("--conf", help="YAML file overriding conf/defaults.yaml")
    _add_master(p)

    p = sub.add_parser("ingest", help="decode a log directory into the bronze Delta tables (Spark)")
    p.add_argument("--cluster", required=True, help="cluster name: several clusters share one lake")
    p.add_argument("--log-dir", required=True, action="append", metavar="DIR",
                   help="a __cluster_metadata-0 folder, or the data directory holding it and bootstrap.checkpoint; "
                        "repeat it for several nodes' copies of the cluster's log: compared, one row per offset")
    p.add_argument("--lake", help="lake root (default: conf lake, env KRAFT_AUDIT_LAKE)")
    p.add_argument("--conf", help="YAML file overriding conf/defaults.yaml")
    p.add_argument("--strict", action="store_true", help="exit 2 if any input was quarantined")
    p.add_argument("--log-info", action="append", metavar="PATH",
                   help="also ingest GetReplicaLogInfo JSON files (or folders of them) into replica_log_info")
    _add_master(p)

    p = sub.add_parser("audit", help="durability audit: violations, recovery candidates, exit code (no Spark)")
    options(p, "audit")

    p = sub.add_parser("plan", help="election plans: kafka-leader-election / kafka-reassign-partitions files")
    options(p, "plan")

    p = sub.add_parser("quality", help="Great Expectations data-quality checks on a cluster's bronze/silver tables")
    options(p, "quality")

    p = sub.add_parser("collect-log-info", help="a broker's per-replica log info (KIP-966 GetReplicaLogInfo) "
                                                "from its data directory")
    options(p, "collect-log-info")

    p = sub.add_parser("timeline", help="a partition's or broker's history, one line per change (no Spark)")
    options(p, "timeline")

    p = sub.add_parser("report", help="the audit as one self-contained HTML file: incidents, broker and partition "
                                      "timelines, plots, recovery (no Spark)")
    options(p, "report")

    p = sub.add_parser("sql", help="SQL over every table of the lake, without Spark (DataFusion)")
    options(p, "sql")

    p = sub.add_parser("compare-copies", help="several nodes' copies of one metadata log compared batch by batch "
                                              "(no Spark)")
    options(p, "compare-copies")

    p = sub.add_parser("simulate", help="write a simulated cluster's data directory with planted incidents")
    options(p, "simulate")
    # `kraft-audit audit ... --debug` works too; SUPPRESS keeps a global `--debug` before the command
    for p in sub.choices.values():
        _add_debug(p, argparse.SUPPRESS)
    return ap


# Commands that only read logs: pure Arrow/NumPy, no pandas.  pyarrow imports pandas on its first
# compute call merely to recognise pandas inputs, which costs ~0.4 s of start-up for nothing here.
LOG_ONLY = {"decode", "verify", "describe", "whatif", "compare-copies"}


class _NoPandas:
    """A meta path finder that makes ``import pandas`` fail (pyarrow then treats pandas as absent)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} is not loaded by kraft-audit's log-only commands", name=name)
        return None


def main(argv: list[str] | None = None) -> int:
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    command = words[0] if words and words[0] in _COMMANDS else None  # (after a global --debug)
    args = build_parser(command).parse_args(argv)  # usage errors: one line, SystemExit(2)
    if args.command not in LOG_ONLY or "pandas" in sys.modules:
        return _dispatch(args)
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        return _dispatch(args)
    finally:
        sys.meta_path.remove(blocker)


def _dispatch(args) -> int:
    try:
        common.preflight(args.command, args)  # before any heavy work (Spark, a replay)
        return _run(args)
    except BrokenPipeError:  # `kraft-audit decode ... | head`
        return common.EXIT_OK
    except KeyboardInterrupt:
        print(f"kraft-audit {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- the one place an error becomes an exit code
        if args.debug:
            traceback.print_exc()
        if common.cannot_run(exc):
            print(common.error_line(args.command, exc), file=sys.stderr)
        else:
            # A bug or an environment failure (Spark, Java): still no verdict, so 2 like any run that
            # could not finish -- a scheduler must never read it as 1 ("findings") or 0.
            print(common.internal_error_line(args.command, exc, debug=args.debug), file=sys.stderr)
        return common.EXIT_CANNOT_RUN


# command -> (its module in jobs/, how the module is called); imported on use, so that `decode` starts
# without loading Spark
_COMMANDS = {
    "decode": ("decode", lambda m, a: m.run(a.paths, summary=a.summary, strict=a.strict)),
    "verify": ("verify", lambda m, a: m.run(a.log_dir, as_json=a.json, elr=a.elr)),
    "whatif": ("whatif", lambda m, a: m.run(a.file)),
    "describe": ("describe", lambda m, a: m.run(a)),
    "replay": ("replay", lambda m, a: m.main(a)),
    "ingest": ("ingest", lambda m, a: m.main(a)),
    "audit": ("audit", lambda m, a: m.run(a)),
    "plan": ("plan", lambda m, a: m.run(a)),
    "quality": ("quality", lambda m, a: m.run(a)),
    "collect-log-info": ("collect_log_info", lambda m, a: m.main(a)),
    "simulate": ("simulate", lambda m, a: m.main(a)),
    "compare-copies": ("compare_copies", lambda m, a: m.run(a)),
    "sql": ("sql", lambda m, a: m.run(a)),
    "timeline": ("timeline", lambda m, a: m.run(a)),
    "report": ("report", lambda m, a: m.run(a)),
}


def _run(args) -> int:
    module, call = _COMMANDS[args.command]
    return call(importlib.import_module(f"jobs.{module}"), args)


SPARK_FREE = {"decode", "verify", "describe", "whatif", "audit", "plan", "collect-log-info", "simulate", "quality",
              "compare-copies", "sql", "timeline", "report"}


def console() -> None:
    """The ``kraft-audit`` executable.  Spark-free commands end with ``os._exit``: delta-rs keeps
    runtime threads that can abort the interpreter's shutdown ("terminate called without an active
    exception", exit 134) after all work is done and flushed."""
    argv = sys.argv[1:]
    command = next((a for a in argv if not a.startswith("-")), None)  # after a global --debug
    if command in LOG_ONLY:  # the process is this command's: its replay reuses what it frees, in small pages
        from controller_core.heap import log_only_process  # (controller_core/heap)

        log_only_process()
    code = main(argv)
    if command in SPARK_FREE:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
