"""The compiled ``data_json`` writer (codec/jsonwrite.py) against its reference, the Arrow-kernel writer
``jsonout.struct_json``: the same text byte for byte on every real log, on generated records of every type
and version (strings with quotes, backslashes, control characters and non-ASCII text; extreme integers;
null and tagged fields), and when numba's JIT is off."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller_core.codec.batch import encode_batch
from controller_core.codec.jsonout import struct_json
from controller_core.codec.jsonwrite import chunk_json, chunk_lines
from controller_core.codec.logfile import iter_chunks
from realdata_facts import REALDATA
from record_strategies import ALL_VERSIONS, write_generated_batch

ROOT = Path(__file__).resolve().parents[3]
REAL = sorted(p for d in (REALDATA, REALDATA.parent / "realdata-copies") for p in d.rglob("*")
              if p.suffix in (".log", ".checkpoint") and p.is_file())


def _reference(chunk) -> list[str]:
    """The text struct_json writes, placed in file order."""
    out: list = [None] * len(chunk)
    for g in chunk.groups:
        for row, text in zip(g.rows.tolist(), struct_json(g.columns, g.rdef.fields, g.layout, len(g.rows)).to_pylist()):
            out[row] = text
    return out


def _same_text(path: Path) -> int:
    n = 0
    for chunk in iter_chunks(str(path)):
        got = chunk_json(chunk.groups, len(chunk))
        assert got.type == pa.string() and got.null_count == 0
        assert got.to_pylist() == _reference(chunk), path
        n += len(chunk)
    return n


def test_real_logs_byte_for_byte():
    assert len(REAL) >= 20, "the shared real logs are missing"
    total = sum(_same_text(p) for p in REAL)
    assert total > 100_000  # every real log decoded, not a few empty files


@pytest.mark.parametrize("type_name, version", ALL_VERSIONS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_records_byte_for_byte(tmp_path, type_name, version, data):
    path = tmp_path / "00000000000000000000.log"
    values = write_generated_batch(data, path, type_name, version, max_size=20)
    assert _same_text(path) == len(values)


def test_escapes_extremes_and_mixed_types_in_one_batch(tmp_path):
    """Strings needing every kind of escape, int64's extremes and several record types interleaved (rows
    of one group are not contiguous in the file)."""
    nasty = 'q"b\\s/\n\r\t\b\f\x00\x01\x1f\x7f é 中 🙂'
    recs = [
        ("TOPIC_RECORD", 0, {"name": nasty, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}),
        ("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": "t", "name": "k", "value": None}),
        ("TOPIC_RECORD", 0, {"name": "plain", "topicId": "AAAAAAAAAAAAAAAAAAAAAg"}),
        ("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": nasty, "name": "\\", "value": '"'}),
        ("PRODUCER_IDS_RECORD", 0, {"brokerId": -2147483648, "brokerEpoch": -(2 ** 63), "nextProducerId": 2 ** 63 - 1}),
        ("NO_OP_RECORD", 0, {}),
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_batch(0, recs))
    assert _same_text(path) == len(recs)
    chunk = next(iter_chunks(str(path)))
    texts = chunk_json(chunk.groups, len(chunk)).to_pylist()
    assert json.loads(texts[0])["name"] == nasty
    assert json.loads(texts[1])["value"] is None
    assert json.loads(texts[4]) == {"brokerId": -2147483648, "brokerEpoch": -(2 ** 63), "nextProducerId": 2 ** 63 - 1}
    assert texts[5] == "{}"


def test_runs_as_plain_python_without_the_jit():
    """NUMBA_DISABLE_JIT=1: the same functions interpreted write the same text."""
    path = max((p for p in REAL if p.suffix == ".log"), key=lambda p: p.stat().st_size if p.stat().st_size < 2 << 20
               else 0)
    code = ("import json, sys; from controller_core.codec.logfile import iter_chunks; "
            "from controller_core.codec.jsonwrite import chunk_json; "
            "from controller_core.codec.bronze import records_table; "
            "from controller_core.codec.jsonwrite import record_lines; "
            "print(json.dumps([chunk_json(c.groups, len(c)).to_pylist() for c in iter_chunks(sys.argv[1])])); "
            "print(json.dumps([record_lines(records_table(c, '', 'f', 'segment'), '\"f\"').tobytes().decode() "
            "for c in iter_chunks(sys.argv[1])])); "
            "from controller_core.codec.jsonwrite import chunk_lines; "
            "print(json.dumps([b''.join(bytes(s) for s in chunk_lines(c, '\"f\"', 900)).decode() "
            "for c in iter_chunks(sys.argv[1])]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                         check=True, timeout=300)
    want = [chunk_json(c.groups, len(c)).to_pylist() for c in iter_chunks(str(path))]
    assert sum(map(len, want)) > 100
    texts, lines, direct = res.stdout.splitlines()
    assert json.loads(texts) == want
    assert json.loads(direct) == json.loads(lines)
    from controller_core.codec.bronze import records_table
    from controller_core.codec.jsonwrite import record_lines

    assert json.loads(lines) == [record_lines(records_table(c, "", "f", "segment"), '"f"').tobytes().decode()
                                 for c in iter_chunks(str(path))]


def test_sliced_columns_and_empty_and_null_lists(tmp_path):
    """Columns that are slices of larger arrays (offsets into a shared buffer) and empty / null lists: the
    same text as the reference writes for fresh copies of those rows (the reference cannot read a slice of
    a list column with nulls)."""
    recs = [("PARTITION_CHANGE_RECORD", 1, {"partitionId": i, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ",
                                            "isr": list(range(i % 3)), "leader": i - 2,
                                            **({"removingReplicas": []} if i % 2 else {})})
            for i in range(12)]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_batch(0, recs))
    chunk = next(iter_chunks(str(path)))
    g = chunk.groups[0]
    cols = {k: v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v for k, v in g.columns.items()}
    want = struct_json({k: v.take(pa.array(range(3, 9))) for k, v in cols.items()}, g.rdef.fields, g.layout, 6)
    g.columns, g.rows = {k: v.slice(3, 6) for k, v in cols.items()}, np.arange(6)
    got = chunk_json([g], 6).to_pylist()
    assert got == want.to_pylist()
    assert [json.loads(t)["partitionId"] for t in got] == list(range(3, 9))


# ------------------------------------------------------------------------------ decode's JSON Lines
def _lines_both(path: Path, name: str) -> int:
    """decode's lines of ``path`` from the compiled writer and from the Arrow reference (jobs/decode._lines)."""
    from controller_core.codec.bronze import records_table
    from controller_core.codec.jsonwrite import record_lines
    from jobs.decode import _lines, _utf8

    n = 0
    for chunk in iter_chunks(str(path)):
        table = records_table(chunk, "", "f", "segment")
        got = record_lines(table, json.dumps(name, ensure_ascii=False))
        want = bytes(_utf8(_lines(table, name)))
        assert got is not None and got.tobytes() == want, path
        if table.column("unknown_tagged_fields").null_count == len(table):
            # straight from the decoder's arrays: in one block, and in blocks of ~60 lines (a line each: below)
            for block in (1 << 40, 20_000):
                assert b"".join(bytes(s) for s in chunk_lines(chunk, json.dumps(name, ensure_ascii=False), block)) \
                    == want, (path, block)
        else:
            assert chunk_lines(chunk, json.dumps(name, ensure_ascii=False)) is None  # the bronze rows' path prints them
        n += len(chunk)
    return n


