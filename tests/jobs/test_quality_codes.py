"""The quality suites take their known rule ids and severities from the code registry: a silver row with a
rule or severity the registry does not declare fails its expectation (ERROR), declared ones pass."""
from __future__ import annotations

import json

import pandas as pd

from controller_core import codes
from jobs import quality
from lake import catalog

BREACHES, DIVERGENCES = catalog.INVARIANT_BREACHES.name, catalog.DIVERGENCES.name
SINK = {BREACHES: codes.INVARIANT_BREACHES, DIVERGENCES: codes.DIVERGENCES}  # table -> the registry's sink
TABLES = tuple(SINK)


def _registry_checks(rows):
    return {(r["table"], json.loads(r["kwargs"])["column"]): r for r in rows
            if r["table"] in TABLES and r["expectation"] == "ExpectColumnValuesToBeInSet"}


def test_rule_and_severity_value_sets_are_the_registrys():
    got = {(c.table, c.kwargs["column"]): c.kwargs["value_set"] for c in quality.checks()
           if c.table in TABLES and c.expectation == "ExpectColumnValuesToBeInSet"}
    assert got == {(t, "rule"): list(codes.written_to(SINK[t])) for t in TABLES} | {
        (t, "severity"): list(codes.SEVERITIES) for t in TABLES}
    assert codes.ELECTION_ORDER in got[(DIVERGENCES, "rule")]
    assert codes.ELECTION_ORDER not in got[(BREACHES, "rule")]


def test_undeclared_rules_and_severities_fail_declared_ones_pass():
    good = {BREACHES: pd.DataFrame({"rule": ["INV-UNDER-MINISR", "INV-LEADER-IN-ISR"],
                                                   "severity": ["INFO", "ERROR"]}),
            DIVERGENCES: pd.DataFrame({"rule": [codes.RECOMPUTE, codes.ELECTION_ORDER],
                                             "severity": ["ERROR", "ERROR"]})}
    rows = _registry_checks(quality.validate(good, "x").to_pylist())
    assert len(rows) == 4 and all(r["success"] for r in rows.values())

    bad = {BREACHES: pd.DataFrame({"rule": ["INV-UNDER-MINISR", "NOT-DECLARED"],
                                                  "severity": ["INFO", "EROR"]}),
           # the leader's divergence rule is no invariant breach, and a breach id no divergence rule
           DIVERGENCES: pd.DataFrame({"rule": [codes.RECOMPUTE, "INV-LEADER-IN-ISR"],
                                            "severity": ["ERROR", "ERROR"]})}
    rows = _registry_checks(quality.validate(bad, "x").to_pylist())
    failed = {k: json.loads(r["unexpected_sample"]) for k, r in rows.items() if not r["success"]}
    assert failed == {(BREACHES, "rule"): ["NOT-DECLARED"],
                      (BREACHES, "severity"): ["EROR"],
                      (DIVERGENCES, "rule"): ["INV-LEADER-IN-ISR"]}
    assert all(r["severity"] == "ERROR" for r in rows.values())
