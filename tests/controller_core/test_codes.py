"""The code registry (controller_core/codes.py) against the spec and the source tree: the INV ids and
severities of controller-rules §4, the sections and KIPs its references cite, every code a source file
spells, and README's rendered table.  What the program emits on real logs and scenarios is checked in
tests/audit/test_codes_emitted.py; the config defaults in tests/lake/test_config_severities.py."""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from controller_core import codes
from controller_core.codec import errors as codec_errors
from controller_core.records import BY_TYPE_NAME, UNKNOWN_RECORD_TYPE

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
SPEC = SHARED / "docs" / "controller-rules.md"
if not SPEC.is_file():
    raise FileNotFoundError(f"controller-rules.md is missing: {SPEC} (need ../shared beside the checkout)")

# the ids the auditor checks beyond the §4 table, each with the section stating the rule
AUDITOR_ADDED = {"INV-TOPIC-UNIQUE": "§1.4"}
SEV = {"E": codes.ERROR, "W": codes.WARN, "I": codes.INFO}


def _section4_rows() -> dict[str, str]:
    """INV id -> its severity letter(s) in the §4 table ("E", "W", "I", "E/W")."""
    text = SPEC.read_text(encoding="utf-8")
    body = text[text.index("## 4. Invariants"):text.index("## 5.")]
    rows = dict(re.findall(r"^\| (INV-[A-Z0-9-]+) \| ([EWI](?:/[EWI])?) \|", body, re.M))
    assert len(rows) == 36, f"parsed {len(rows)} rows of the §4 table, expected its 36: did the table change?"
    return rows


def test_invariant_ids_are_those_of_section_4_plus_the_auditor_added_ones():
    rows = _section4_rows()
    invariants = {c.code: c for c in codes.of_kind(codes.INVARIANT)}
    assert set(invariants) == set(rows) | set(AUDITOR_ADDED)
    assert {k for k, c in invariants.items() if c.reference == "§4"} == set(rows)
    assert {k: invariants[k].reference for k in AUDITOR_ADDED} == AUDITOR_ADDED


def test_invariant_default_severities_follow_section_4():
    for code, letters in _section4_rows().items():
        c = codes.lookup(code)
        assert c.severity == SEV[letters[0]], code  # an "E/W" row defaults to its stricter severity
        if "/" in letters:
            assert c.varies, f"{code} is {letters} in §4: the registry must say when it is not {c.severity}"


def test_invariant_checker_severities_are_the_registrys():
    from controller_core.rules.invariants import NOT_HERE, RULES

    declared = codes.default_severities(codes.INVARIANT)
    assert RULES == {k: v for k, v in declared.items() if k not in NOT_HERE}
    # what the checker leaves out is exactly what the recomputation reports as a divergence
    assert set(NOT_HERE) == set(codes.written_to(codes.DIVERGENCES)) - {codes.RECOMPUTE} == {codes.ELECTION_ORDER}


def test_every_declaration_is_complete():
    assert codes.REGISTRY
    for c in codes.REGISTRY.values():
        assert c.kind in codes.KINDS and c.severity in codes.SEVERITIES, c
        assert c.meaning and "\n" not in c.meaning and len(c.meaning) <= 160, c.code
        assert c.reference, c.code
        assert c.code.startswith("INV-") == (c.kind == codes.INVARIANT), c.code
        assert (c.table == codes.VIOLATIONS) == (c.kind == codes.FINDING), c.code
        assert not c.long_window or c.varies, f"{c.code} is raised to ERROR in long windows: say so in varies"
    assert codes.of_kind(codes.DIVERGENCE) == (codes.lookup(codes.RECOMPUTE),)


def test_an_undeclared_code_is_refused_by_name():
    with pytest.raises(codes.UnknownCode, match="UNDER_MIN_ISRR.*controller_core/codes.py"):
        codes.severity("UNDER_MIN_ISRR")


def test_references_cite_sections_of_controller_rules_and_kips_of_the_seeds():
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)[. ]", SPEC.read_text(encoding="utf-8"), re.M))
    kips = set(re.findall(r"KIP-(\d+)", (SHARED / "seeds" / "README.md").read_text(encoding="utf-8")))
    assert "1.7" in headings and "4" in headings and "966" in kips  # the parses found something
    kips |= set(codes.EXTERNAL_KIPS)  # declared, each with the fact it stands for
    for c in codes.REGISTRY.values():
        parts = [p.strip() for p in c.reference.split(",")]
        for part in parts:
            m = re.fullmatch(r"§(\d+(?:\.\d+)?)(?:-\d+)?|KIP-(\d+)", part)
            assert m, f"{c.code}: reference part {part!r} is neither §N.N[-k] nor KIP-N"
            assert (m[1] in headings) if m[1] else (m[2] in kips), f"{c.code}: {part} is not in the spec / seeds"


# ------------------------------------------------------------------------------------- the source tree
# Every text file of the checkout that may spell a code: the program, its tests, docs and config.
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml"}
INV_ID = re.compile(r"\bINV-[A-Z][A-Z0-9-]*[A-Z0-9]")


