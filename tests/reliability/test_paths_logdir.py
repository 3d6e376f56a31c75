"""Issue 13 item 3, paths: a file of a ``--log-dir`` named like a log file (segment, snapshot,
``bootstrap.checkpoint``) that cannot be read is named, never skipped silently.

Exit 2, not a warning: the CLI contract gives 2 to unreadable input, and a replay without that file would
report a history with a hole in it as if it were the whole log (a missing segment hides its incidents, or
invents an outage).  The line names the file and what it is.  A FIFO is recognised by ``stat`` and never
opened: opening it for reading would block until some writer appeared.  The FIFO cases run in a subprocess
with a timeout, so a regression fails instead of hanging the suite.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_errors import one_line as _one_line
from jobs import cli

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "data" / "default-cluster"
META = "__cluster_metadata-0"
SEGMENT = "00000000000000000126.log"  # the second segment of data/default-cluster
EXTRA = "00000000000000099999.log"  # a segment name the log does not hold


@pytest.fixture
def log_dir(tmp_path) -> Path:
    d = tmp_path / "kafka-data"
    (d / META).mkdir(parents=True)
    for p in (SOURCE / META).iterdir():
        shutil.copy(p, d / META / p.name)
    shutil.copy(SOURCE / "bootstrap.checkpoint", d / "bootstrap.checkpoint")
    return d


def _run(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "jobs.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_copy_is_a_good_log(log_dir, capsys):
    assert cli.main(["verify", "--log-dir", str(log_dir)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("command", [["verify"], ["describe"], ["audit"],
                                     ["plan", "--election-type", "preferred"]])
@pytest.mark.parametrize("name", [SEGMENT, EXTRA])
def test_a_dangling_symlink_named_like_a_segment_exits_2_naming_it(log_dir, command, name, capsys):
    link = log_dir / META / name
    link.unlink(missing_ok=True)
    link.symlink_to(log_dir / "gone" / name)
    assert cli.main([*command, "--log-dir", str(log_dir)]) == 2
    _one_line(capsys.readouterr().err, command[0], str(link), "dangling symbolic link", str(log_dir / "gone"))


def test_a_dangling_bootstrap_checkpoint_and_a_symlink_loop_are_named(log_dir, capsys):
    boot = log_dir / "bootstrap.checkpoint"
    boot.unlink()
    boot.symlink_to("nowhere.checkpoint")
    assert cli.main(["verify", "--log-dir", str(log_dir)]) == 2
    _one_line(capsys.readouterr().err, "verify", str(boot), "bootstrap file", "dangling symbolic link")
    boot.unlink()
    shutil.copy(SOURCE / "bootstrap.checkpoint", boot)
    loop = log_dir / META / EXTRA
    loop.symlink_to(loop.name)  # points at itself
    assert cli.main(["verify", "--log-dir", str(log_dir)]) == 2
    _one_line(capsys.readouterr().err, "verify", str(loop), "symbolic link loop")


def test_a_symlink_to_a_real_segment_is_read(log_dir, tmp_path, capsys):
    """Links are fine when they lead to the file: a log assembled from links replays like the original."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seg = log_dir / META / SEGMENT
    shutil.move(seg, elsewhere / SEGMENT)
    seg.symlink_to(elsewhere / SEGMENT)
    assert cli.main(["verify", "--log-dir", str(log_dir), "--json"]) == 0
    capsys.readouterr()


def test_a_directory_named_like_a_segment_exits_2(log_dir, capsys):
    (log_dir / META / EXTRA).mkdir()
    assert cli.main(["verify", "--log-dir", str(log_dir)]) == 2
    _one_line(capsys.readouterr().err, "verify", str(log_dir / META / EXTRA), "a directory")


@pytest.mark.parametrize("command", [["verify"], ["describe"], ["audit"], ["decode", "{meta}"],
                                     ["decode", "{fifo}"]])
def test_a_fifo_is_named_and_never_opened(log_dir, command, tmp_path):
    fifo = log_dir / META / EXTRA
    os.mkfifo(fifo)
    argv = [a.format(meta=log_dir / META, fifo=fifo) for a in command]
    if argv[0] != "decode":
        argv += ["--log-dir", str(log_dir)]
    res = _run(*argv, timeout=60)  # a blocking open would time out here, failing the test
    assert res.returncode == 2, res.stderr
    _one_line(res.stderr, argv[0], str(fifo), "FIFO", "never opened")


def test_ingest_names_a_fifo_before_spark_starts(log_dir, tmp_path):
    os.mkfifo(log_dir / META / EXTRA)
    code = ("import sys; from jobs.cli import main; rc = main(sys.argv[1:]); "
            "sc = getattr(sys.modules.get('pyspark'), 'SparkContext', None); "
            "sys.stdout.write(repr(['jobs.ingest' in sys.modules, bool(sc and sc._active_spark_context)])); "
            "sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code, "ingest", "--cluster", "c", "--log-dir", str(log_dir),
                          "--lake", str(tmp_path / "lake")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert (res.returncode, res.stdout) == (2, "[False, False]"), res.stderr
    _one_line(res.stderr, "ingest", str(log_dir / META / EXTRA), "FIFO")
    assert not (tmp_path / "lake").exists()


def test_other_files_kafka_keeps_are_never_read_whatever_they_are(log_dir, capsys):
    """Only files named like log files are read: a FIFO or a dangling link among Kafka's other files
    (quorum-state, an index) is not opened and changes nothing."""
    os.mkfifo(log_dir / META / "00000000000000000000.index")
    (log_dir / META / "quorum-state").unlink()
    (log_dir / META / "quorum-state").symlink_to("gone")
    assert cli.main(["verify", "--log-dir", str(log_dir)]) == 0
    capsys.readouterr()


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod 000 does not stop root from reading "
                                              "(CAP_DAC_OVERRIDE); the simulated case below covers it")
def test_an_unreadable_segment_exits_2_naming_it(log_dir, capsys):
    seg = log_dir / META / SEGMENT
    seg.chmod(0)
    try:
        assert cli.main(["verify", "--log-dir", str(log_dir)]) == 2
        _one_line(capsys.readouterr().err, "verify", str(seg), "cannot be opened", "Permission denied")
    finally:
        seg.chmod(0o644)


def test_an_unreadable_segment_exits_2_naming_it_simulated(log_dir, monkeypatch, capsys):
    """What chmod 000 does for a user who is not root, simulated for any user: the open of that one segment
    fails with EACCES (the real case above is skipped when the tests run as root)."""
    import errno

    from controller_core import logdir

    seg = log_dir / META / SEGMENT
    real_open = os.open

    def deny(path, flags, *args, **kwargs):
        if Path(path) == seg:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(logdir.os, "open", deny)
    for command in (["verify"], ["audit"], ["describe"]):
        assert cli.main([*command, "--log-dir", str(log_dir)]) == 2
        _one_line(capsys.readouterr().err, command[0], str(seg), "cannot be opened", "Permission denied")
