"""The CLI contract's error shape, asserted once for every test that checks it: exactly one non-empty stderr
line, ``kraft-audit <command>: ...``, naming what it must name, never a traceback."""
from __future__ import annotations


def one_line(err: str, command: str, *names: str) -> str:
    """The one error line of ``err`` (asserted), containing each of ``names``."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kraft-audit {command}: "), lines[0]
    for n in names:
        assert n in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]
