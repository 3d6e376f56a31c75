"""A data file of the lake deleted behind its back: a one-line "cannot run" naming the file, not an internal error.

Delta tables list their data files in their log; when one is removed outside kraft-audit (a clean-up script, a
restore that missed a folder) the next reader finds a path that is not there.  Spark says PATH_NOT_FOUND, delta-rs
"Object at location ... not found" (with terminal colours in the text); either way the job exits 2 with the file
in its one stderr line, and nothing else.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from cli_errors import one_line
from jobs import cli
from lake.catalog import METADATA_RECORDS, PARTITION_STATE_HISTORY
from lake.delta import Lake

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "last-replica-standing-elr-off"  # 60 records: the cheapest real ingest


def _delete_a_file(lake: str, table: str) -> Path:
    files = Lake(lake, None, backend="delta-rs").data_files(table)
    assert files
    gone = Path(unquote(urlparse(files[0]).path))
    gone.unlink()
    return gone


def test_replay_of_a_bronze_table_missing_a_file_cannot_run_and_names_it(spark, tmp_path, capsys):
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "c1", "--log-dir", str(DATA), "--lake", lake]) == 0
    gone = _delete_a_file(lake, METADATA_RECORDS.name)
    capsys.readouterr()
    assert cli.main(["replay", "--cluster", "c1", "--lake", lake]) == 2
    line = one_line(capsys.readouterr().err, "replay", gone.name, "is missing")
    assert "internal error" not in line


def test_readers_of_a_silver_table_missing_a_file_cannot_run_and_name_it(spark, tmp_path, capsys):
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "c1", "--log-dir", str(DATA), "--lake", lake]) == 0
    assert cli.main(["replay", "--cluster", "c1", "--lake", lake]) == 0
    gone = _delete_a_file(lake, PARTITION_STATE_HISTORY.name)
    for argv in (["audit", "--cluster", "c1", "--lake", lake], ["describe", "--cluster", "c1", "--lake", lake],
                 ["quality", "--cluster", "c1", "--lake", lake]):
        capsys.readouterr()
        assert cli.main(argv) == 2, argv
        line = one_line(capsys.readouterr().err, argv[0], gone.name, "is missing")
        assert "\x1b" not in line and "internal error" not in line


def test_a_damaged_commit_file_cannot_run_and_names_the_tables_log(spark, tmp_path, capsys):
    """A line of a table's Delta log damaged outside kraft-audit: delta-rs says only what it could not parse; every
    reader and the next job say which table's log folder it is, in their one line, not as an internal error."""
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "c1", "--log-dir", str(DATA), "--lake", lake]) == 0
    assert cli.main(["replay", "--cluster", "c1", "--lake", lake]) == 0
    log = Path(lake) / METADATA_RECORDS.name / "_delta_log"
    commit = sorted(log.glob("*.json"))[0]
    text = commit.read_text()
    at = text.index('{"add"')
    commit.write_text(text[:at] + "x" + text[at:])  # no longer JSON where an action starts
    for argv in (["audit", "--cluster", "c1", "--lake", lake], ["timeline", "--cluster", "c1", "--lake", lake,
                                                                 "--broker", "1"],
                 ["quality", "--cluster", "c1", "--lake", lake], ["replay", "--cluster", "c1", "--lake", lake]):
        capsys.readouterr()
        assert cli.main(argv) == 2, argv
        line = one_line(capsys.readouterr().err, argv[0], f"{METADATA_RECORDS.name}/_delta_log",
                        "cannot be read")
        assert "internal error" not in line