def _text_files():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if path.suffix in TEXT_SUFFIXES and path.is_file() and not any(
                p.startswith(".") or p in ("lake", "plans", "__pycache__") for p in rel.parts[:-1]):
            yield path


def test_every_inv_id_the_source_tree_spells_is_declared():
    seen: dict[str, list[str]] = {}
    for path in _text_files():
        for m in INV_ID.finditer(path.read_text(encoding="utf-8", errors="replace")):
            seen.setdefault(m.group(), []).append(str(path.relative_to(ROOT)))
    assert len(seen) >= 30  # the scan reached the checker and its tests
    unknown = {k: sorted(set(v)) for k, v in seen.items() if k not in codes.REGISTRY}
    assert not unknown, f"INV ids not declared in controller_core/codes.py: {unknown}"


# UPPER_SNAKE literals of the program that are not codes: Kafka API error names (the what-if replies),
# environment variables and Spark / Parquet setting values.  Record type names and the codec's
# quarantine reasons are taken from their modules.
NOT_CODES = {
    "ELECTION_NOT_NEEDED", "ELIGIBLE_LEADERS_NOT_AVAILABLE", "FENCED_LEADER_EPOCH", "INELIGIBLE_REPLICA",
    "INVALID_PARTITIONS", "INVALID_REPLICA_ASSIGNMENT", "INVALID_REQUEST", "INVALID_UPDATE_VERSION",
    "NOT_CONTROLLER", "NO_REASSIGNMENT_IN_PROGRESS", "PREFERRED_LEADER_NOT_AVAILABLE", "STALE_BROKER_EPOCH",
    "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "NEW_LEADER_ELECTED", "OPERATION_NOT_ATTEMPTED",
    "ARROW_DEFAULT_MEMORY_POOL", "BENCH_NO_HUGEPAGE", "GX_ANALYTICS_ENABLED", "KRAFT_AUDIT_LAKE", "PYSPARK_PYTHON",
    "SPARK_LOCAL_IP", "TIMESTAMP_MICROS", "PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS", "KRAFT_AUDIT_CRASH_AFTER",
    "KRAFT_AUDIT_THREADS",
    # a quarantine reason (controller_core/copies.py: a span of a node's copy that differs from bronze), like the
    # decoder's reasons of codec/errors.py: not a finding
    "COPY_DIVERGED",
    # Spark's error condition for a path that is not there (jobs/common.py: a lake data file deleted behind its back)
    "PATH_NOT_FOUND",
}
CODE_SHAPE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
PROGRAM = ("controller_core", "audit", "lake", "jobs", "transforms", "simulator", "scripts", "benchmarks", "data")


def _other_vocabulary() -> set[str]:
    reasons = {v for k, v in vars(codec_errors).items() if k.isupper() and isinstance(v, str)}
    return set(BY_TYPE_NAME) | {UNKNOWN_RECORD_TYPE} | reasons | NOT_CODES | set(codes.INCIDENT_CAUSES)


def test_every_finding_code_literal_of_the_program_is_declared():
    """A string literal shaped like a finding code (UPPER_SNAKE) in the program is a declared code or
    belongs to a known other vocabulary.  One-word codes (OFFLINE) have no telling shape: the emission
    tests catch those."""
    other = _other_vocabulary()
    seen: dict[str, set[str]] = {}
    for pkg in PROGRAM:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE_SHAPE.fullmatch(node.value):
                    seen.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    assert "PARTITION_CHANGE_RECORD" in seen  # the scan reached the program
    unknown = {k: sorted(v) for k, v in seen.items() if k not in codes.REGISTRY and k not in other}
    assert not unknown, (f"literals shaped like finding codes that controller_core/codes.py does not declare: "
                         f"{unknown} (declare them, or add a word that is not a code to NOT_CODES)")
    assert not NOT_CODES & set(codes.REGISTRY)


# ------------------------------------------------------------------------------------------ the README
def _readme_codes_script():
    spec = importlib.util.spec_from_file_location("readme_codes", ROOT / "scripts" / "readme_codes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_finding_codes_table_is_the_registrys():
    script = _readme_codes_script()
    table = script.readme_table((ROOT / "README.md").read_text(encoding="utf-8"))
    assert table == script.render(), "README.md is stale: run python scripts/readme_codes.py --write"
    # read back on its own terms: exactly the gold codes, each with its default severity first
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in table.splitlines()[2:]]
    got = {r[0].strip("`"): r[1].split(" ")[0] for r in rows}
    assert got == codes.default_severities(codes.FINDING)
    assert {r[0].strip("`") for r in rows if "long_window_ms" in r[1]} == set(codes.long_window_codes())


def test_readme_lists_every_incident_cause_in_the_order_they_are_tried():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Outages and incidents"):]
    listed = re.findall(r"^\| `([A-Z_]+)` \|", section, flags=re.M)
    assert listed[: len(codes.INCIDENT_CAUSES)] == list(codes.INCIDENT_CAUSES)
