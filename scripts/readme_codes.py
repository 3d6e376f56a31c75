"""README's "Finding codes" table, rendered from the code registry (controller_core/codes.py).

    python scripts/readme_codes.py           # print the table
    python scripts/readme_codes.py --write   # replace it in README.md (between the codes markers)
    python scripts/readme_codes.py --check   # exit 1 when README.md differs from the registry

The README keeps a rendered copy (it is read on GitHub, where nothing runs); tests/controller_core/
test_codes.py fails when that copy and the registry disagree.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file from a checkout
    sys.path.insert(0, str(ROOT))

from controller_core import codes  # noqa: E402

README = ROOT / "README.md"
BEGIN, END = "<!-- finding codes: begin (scripts/readme_codes.py) -->", "<!-- finding codes: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _severity(c: codes.Code) -> str:
    return f"{c.severity} ({codes.ERROR} from `audit.long_window_ms`)" if c.long_window else c.severity


def render() -> str:
    """The markdown table of the gold finding codes, in declaration order."""
    lines = ["| code | severity | when | reference |", "|---|---|---|---|"]
    lines += [f"| `{c.code}` | {_severity(c)} | {_cell(c.meaning)} | {_cell(c.reference)} |"
              for c in codes.of_kind(codes.FINDING)]
    return "\n".join(lines)


def _split(text: str) -> tuple[str, str, str]:
    """(up to and with the begin marker, what lies between the markers, from the end marker on)."""
    try:
        start = text.index(BEGIN) + len(BEGIN)
        end = text.index(END, start)
    except ValueError:
        raise ValueError(f"README.md lacks the markers {BEGIN!r} ... {END!r}") from None
    return text[:start], text[start:end], text[end:]


def readme_table(text: str) -> str:
    """The table README.md holds between the markers."""
    return _split(text)[1].strip("\n")


def main(argv: list[str]) -> int:
    table = render()
    if not argv:
        print(table)
        return 0
    text = README.read_text(encoding="utf-8")
    current = readme_table(text)
    if argv == ["--check"]:
        if current != table:
            print("README.md's finding codes differ from controller_core/codes.py: run "
                  "python scripts/readme_codes.py --write", file=sys.stderr)
            return 1
        return 0
    if argv == ["--write"]:
        head, _, tail = _split(text)
        README.write_text(f"{head}\n{table}\n{tail}", encoding="utf-8")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
