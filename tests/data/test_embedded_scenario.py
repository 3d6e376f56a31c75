"""The embedded default scenario (README command 1) is committed under data/ and is exactly what the
simulator writes for it with seed 0: byte for byte, every file."""
from __future__ import annotations

from pathlib import Path

from jobs import cli

DATA = Path(__file__).resolve().parents[2] / "data" / "last-replica-standing-elr-off"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_committed_scenario_is_what_the_simulator_writes(tmp_path):
    out = tmp_path / "lrs"
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(out), "--seed", "0"]) == 0
    committed, fresh = _files(DATA), _files(out)
    assert sorted(committed) == sorted(fresh)
    assert any(name.endswith(".checkpoint") for name in committed)  # a snapshot, a segment, log info, truth
    assert [n for n in committed if committed[n] != fresh[n]] == []
