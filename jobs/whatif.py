"""``kraft-audit whatif FILE``: the controller's decision for a hypothetical event (no Spark).

FILE (or ``-`` for stdin) is JSON: the cluster image (metadataVersion, elrEnabled, controllerId,
brokers, configs, topics, partitions in the ``describe --json`` shape) and an ``event``; see
controller_core/rules/whatif.py.  Prints ``{"records", "errors", "partitions", "brokers"}``.
"""
from __future__ import annotations

import json
import sys

from controller_core.rules.whatif import WhatIfError, what_if


def run(path: str, out=None, err=None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        spec = json.loads(text)
        result = what_if(spec)
    except (OSError, json.JSONDecodeError, WhatIfError) as exc:
        print(f"kraft-audit whatif: {path}: {exc}", file=err)
        return 2
    out.write(json.dumps(result, indent=2) + "\n")
    return 0
