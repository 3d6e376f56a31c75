"""Every --log-dir command on a log of which nothing decodes (here: an ELF binary named like a segment) cannot
run: exit 2 with one line naming the file, the byte and why -- never "no records" without saying where."""
from __future__ import annotations

import shutil
import sys

import pytest

from jobs import cli

COMMANDS = [["describe"], ["describe", "--quorum"], ["audit"], ["plan", "--election-type", "preferred"],
            ["timeline", "--topic", "t"], ["verify"]]


@pytest.fixture(scope="module")
def elf_log(tmp_path_factory):
    d = tmp_path_factory.mktemp("elf")
    meta = d / "__cluster_metadata-0"
    meta.mkdir()
    shutil.copy(sys.executable, meta / "00000000000000000000.log")
    return d


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_nothing_decodable_is_exit_2_naming_file_and_byte(elf_log, command, capsys):
    assert cli.main([command[0], "--log-dir", str(elf_log), *command[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "nothing could be decoded, no verdict" in err[0]
    assert "__cluster_metadata-0/00000000000000000000.log at byte 0" in err[0] and "Traceback" not in err[0]
