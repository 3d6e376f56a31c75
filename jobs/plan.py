"""``kraft-audit plan``: ready-to-run election plans for a cluster's state at a point of its history.

    kraft-audit plan --cluster NAME --election-type preferred|unclean|longest_log_balanced|
                     longest_log_aggressive|designation [-o DIR]

Writes the files Kafka's tools read (``kafka-leader-election.sh --path-to-json-file``,
``kafka-reassign-partitions.sh --reassignment-json-file``), the KIP-966 designation form, and PLAN.md
saying what each step does and what it may lose.  Without ``-o`` the summary goes to stdout only.  ``-o DIR``
holds one plan: the files of the earlier plan there (listed in its ``plan-manifest.json``) are removed, any
other file is left alone, and a plan-named file no manifest lists stops the command (exit 2)
(``audit.plans.write_plan``).
"""
from __future__ import annotations

import sys

from jobs.common import add_source_arguments, at_offset_of, config_of, warn_quarantined
from lake.files import return_freed_memory

PROG = "kraft-audit plan"


def add_arguments(p) -> None:
    from audit.plans import ELECTION_TYPES

    add_source_arguments(p)
    p.add_argument("--election-type", required=True, choices=list(ELECTION_TYPES))
    p.add_argument("--bootstrap-server", default="BROKER:9092", help="written into the commands of PLAN.md")
    p.add_argument("-o", "--output", metavar="DIR", help="write the plan files into DIR")


def run(args, out=None, err=None) -> int:
    from audit import plans
    from audit.planning import plan_at
    from lake import gold

    out, err = out or sys.stdout, err or sys.stderr
    return_freed_memory()
    config = config_of(args)
    tables, end_offset, _, info, _ = gold.load_sources(
        config, args.cluster, args.log_dir, args.log_info, warn=lambda m: print(f"{PROG}: {m}", file=err))
    warn_quarantined(PROG, args.log_dir, err, tables.get("undecoded_spans") or [])  # what the replay could not decode
    at = at_offset_of(args, tables)
    plan = plan_at(tables, end_offset, info, args.election_type, at_offset=at,
                   strategy=args.strategy or config["audit"]["recovery_strategy"],
                   leader_epoch_check=config["audit"].get("leader_epoch_check", "strict"),
                   bootstrap_server=args.bootstrap_server)
    out.write(plan["summary"] if plan["summary"].endswith("\n") else plan["summary"] + "\n")
    if args.output:
        written = plans.write_plan(plan, args.output)
        for f in written:
            print(f"{PROG}: wrote {f}", file=err)
    return 0