def test_decode_lines_equal_the_arrow_reference_on_every_real_log():
    assert sum(_lines_both(p, str(p)) for p in REAL) > 100_000


def test_decode_lines_with_unknown_tags_odd_file_names_and_extremes(tmp_path):
    from controller_core.codec import batch as B
    from controller_core.codec.message import encode_body
    from controller_core.records import BY_TYPE_NAME

    rdef = BY_TYPE_NAME["PARTITION_CHANGE_RECORD"]
    tagged = encode_body(rdef.fields, 0, {"partitionId": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}, extra_tags={9: b"\x05"})
    raw = (encode_batch(2 ** 62, [("TOPIC_RECORD", 0, {"name": 'é"\\', "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}),
                                  ("NO_OP_RECORD", 0, {})], leader_epoch=-1)
           + B.encode_batch(2 ** 62 + 2, [B.raw_record(rdef.api_key, 0, tagged)]))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(raw)
    assert _lines_both(path, 'dir/ö "q"\\x.log') == 3
    from controller_core.codec.bronze import records_table
    from controller_core.codec.jsonwrite import record_lines

    table = records_table(next(iter_chunks(str(path))), "", "f", "segment")
    lines = [json.loads(x) for x in record_lines(table, json.dumps("f")).tobytes().decode().splitlines()]
    assert [x["offset"] for x in lines] == [2 ** 62, 2 ** 62 + 1, 2 ** 62 + 2]
    assert lines[0]["batchLeaderEpoch"] == -1 and lines[0]["data"]["name"] == 'é"\\'
    assert "unknownTaggedFields" not in lines[0]
    assert lines[2]["unknownTaggedFields"] == [{"tag": 9, "data": "BQ=="}]


@pytest.mark.parametrize("unknown_tag", [False, True])
def test_decode_of_a_large_log_equals_the_arrow_reference(tmp_path, unknown_tag):
    """``kraft-audit decode`` on a log past COMPILED_MIN_RECORDS: the lines written straight from the decoder
    (chunk_lines, several blocks) -- or, when a record carries a tag this build does not declare, from the
    bronze rows -- equal the Arrow reference's line for line, and the unknown tag is printed."""
    import io

    from controller_core.codec import batch as B
    from controller_core.codec.bronze import records_table
    from controller_core.codec.logfile import COMPILED_MIN_RECORDS
    from controller_core.codec.message import encode_body
    from controller_core.records import BY_TYPE_NAME
    from jobs import decode

    rdef = BY_TYPE_NAME["PARTITION_CHANGE_RECORD"]
    raw, offset = bytearray(), 0
    for b in range(COMPILED_MIN_RECORDS // 50 + 30):  # batches of 60 records, two batches a second
        recs = [("PARTITION_CHANGE_RECORD", 0, {"partitionId": i, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ",
                                                "isr": [i % 5, 7], "leader": b % 9 - 1}) for i in range(59)]
        recs.append(("TOPIC_RECORD", 0, {"name": f"t-{b}", "topicId": "AAAAAAAAAAAAAAAAAAAAAg"}))
        raw += encode_batch(offset, recs, leader_epoch=b // 7, timestamp=1_700_000_000_000 + 500 * b)
        offset += len(recs)
    if unknown_tag:
        tagged = encode_body(rdef.fields, 0, {"partitionId": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"},
                             extra_tags={9: b"\x05"})
        raw += B.encode_batch(offset, [B.raw_record(rdef.api_key, 0, tagged)])
        offset += 1
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(raw))
    chunks = list(iter_chunks(str(path)))
    assert max(len(c) for c in chunks) >= COMPILED_MIN_RECORDS
    out, err = io.StringIO(), io.StringIO()
    assert decode.run([str(path)], out=out, err=err) == 0
    want = "".join(bytes(decode._utf8(decode._lines(records_table(c, "", "f", "segment"), str(path)))).decode()
                   for c in chunks)
    assert out.getvalue() == want
    lines = out.getvalue().splitlines()
    assert len(lines) == offset and json.loads(lines[-1])["offset"] == offset - 1
    assert len({json.loads(x)["batchTimestamp"] for x in lines}) > 60  # many batches, each its own fields
    assert ("unknownTaggedFields" in lines[-1]) == unknown_tag
    if not unknown_tag:  # a block per line: each line's batch fields rendered anew, the same text
        assert "".join(b"".join(bytes(s) for s in chunk_lines(c, json.dumps(str(path)), 1)).decode()
                       for c in chunks) == want
