"""Issue 13 item 6, never destroy input.

* ``simulate -o`` into a non-empty directory it did not write -- a real broker's data directory above all --
  exits 2 and leaves every file as it was (it used to delete the segments).  Into its own earlier output
  (the ``.kraft-audit-simulated`` marker) it may write again: the earlier run's files go, a file someone
  else put there stays.
* ``plan -o`` holds one plan: the files of the earlier plan (listed in ``plan-manifest.json``) go, so no
  runnable file of an earlier election type stays beside the new plan; any other file stays.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from cli_errors import one_line as _one_line
from jobs import cli
from simulator.writer import MARKER

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "data" / "default-cluster"
LRS = REPO / "data" / "last-replica-standing-elr-off"
META = "__cluster_metadata-0"


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ simulate -o
@pytest.fixture
def real_data_dir(tmp_path) -> Path:
    """A real-looking broker data directory: the metadata log, Kafka's side files, a topic partition folder,
    and no simulator marker."""
    d = tmp_path / "kafka-data"
    shutil.copytree(REAL, d, ignore=shutil.ignore_patterns(MARKER, "ground_truth.json", "log-info"))
    (d / "orders-0").mkdir()
    (d / "orders-0" / "00000000000000000000.log").write_bytes(b"\0" * 64)
    return d


@pytest.mark.parametrize("scenario", ["default-cluster", "last-replica-standing-elr-off"])
def test_simulate_refuses_a_real_data_directory_and_leaves_it_intact(real_data_dir, scenario, capsys):
    before = _tree(real_data_dir)
    assert cli.main(["simulate", scenario, "-o", str(real_data_dir)]) == 2
    _one_line(capsys.readouterr().err, "simulate", str(real_data_dir), "did not create", META)
    assert _tree(real_data_dir) == before


def test_simulate_refuses_any_non_empty_foreign_directory_and_a_file(tmp_path, capsys):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "todo.txt").write_text("keep me\n")
    assert cli.main(["simulate", "default-cluster", "-o", str(d)]) == 2
    _one_line(capsys.readouterr().err, "simulate", str(d), "todo.txt")
    assert (d / "todo.txt").read_text() == "keep me\n" and sorted(p.name for p in d.iterdir()) == ["todo.txt"]
    f = tmp_path / "a-file"
    f.write_text("x")
    assert cli.main(["simulate", "default-cluster", "-o", str(f)]) == 2
    _one_line(capsys.readouterr().err, "simulate", "not a directory", str(f))
    assert f.read_text() == "x"


def test_simulate_writes_into_a_new_or_empty_directory(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for d in (empty, tmp_path / "new" / "nested"):
        assert cli.main(["simulate", "default-cluster", "-o", str(d)]) == 0
        assert _tree(d) == _tree(REAL)  # the committed sample, marker included: same seed, same bytes
    capsys.readouterr()


def test_simulate_twice_into_its_own_output_replaces_only_its_files(tmp_path, capsys):
    d = tmp_path / "sim"
    assert cli.main(["simulate", "default-cluster", "-o", str(d)]) == 0
    marker = json.loads((d / MARKER).read_text())
    assert marker["writtenBy"] == "kraft-audit simulate" and f"{META}/00000000000000000126.log" in marker["files"]
    (d / "notes.txt").write_text("mine\n")  # someone else's file in the simulator's directory
    (d / "log-info" / "README").write_text("mine too\n")
    # again, another scenario: default-cluster's second segment and snapshot must not stay beside the new log
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(d)]) == 0
    capsys.readouterr()
    got = _tree(d)
    assert got.pop("notes.txt") and got.pop("log-info/README")
    assert got == _tree(LRS)
    assert (d / "notes.txt").read_text() == "mine\n"
    assert "notes.txt" not in json.loads((d / MARKER).read_text())["files"]
    # and the same scenario once more: byte for byte the same directory
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(d)]) == 0
    capsys.readouterr()
    again = _tree(d)
    assert again.pop("notes.txt") and again.pop("log-info/README") and again == _tree(LRS)


def test_an_interrupted_simulation_can_be_rerun(tmp_path, capsys):
    """A run stopped before its marker listed the files leaves the marker without a list: the next run
    removes the files named like the simulator's output and nothing else."""
    d = tmp_path / "sim"
    assert cli.main(["simulate", "default-cluster", "-o", str(d)]) == 0
    capsys.readouterr()
    doc = json.loads((d / MARKER).read_text())
    doc["files"] = None
    (d / MARKER).write_text(json.dumps(doc))
    (d / "notes.txt").write_text("mine\n")
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(d)]) == 0
    capsys.readouterr()
    got = _tree(d)
    assert got.pop("notes.txt") and got == _tree(LRS)


