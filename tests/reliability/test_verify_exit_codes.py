"""``verify`` on input it cannot trust (issue 13): never "0 divergences", exit 0.

CLI contract (README): 1 = findings, among them any quarantined byte of the input, with one stderr line
per span naming file and byte; 2 = it cannot run or gives no verdict, unreadable input among them.  So a
log of which some records were decoded (a truncated segment) is verified and exits 1 with the warning;
a log of which not one record could be decoded (an ELF binary named like a segment, an empty segment,
a segment cut inside its first batch) has nothing to verify: exit 2, one line naming the file, the byte
and why."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs import cli

REAL = Path(__file__).resolve().parents[3] / "shared" / "realdata"
SEGMENT = REAL / "mavila01-3broker-mv3.9/kafka1/__cluster_metadata-0/00000000000000000000.log"
NAME = "00000000000000000000.log"


def _log_dir(tmp_path: Path, data: bytes) -> Path:
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    (meta / NAME).write_bytes(data)
    return tmp_path


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("case,reason", [("elf", "NOT_A_LOG"), ("empty", "EMPTY_FILE"), ("first-batch-cut", "NOT_A_LOG")])
def test_nothing_decodable_exits_2_naming_file_and_byte(tmp_path, capsys, case, reason):
    data = {"elf": Path("/bin/ls").read_bytes() if Path("/bin/ls").exists() else b"\x7fELF" + bytes(4000),
            "empty": b"", "first-batch-cut": SEGMENT.read_bytes()[:50]}[case]
    d = _log_dir(tmp_path, data)
    for extra in ([], ["--json"]):
        assert cli.main(["verify", "--log-dir", str(d), *extra]) == 2
        out, err = capsys.readouterr()
        lines = _lines(err)
        assert len(lines) == 1, err
        assert lines[0].startswith("kraft-audit verify: nothing could be decoded")
        assert f"__cluster_metadata-0/{NAME} at byte 0" in lines[0] and reason in lines[0]
        assert "divergences" not in out and "Traceback" not in err


def test_truncated_segment_exits_1_with_one_warning(tmp_path, capsys):
    raw = SEGMENT.read_bytes()
    d = _log_dir(tmp_path, raw[:100000])
    assert cli.main(["verify", "--log-dir", str(d)]) == 1
    out, err = capsys.readouterr()
    warn = [line for line in _lines(err) if "quarantined" in line]
    assert len(warn) == 1 and f"{NAME} at byte 99938" in warn[0], err
    assert "1 quarantined spans" in out
    assert cli.main(["verify", "--log-dir", str(d), "--json"]) == 1
    assert '"quarantined": [{' in capsys.readouterr().out


def test_elf_beside_a_good_segment_exits_1(tmp_path, capsys):
    """A later segment that is garbage: the log is verified up to it, and the damage is reported."""
    d = _log_dir(tmp_path, SEGMENT.read_bytes())
    elf = d / "__cluster_metadata-0" / "00000000000000003088.log"
    elf.write_bytes(Path("/bin/ls").read_bytes() if Path("/bin/ls").exists() else b"\x7fELF" + bytes(4000))
    assert cli.main(["verify", "--log-dir", str(d)]) == 1
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and "00000000000000003088.log at byte 0: not a Kafka log" in lines[0], lines


def test_collect_log_info_2gib_batch_header_is_not_healthy(tmp_path):
    """A replica segment whose first batch header claims 2 GiB: CORRUPT_MESSAGE (2) naming the file and
    byte, not a healthy replica with a torn tail."""
    import json
    import struct

    src = REAL / "ogs59-3broker-mv3.7/kafka-1/rxx-topic-1"
    part = tmp_path / "rxx-topic-1"
    shutil.copytree(src, part)
    seg = part / NAME
    raw = bytearray(seg.read_bytes())
    struct.pack_into(">i", raw, 8, 0x7FFFFFFF)
    seg.chmod(0o644)
    seg.write_bytes(bytes(raw))
    out = tmp_path / "info.json"
    assert cli.main(["collect-log-info", "--broker-id", "1", "--data-dir", str(tmp_path), "-o", str(out),
                     "--no-metadata"]) == 0
    entry = json.loads(out.read_text())["TopicPartitionLogInfoList"][0]["PartitionLogInfo"][0]
    assert entry["ErrorCode"] == 2
    assert f"{NAME}: byte 0: batchLength 2147483647" in entry["ErrorMessage"]


def test_collect_log_info_damaged_length_hiding_a_batch_is_not_a_torn_tail():
    from audit.loginfo import segment_log_end_offset

    import struct

    raw = bytearray((REAL / "ogs59-3broker-mv3.7/kafka-1/rxx-topic-1" / NAME).read_bytes())
    healthy = segment_log_end_offset(bytes(raw), 0)
    assert healthy.stop_position is None and healthy.batches >= 2
    struct.pack_into(">i", raw, 8, struct.unpack_from(">i", raw, 8)[0] + 100000)  # past the end
    walked = segment_log_end_offset(bytes(raw), 0)
    assert not walked.torn_tail and "an intact batch follows" in walked.stop_reason
    cut = segment_log_end_offset((REAL / "ogs59-3broker-mv3.7/kafka-1/rxx-topic-1" / NAME).read_bytes()[:-5], 0)
    assert cut.torn_tail  # a real torn tail stays one


def test_the_empty_active_segment_after_a_roll_is_no_damage_an_empty_segment_elsewhere_is(tmp_path, capsys):
    """Kafka rolls a segment by creating the next, empty, one: a log copied right after a roll ends in an empty
    ``.log`` at the offset where the records end.  verify of it equals verify without it (exit 0, nothing
    quarantined); an empty segment followed by another one is a hole and is reported (EMPTY_FILE, exit 1)."""
    from controller_core.logdir import discover

    raw = SEGMENT.read_bytes()
    clean = _log_dir(tmp_path / "clean", raw)
    assert cli.main(["verify", "--log-dir", str(clean), "--json"]) == 0
    expected = capsys.readouterr().out

    rolled = _log_dir(tmp_path / "rolled", raw)
    (rolled / "__cluster_metadata-0" / "00000000000000003088.log").write_bytes(b"")
    assert [f.path.name for f in discover(rolled)] == [NAME]
    assert cli.main(["verify", "--log-dir", str(rolled), "--json"]) == 0
    out, err = capsys.readouterr()
    assert out == expected and "quarantined" not in err

    holed = _log_dir(tmp_path / "holed", raw)
    (holed / "__cluster_metadata-0" / "00000000000000003088.log").write_bytes(b"")
    (holed / "__cluster_metadata-0" / "00000000000000009000.log").write_bytes(b"")  # now the active one
    assert [f.path.name for f in discover(holed)] == [NAME, "00000000000000003088.log"]
    assert cli.main(["verify", "--log-dir", str(holed)]) == 1
    err = capsys.readouterr().err
    assert "quarantined 0 bytes: __cluster_metadata-0/00000000000000003088.log at byte 0: the file is empty" in err
