"""scripts/sweep_logs.py, the check over a pile of real logs: every Spark-free command in fresh processes on each
log folder; a real log passes, a damaged copy of it is named as a defect, and the script's exit says so."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parent.parent


def test_a_real_log_passes_and_a_damaged_copy_is_a_defect(tmp_path):
    real = REALDATA / CLUSTERS["vasifvortex"] / "__cluster_metadata-0"
    shutil.copytree(real, tmp_path / "good" / "__cluster_metadata-0")
    bad = tmp_path / "bad" / "__cluster_metadata-0"
    shutil.copytree(real, bad)
    segment = bad / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[4000] ^= 0xFF  # one flipped byte inside a batch: its CRC no longer verifies
    segment.write_bytes(bytes(data))
    out = tmp_path / "sweep.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_logs.py"), str(tmp_path), "--jsonl", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "2 log folders, 1 with a defect"
    rows = {Path(r["folder"]).parent.name: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["good"]["problems"] == []
    assert {name: r["rc"] for name, r in rows["good"]["results"].items()} == \
        {"summary": 0, "verify": 0, "describe": 0, "audit": 0}
    assert json.loads(rows["good"]["results"]["verify"]["out"])["records"] == 153
    assert rows["bad"]["problems"] and all(p.startswith("decode: ") for p in rows["bad"]["problems"])
    assert "CRC" in rows["bad"]["problems"][0]
    assert "DEFECT decode: " in p.stdout


def test_a_path_that_is_not_a_folder_is_exit_2(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_logs.py"), str(tmp_path / "nothing")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip() == f"sweep_logs: {tmp_path / 'nothing'}: not a folder"


def test_a_snapshot_is_compared_with_the_segments_replay(tmp_path):
    """ogs59's snapshot (offset 20475) equals its segment replayed to offset 20474; another cluster's snapshot under
    that name does not, partitions and brokers."""
    src = REALDATA / CLUSTERS["ogs59"]
    for name in ("good", "swapped"):
        shutil.copytree(src / "__cluster_metadata-0", tmp_path / name / "__cluster_metadata-0")
        shutil.copy(src / "bootstrap.checkpoint", tmp_path / name)
    other = next((REALDATA / CLUSTERS["induswargods"] / "__cluster_metadata-0").glob("*.checkpoint"))
    [snap] = (tmp_path / "swapped" / "__cluster_metadata-0").glob("*.checkpoint")
    shutil.copy(other, snap)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_logs.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    good = next(line for line in p.stdout.splitlines() if line.startswith("good/"))
    assert good.endswith("; 1 snapshot(s) compared")
    defects = [line.strip() for line in p.stdout.splitlines() if line.startswith("  DEFECT")]
    assert [d.split(": ")[1].split(" differ")[0] for d in defects] == ["partitions", "brokers"]
    assert all(d.startswith(f"DEFECT snapshot {snap.name}: ") and "at offset 20474" in d for d in defects)
    assert p.stdout.splitlines()[-1] == "2 log folders, 1 with a defect"


def test_a_snapshot_past_the_segments_is_counted_apart(tmp_path):
    """A snapshot past the segments' last record (a follower that stopped after fetching it: Kafka starts the log
    from it) has no segment replay to be compared with: counted apart, no defect."""
    src = REALDATA / CLUSTERS["ogs59"]
    log = tmp_path / "follower" / "__cluster_metadata-0"
    shutil.copytree(src / "__cluster_metadata-0", log)
    [snap] = log.glob("*.checkpoint")
    epoch = snap.name.split("-")[1]
    snap.rename(log / f"{99_999:020d}-{epoch}")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_logs.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(line for line in p.stdout.splitlines() if line.startswith("follower/"))
    assert line.endswith("; 1 snapshot(s) past the segments' last record") and "exit summary 0 verify 0" in line