# ------------------------------------------------------------------------------------------ plan -o
T3 = "51"  # last-replica-standing-elr-off: payments-0 leaderless (the demo's T3)


def _plan(out: Path, election_type: str, capsys) -> int:
    code = cli.main(["plan", "--log-dir", str(LRS), "--log-info", str(LRS / "log-info"), "--at-offset", T3,
                     "--election-type", election_type, "-o", str(out)])
    capsys.readouterr()
    return code


def test_plan_twice_keeps_only_the_second_plans_files_and_foreign_files(tmp_path, capsys):
    out = tmp_path / "plans"
    out.mkdir()
    (out / "notes.md").write_text("operator's notes\n")
    assert _plan(out, "longest_log_aggressive", capsys) == 0
    first = sorted(p.name for p in out.iterdir())
    assert first == ["PLAN.md", "designation.json", "election-unclean.json", "notes.md", "plan-manifest.json",
                     "reassign.json"]
    assert _plan(out, "unclean", capsys) == 0
    assert sorted(p.name for p in out.iterdir()) == ["PLAN.md", "election-unclean.json", "notes.md",
                                                     "plan-manifest.json"]
    manifest = json.loads((out / "plan-manifest.json").read_text())
    assert manifest == {"writtenBy": "kraft-audit plan", "electionType": "unclean",
                        "files": ["PLAN.md", "election-unclean.json"]}
    assert "--election-type unclean" in (out / "PLAN.md").read_text()
    assert _plan(out, "preferred", capsys) == 0  # nothing to elect: only PLAN.md, no runnable file left over
    assert sorted(p.name for p in out.iterdir()) == ["PLAN.md", "notes.md", "plan-manifest.json"]
    assert (out / "notes.md").read_text() == "operator's notes\n"


def test_plan_refuses_plan_files_no_manifest_lists(tmp_path, capsys):
    """A plan file it did not record -- an earlier plan written before manifests, or someone's own
    reassign.json -- is neither overwritten nor left beside a new plan: exit 2, nothing touched."""
    out = tmp_path / "plans"
    out.mkdir()
    (out / "reassign.json").write_text('{"mine": true}\n')
    before = _tree(out)
    code = cli.main(["plan", "--log-dir", str(LRS), "--election-type", "preferred", "-o", str(out)])
    assert code == 2
    _one_line(capsys.readouterr().err, "plan", "reassign.json", "plan-manifest.json", str(out))
    assert _tree(out) == before
    (out / "reassign.json").unlink()
    (out / "plan-manifest.json").write_text("not json\n")
    assert cli.main(["plan", "--log-dir", str(LRS), "--election-type", "preferred", "-o", str(out)]) == 2
    _one_line(capsys.readouterr().err, "plan", "plan-manifest.json", str(out))


def test_a_manifest_never_removes_files_outside_the_plan_directory(tmp_path, capsys):
    out = tmp_path / "plans"
    assert _plan(out, "unclean", capsys) == 0
    victim = tmp_path / "victim.json"
    victim.write_text("{}\n")
    doc = json.loads((out / "plan-manifest.json").read_text())
    doc["files"] += ["../victim.json", str(victim), "sub/x.json"]
    (out / "plan-manifest.json").write_text(json.dumps(doc))
    assert _plan(out, "preferred", capsys) == 0
    assert victim.read_text() == "{}\n"
    assert sorted(p.name for p in out.iterdir()) == ["PLAN.md", "plan-manifest.json"]
