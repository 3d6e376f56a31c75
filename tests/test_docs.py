"""The README's Commands table and the CLI cannot drift apart: every command the parser knows has a row, every
row names a command that exists, and every long option of a command is spelled in its row."""
from __future__ import annotations

import re
from pathlib import Path

from jobs import cli

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> dict:
    ap = cli.build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(sub.choices)


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `kraft-audit ([a-z-]+)", line)
        if m:
            rows[m.group(1)] = rows.get(m.group(1), "") + " " + line.split("` |", 1)[0]
    return rows


def test_every_command_has_a_readme_row_and_every_row_a_command():
    assert set(_commands()) == set(_rows())


def test_every_long_option_is_in_its_commands_row():
    rows = _rows()
    missing = {}
    for name, p in _commands().items():
        flags = {o for a in p._actions for o in a.option_strings if o.startswith("--")} - {"--help", "--debug"}
        lost = sorted(f for f in flags if not re.search(re.escape(f) + r"(?![a-z-])", rows[name]))
        if lost:
            missing[name] = lost
    assert not missing, f"README rows lack these options (or --help has options the README does not): {missing}"
