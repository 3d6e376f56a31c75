"""Every code the program emits is declared in the registry (controller_core/codes.py), on every real log
of ../shared/realdata and every built-in simulator scenario: the gold findings of the audit, the
invariant breaches and the divergences of the replay, and the ground truth the simulator writes.  A
breach graded other than its default is one whose declaration says it varies."""
from __future__ import annotations

import json

import pytest

from audit.local import log_end, silver_tables
from lake import catalog
from audit.violations import violations
from controller_core import codes
from controller_core.rules.invariants import InvariantChecker
from controller_core.rules.verify import verify_log_dir
from jobs import cli
from lake.config import load_config
from realdata_facts import CLUSTERS, REALDATA
from simulator.scenario import builtin_names

SMALL = {"fleet-large": ["--param", "partitions=300", "--param", "events=8"]}


@pytest.fixture(scope="module")
def scenario_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenarios")
    out = {}
    for name in builtin_names():
        assert cli.main(["simulate", name, "-o", str(root / name), "--seed", "7", *SMALL.get(name, [])]) == 0
        out[name] = root / name
    return out


def _emitted(log_dir) -> dict[str, set]:
    """table -> the (code, severity) pairs the program writes there for this log directory."""
    tables = silver_tables(log_dir)
    end_offset, end_time = log_end(tables)
    gold = violations(tables, load_config(), end_offset, end_time)
    rep = verify_log_dir(log_dir, InvariantChecker())
    return {codes.VIOLATIONS: set(zip(gold.column("code").to_pylist(), gold.column("severity").to_pylist())),
            codes.INVARIANT_BREACHES: {(b.rule, b.severity) for b in rep.breaches}
            | set(zip(tables[catalog.INVARIANT_BREACHES.name].column("rule").to_pylist(),
                      tables[catalog.INVARIANT_BREACHES.name].column("severity").to_pylist())),
            codes.DIVERGENCES: {(d.rule, d.severity) for d in rep.divergences}}


def _check(emitted: dict[str, set]) -> None:
    allowed = {t: set(codes.written_to(t)) for t in (codes.VIOLATIONS, codes.INVARIANT_BREACHES, codes.DIVERGENCES)}
    allowed[codes.VIOLATIONS] |= allowed[codes.INVARIANT_BREACHES]  # the audit carries the breaches over
    for table, pairs in emitted.items():
        undeclared = {code for code, _ in pairs if code not in codes.REGISTRY}
        assert not undeclared, f"{table}: codes missing from controller_core/codes.py: {sorted(undeclared)}"
        misplaced = {code for code, _ in pairs if code not in allowed[table]}
        assert not misplaced, f"{table} holds codes the registry places elsewhere: {sorted(misplaced)}"
        for code, severity in pairs:
            assert severity in codes.SEVERITIES, (table, code, severity)
            c = codes.lookup(code)
            if table != codes.VIOLATIONS:  # gold severities are the config's (default config here, too)
                assert severity == c.severity or c.varies, f"{code} graded {severity}; its default is {c.severity}"
            elif c.kind == codes.FINDING:
                assert severity == c.severity or c.long_window or c.varies, (
                    f"{code} graded {severity}; default {c.severity}")


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_every_code_emitted_on_a_real_log_is_declared(cluster):
    emitted = _emitted(REALDATA / CLUSTERS[cluster])
    _check(emitted)


def test_the_real_logs_emit_codes_at_all():
    """The checks above look at something: the real logs hold findings and breaches."""
    seen = set()
    for cluster in CLUSTERS:
        for pairs in _emitted(REALDATA / CLUSTERS[cluster]).values():
            seen |= {code for code, _ in pairs}
    assert {"OFFLINE", "UNCLEAN_ELECTION", "INV-UNCLEAN-ELECTION", "MIN_ISR_ABOVE_RF"} <= seen


@pytest.mark.parametrize("name", sorted(builtin_names()))
def test_every_code_emitted_on_a_builtin_scenario_is_declared(scenario_dirs, name):
    d = scenario_dirs[name]
    emitted = _emitted(d)
    _check(emitted)
    truth = json.loads((d / "ground_truth.json").read_text())
    planted = {f["code"] for i in truth["incidents"] for f in i["expectedFindings"]}
    assert not planted - set(codes.REGISTRY), f"ground truth codes missing from the registry: {planted}"
    if name in ("last-replica-standing-elr-off", "unclean-election"):
        assert planted and emitted[codes.VIOLATIONS]  # a planted incident: there is something to check
