"""compare-copies: several nodes' copies of one metadata log, compared batch by batch, checked against what
the bytes of the files show (real copies) and against copies damaged on purpose (simulated)."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from controller_core import copies
from controller_core.codec.batch import read_header
from jobs import cli

COPIES = Path(__file__).resolve().parents[2].parent / "shared" / "realdata-copies"
SEGMENT = "__cluster_metadata-0/00000000000000000000.log"


def _last_offset(buf: bytes) -> int:
    """The last offset of the last batch of a segment, read header by header with the reference reader."""
    pos, last = 0, -1
    while pos < len(buf):
        h = read_header(buf, pos, len(buf))
        last, pos = h.base_offset + h.last_offset_delta, pos + h.size
    return last


@pytest.mark.parametrize("cluster", ["ogs59-3broker-mv3.7", "mavila01-3broker-mv3.9"])
def test_real_copies_relate_as_their_bytes_do(cluster):
    nodes = sorted(p for p in (COPIES / cluster).iterdir() if p.is_dir())
    doc = copies.compare(nodes)
    data = {str(p): (p / SEGMENT).read_bytes() for p in nodes}
    assert len(doc["pairs"]) == 3
    for pair in doc["pairs"]:
        a, b = data[pair["a"]], data[pair["b"]]
        short = min(a, b, key=len)
        if a == b:
            assert pair["relation"] == "identical" and pair["onlyInA"] == pair["onlyInB"] == 0
        else:
            assert max(a, b, key=len).startswith(short)  # the copies of these clusters differ only at the end
            assert pair["relation"] == "prefix"
        assert pair["agreeUpTo"] == _last_offset(short) and pair["firstDifference"] is None
    longest = max(data, key=lambda k: len(data[k]))
    assert len(data[doc["mostComplete"]]) == len(data[longest])
    assert not doc["diverged"]
    for c in doc["copies"]:
        assert c["lastOffset"] == _last_offset(data[c["path"]]) and c["unreadable"] == []
        assert c["nodeId"] == "".join(ch for ch in Path(c["path"]).name if ch.isdigit())


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A simulated node's copy with several segments (small segment.bytes)."""
    d = tmp_path_factory.mktemp("copies") / "node-1"
    assert cli.main(["simulate", "rolling-restart", "-o", str(d), "--seed", "3", "--param", "segment_bytes=2048"]) == 0
    segs = sorted((d / "__cluster_metadata-0").glob("*.log"))
    assert len(segs) >= 3
    return d


def _batches(path: Path) -> list:
    buf = path.read_bytes()
    pos, out = 0, []
    while pos < len(buf):
        h = read_header(buf, pos, len(buf))
        out.append(h)
        pos += h.size
    return out


def _copy(original: Path, to: Path) -> Path:
    shutil.copytree(original, to)
    return to


def _cli(paths, capsys) -> tuple[int, dict]:
    code = cli.main(["compare-copies", *map(str, paths), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_truncated_copy_is_a_prefix(original, tmp_path, capsys):
    cut = _copy(original, tmp_path / "node-2")
    last_seg = sorted((cut / "__cluster_metadata-0").glob("*.log"))[-1]
    hs = _batches(last_seg)
    keep = hs[len(hs) // 2]
    last_seg.write_bytes(last_seg.read_bytes()[:keep.position])  # the node stopped before this batch
    code, doc = _cli([original, cut], capsys)
    [pair] = doc["pairs"]
    prev = hs[len(hs) // 2 - 1]
    assert code == 0 and pair["relation"] == "prefix"
    assert pair["agreeUpTo"] == prev.base_offset + prev.last_offset_delta
    assert pair["onlyInA"] == len(hs) - len(hs) // 2 and pair["onlyInB"] == 0
    assert doc["mostComplete"] == str(original)


def test_a_diverged_tail_is_a_safety_violation(original, tmp_path, capsys):
    other = _copy(original, tmp_path / "node-3")
    seg = sorted((other / "__cluster_metadata-0").glob("*.log"))[-1]
    buf = bytearray(seg.read_bytes())
    hs = _batches(seg)
    n = len(hs) // 3
    for h in hs[n:]:  # from the n-th batch of the last segment on, written in another (higher) epoch
        buf[h.position + 12:h.position + 16] = (h.leader_epoch + 5).to_bytes(4, "big")
    seg.write_bytes(bytes(buf))
    code, doc = _cli([original, other], capsys)
    [pair] = doc["pairs"]
    first = hs[n]
    assert code == 1 and doc["diverged"] and pair["relation"] == "diverged"
    assert pair["firstDifference"]["offset"] == first.base_offset
    assert pair["firstDifference"]["a"]["epoch"] == first.leader_epoch
    assert pair["firstDifference"]["b"]["epoch"] == first.leader_epoch + 5
    assert pair["agreeUpTo"] == hs[n - 1].base_offset + hs[n - 1].last_offset_delta
    assert doc["mostComplete"] == str(other)  # the newer epoch is what Raft keeps
    text = io.StringIO()
    from jobs import compare_copies
    args = cli.build_parser().parse_args(["compare-copies", str(original), str(other)])
    assert compare_copies.run(args, out=text) == 1
    assert f"first difference at offset {first.base_offset}" in text.getvalue()


def test_a_missing_middle_segment_is_reported_not_a_divergence(original, tmp_path, capsys):
    holed = _copy(original, tmp_path / "node-4")
    segs = sorted((holed / "__cluster_metadata-0").glob("*.log"))
    middle = segs[len(segs) // 2]
    hs = _batches(middle)
    middle.unlink()
    code, doc = _cli([original, holed], capsys)
    [pair] = doc["pairs"]
    assert code == 0 and pair["relation"] == "incomplete" and not doc["diverged"]
    span = [hs[0].base_offset, hs[-1].base_offset + hs[-1].last_offset_delta]
    assert pair["missing"] == {"a": [], "b": [span]}
    assert pair["firstDifference"]["offset"] == hs[0].base_offset and pair["firstDifference"]["b"] is None
    assert doc["mostComplete"] == str(original)


def test_compare_copies_needs_two_metadata_logs(original, tmp_path, capsys):
    assert cli.main(["compare-copies", str(original)]) == 2
    assert cli.main(["compare-copies", str(original), str(tmp_path)]) == 2
    assert "neither a __cluster_metadata-0 folder" in capsys.readouterr().err
