"""``kraft-audit whatif FILE``: the controller's decision for a hypothetical event (no Spark).

FILE (or ``-`` for stdin) is JSON: the cluster image (metadataVersion, elrEnabled, controllerId,
brokers, configs, topics, partitions in the ``describe --json`` shape) and an ``event``, as the JSON Schema
``conf/whatif.schema.json`` (shipped with the package) defines them; a document it rejects is exit 2 naming
the first wrong place.  Prints ``{"records", "errors", "partitions", "brokers"}``.
"""
from __future__ import annotations

import json
import sys

from controller_core.rules.whatif import WhatIfError, what_if


def schema() -> dict:
    """The input's JSON Schema (conf/whatif.schema.json, package data)."""
    from importlib import resources

    return json.loads((resources.files("conf") / "whatif.schema.json").read_text(encoding="utf-8"))


def validate(spec) -> None:
    """WhatIfError naming the first place ``spec`` breaks the schema (its JSON path) and how."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema()).iter_errors(spec))
    if error is not None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        raise WhatIfError(f"{where or 'the document'}: {error.message} (conf/whatif.schema.json)")


def run(path: str, out=None, err=None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        spec = json.loads(text)
        validate(spec)
        result = what_if(spec)
    except (OSError, json.JSONDecodeError, WhatIfError) as exc:
        print(f"kraft-audit whatif: {path}: {exc}", file=err)
        return 2
    out.write(json.dumps(result, indent=2) + "\n")
    return 0
