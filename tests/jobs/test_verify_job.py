"""``kraft-audit verify`` on the pipeline: exit 1 on a damaged input too, naming the file and byte."""
from __future__ import annotations

import json
import shutil

from jobs import cli
from realdata_facts import CLUSTERS, REALDATA


def _damaged(tmp_path, flip_at: int):
    src = REALDATA / CLUSTERS["vasifvortex"] / "__cluster_metadata-0" / "00000000000000000000.log"
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    shutil.copy(src, meta / src.name)
    raw = bytearray((meta / src.name).read_bytes())
    raw[flip_at] ^= 0xFF  # inside a batch: its CRC no longer verifies
    (meta / src.name).write_bytes(bytes(raw))
    return tmp_path


def test_clean_log_exits_0(capsys):
    assert cli.main(["verify", "--log-dir", str(REALDATA / CLUSTERS["vasifvortex"])]) == 0
    assert "quarantined" not in capsys.readouterr().err


def test_quarantined_bytes_exit_1_with_file_and_position(tmp_path, capsys):
    d = _damaged(tmp_path, 3000)
    assert cli.main(["verify", "--log-dir", str(d), "--json"]) == 1
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    [q] = doc["quarantined"]
    assert q["file"].endswith("00000000000000000000.log") and q["position"] <= 3000 < q["position"] + q["length"]
    assert q["reason"] and f"at byte {q['position']}" in q["message"]
    lines = [line for line in cap.err.splitlines() if "quarantined" in line]
    assert lines == [f"kraft-audit verify: quarantined {q['length']} bytes: {q['message']}"]
    # the records after the damaged batch are still replayed
    clean = cli.main(["verify", "--log-dir", str(REALDATA / CLUSTERS["vasifvortex"]), "--json"])
    assert clean == 0 and 0 < doc["records"] < json.loads(capsys.readouterr().out)["records"]
