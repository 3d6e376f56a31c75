"""Issue 12 item 4, inputs recognised honestly: a folder holding only a snapshot replays from it; a
folder that is not a metadata log (a topic-partition folder, random files) exits 2 with one line naming it."""
from __future__ import annotations

import shutil

from jobs import cli
from realdata_facts import REALDATA

LOG = REALDATA / "ogs59-3broker-mv3.7/kafka-1"


def _one_line(err: str, command: str, names: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kraft-audit {command}: "), lines[0]
    assert names in lines[0], lines[0]
    assert "Traceback" not in err


def test_a_snapshot_only_folder_replays_from_the_snapshot(tmp_path, capsys):
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    snap = sorted((LOG / "__cluster_metadata-0").glob("*.checkpoint"))[-1]
    shutil.copy(snap, meta / snap.name)
    assert cli.main(["verify", "--log-dir", str(tmp_path)]) in (0, 1)
    out, err = capsys.readouterr()
    assert "no metadata records" not in err
    assert cli.main(["verify", "--log-dir", str(meta)]) in (0, 1)
    assert "no metadata records" not in capsys.readouterr().err
    for command in ("describe", "audit"):
        assert cli.main([command, "--log-dir", str(tmp_path)]) in (0, 1), capsys.readouterr().err
        assert "no metadata records" not in capsys.readouterr().err


def test_a_topic_partition_folder_exits_2_naming_the_topic(tmp_path, capsys):
    part = tmp_path / "orders-0"
    part.mkdir()
    seg = sorted((LOG / "__cluster_metadata-0").glob("*.log"))[0]
    shutil.copy(seg, part / seg.name)
    assert cli.main(["verify", "--log-dir", str(part)]) == 2
    _one_line(capsys.readouterr().err, "verify", "orders-0 is the partition folder of topic 'orders'")


def test_a_folder_of_random_files_exits_2_naming_it(tmp_path, capsys):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello\n")
    assert cli.main(["verify", "--log-dir", str(junk)]) == 2
    _one_line(capsys.readouterr().err, "verify", str(junk))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["verify", "--log-dir", str(empty)]) == 2
    _one_line(capsys.readouterr().err, "verify", str(empty))


def test_every_log_dir_command_warns_of_a_damaged_log_in_one_line(tmp_path, capsys):
    from realdata_facts import CLUSTERS

    src = REALDATA / CLUSTERS["vasifvortex"] / "__cluster_metadata-0" / "00000000000000000000.log"
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    raw = bytearray(src.read_bytes())
    raw[3000] ^= 0xFF  # inside a batch: its CRC no longer verifies
    (meta / src.name).write_bytes(bytes(raw))
    assert cli.main(["verify", "--log-dir", str(tmp_path)]) == 1
    capsys.readouterr()
    for command in ("describe", "audit", "plan"):
        argv = [command, "--log-dir", str(tmp_path)]
        if command == "plan":
            argv += ["--election-type", "preferred", "-o", str(tmp_path / "plan-out")]
        code = cli.main(argv)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if "quarantined" in line]
        assert len(lines) == 1, (command, code, err)
        assert lines[0].startswith(f"kraft-audit {command}: warning: "), lines[0]
        assert f"__cluster_metadata-0/{src.name} at byte" in lines[0], lines[0]
        assert "Traceback" not in err
        assert code in (0, 1), (command, code, err)


def test_a_data_dir_named_like_a_partition_is_not_called_one(tmp_path, capsys):
    data = tmp_path / "kafka-1"
    data.mkdir()
    (data / "meta.properties").write_text("node.id=1\n")
    assert cli.main(["verify", "--log-dir", str(data)]) == 2
    err = capsys.readouterr().err
    _one_line(err, "verify", str(data))
    assert "partition folder" not in err
