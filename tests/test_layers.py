"""The layering ARCHITECTURE.md states, checked on the imports of every module (a package only imports the
layers above it; the pure layers never load Spark, Delta or pandas)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"pyspark", "delta", "deltalake", "great_expectations", "pandas"}
OURS = {"controller_core", "audit", "lake", "transforms", "jobs", "simulator", "benchmarks", "tests", "conf", "fuzz"}

# package -> (what it must never import, the only modules of those it may import anyway)
RULES = {
    "controller_core": (ENGINES | OURS - {"controller_core"}, set()),
    "audit": (ENGINES | OURS - {"audit", "controller_core"}, {"lake.catalog"}),
    "transforms": ((OURS | {"great_expectations", "deltalake", "delta"}) - {"transforms", "controller_core"},
                   {"lake.catalog"}),
    "simulator": (ENGINES | OURS - {"simulator", "controller_core"}, set()),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every absolute import in a file (``from a import b`` gives ``a.b``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _allowed(module: str, exceptions: set[str]) -> bool:
    return any(module == e or module.startswith(e + ".") for e in exceptions)


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_only_the_layers_above_it(package):
    banned, exceptions = RULES[package]
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in _imports(path):
            top = module.split(".")[0]
            if top in banned and not _allowed(module, exceptions):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not found, "\n".join(found)


def test_simulator_uses_only_the_codec_of_the_controller_core():
    """The simulator is the independent oracle the audit is checked against: it may share the byte
    format (codec), never the controller's decisions."""
    found = [f"{p.relative_to(ROOT)}:{line} imports {m}" for p in sorted((ROOT / "simulator").rglob("*.py"))
             for line, m in _imports(p) if m.startswith("controller_core") and not m.startswith("controller_core.codec")]
    assert not found, "\n".join(found)


def test_no_job_imports_another_job():
    """jobs/ are thin entry points: what two commands share lives in jobs/common.py (or below jobs/); only
    the dispatcher, jobs/cli.py, names the commands."""
    found = [f"{p.relative_to(ROOT)}:{line} imports {m}" for p in sorted((ROOT / "jobs").glob("*.py"))
             if p.name != "cli.py" for line, m in _imports(p)
             if m.startswith("jobs.") and not m.startswith("jobs.common")]
    assert not found, "\n".join(found)
