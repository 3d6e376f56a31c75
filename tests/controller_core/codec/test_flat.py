"""The compiled flat-body loop (codec/flat.py) against the NumPy struct decoder (codec/vector.py).

For every group it takes, the loop must give the NumPy decoder's columns exactly (type, values, nulls, the
defaults of absent tagged fields); every group it does not take plainly (a body that does not parse, a
string beyond ASCII, an unknown tag) it must hand back (None), so the NumPy path and the scalar reader
keep naming every error.  Checked on property-generated bodies, on every real log and on a simulated one;
and once with the JIT off, so the loop stays debuggable as plain Python.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from controller_core.codec import flat, logfile
from controller_core.codec import vector as V
from controller_core.codec.logfile import iter_chunks
from controller_core.codec.message import encode_body, uuid_to_str
from controller_core.records import BY_TYPE_NAME
from realdata_facts import REALDATA, readme_table

ROOT = Path(__file__).resolve().parents[3]
REAL_FILES = sorted(REALDATA / rel for rel in readme_table())
SMALL = REALDATA / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log"


def _numpy_columns(a, starts, ends, rdef, version):
    cur = V.Cursor(a, starts.copy(), ends, np.ones(len(starts), bool))
    cols = V.decode_struct(cur, rdef.fields, version, [])
    return cols, cur.ok & (cur.pos == cur.end)


def _bodies(bodies: list[bytes]):
    buf = b"".join(bodies)
    ends = np.cumsum([len(b) for b in bodies]).astype(np.int64)
    return V.padded(buf), ends - np.array([len(b) for b in bodies], np.int64), ends


def _assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k in want:
        assert got[k].type == want[k].type, k
        assert got[k].equals(want[k]), (k, got[k].to_pylist()[:5], want[k].to_pylist()[:5])


# ------------------------------------------------------------------------------ generated bodies
replica_lists = st.lists(st.integers(-1, 2 ** 31 - 1), max_size=6)
uuids = st.binary(min_size=16, max_size=16).map(uuid_to_str)


@st.composite
def partition_change(draw, version):
    d = {"partitionId": draw(st.integers(0, 2 ** 31 - 1)), "topicId": draw(uuids),
         "isr": draw(st.none() | replica_lists), "leader": draw(st.integers(-2, 9)),
         "replicas": draw(st.none() | replica_lists), "removingReplicas": draw(st.none() | replica_lists),
         "addingReplicas": draw(st.none() | replica_lists)}
    if version >= 0:
        d["leaderRecoveryState"] = draw(st.sampled_from([-1, 0, 1]))
    if version >= 1:
        d["directories"] = draw(st.none() | st.lists(uuids, max_size=4))
    if version >= 2:
        d["eligibleLeaderReplicas"] = draw(st.none() | replica_lists)
        d["lastKnownElr"] = draw(st.none() | replica_lists)
    return d


@st.composite
def partition_record(draw, version):
    d = {"partitionId": draw(st.integers(0, 99)), "topicId": draw(uuids), "replicas": draw(replica_lists),
         "isr": draw(replica_lists), "removingReplicas": draw(replica_lists), "addingReplicas": draw(replica_lists),
         "leader": draw(st.integers(-1, 9)), "leaderRecoveryState": draw(st.sampled_from([0, 1])),
         "leaderEpoch": draw(st.integers(-1, 2 ** 31 - 1)), "partitionEpoch": draw(st.integers(0, 2 ** 31 - 1))}
    if version >= 1:
        d["directories"] = draw(st.lists(uuids, max_size=4))
    if version >= 2:
        d["eligibleLeaderReplicas"] = draw(st.none() | replica_lists)
        d["lastKnownElr"] = draw(st.none() | replica_lists)
    return d


ascii_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)


@st.composite
def config_record(draw, version):
    return {"resourceType": draw(st.integers(-128, 127)), "resourceName": draw(ascii_text),
            "name": draw(ascii_text), "value": draw(st.none() | ascii_text)}


@st.composite
def broker_change(draw, version):
    d = {"brokerId": draw(st.integers(0, 9)), "brokerEpoch": draw(st.integers(-1, 2 ** 62)),
         "fenced": draw(st.sampled_from([-1, 0, 1]))}
    if version >= 1:
        d["inControlledShutdown"] = draw(st.sampled_from([0, 1]))
    if version >= 2:
        d["logDirs"] = draw(st.lists(uuids, max_size=3))
    return d


GENERATORS = [("PARTITION_CHANGE_RECORD", partition_change, (0, 1, 2)),
              ("PARTITION_RECORD", partition_record, (0, 1, 2)),
              ("CONFIG_RECORD", config_record, (0,)),
              ("BROKER_REGISTRATION_CHANGE_RECORD", broker_change, (0, 1, 2, 3))]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), which=st.sampled_from(GENERATORS))
def test_flat_columns_equal_the_numpy_decoder_on_generated_bodies(data, which):
    name, gen, versions = which
    rdef = BY_TYPE_NAME[name]
    version = data.draw(st.sampled_from(versions))
    records = data.draw(st.lists(gen(version), min_size=1, max_size=40))
    a, starts, ends = _bodies([encode_body(rdef.fields, version, d) for d in records])
    got = flat.decode(a, starts, ends, flat.plan(rdef, version))
    want, fine = _numpy_columns(a, starts, ends, rdef, version)
    assert fine.all() and got is not None
    _assert_same(got, want)


def _pcr(**kw):
    d = {"partitionId": 3, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "isr": [1, 2], "leader": 1}
    d.update(kw)
    return encode_body(BY_TYPE_NAME["PARTITION_CHANGE_RECORD"].fields, 0, d)


@pytest.mark.parametrize("case", ["truncated", "trailing byte", "unknown tag", "not ascii", "null not nullable",
                                  "tags out of order"])
def test_irregular_bodies_are_handed_back_to_the_numpy_path(case):
    rdef = BY_TYPE_NAME["PARTITION_CHANGE_RECORD"]
    good = _pcr()
    if case == "truncated":
        bad = good[:-3]
    elif case == "trailing byte":
        bad = good + b"\x00"
    elif case == "unknown tag":
        bad = encode_body(rdef.fields, 0, {"partitionId": 3, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"},
                          extra_tags={7: b"\x01\x02"})
    elif case == "null not nullable":  # PartitionRecord: partitionId, topicId, then replicas (not nullable)
        prdef = BY_TYPE_NAME["PARTITION_RECORD"]
        body = bytearray(encode_body(prdef.fields, 0, {"partitionId": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}))
        body[20] = 0  # replicas: compact length 0 = null
        a, starts, ends = _bodies([bytes(body)])
        assert flat.decode(a, starts, ends, flat.plan(prdef, 0)) is None
        assert not _numpy_columns(a, starts, ends, prdef, 0)[1].all()
        return
    elif case == "tags out of order":
        two = encode_body(rdef.fields, 2, {"partitionId": 3, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ",
                                           "leaderRecoveryState": 1, "eligibleLeaderReplicas": [1]})
        # partitionId, topicId (20 bytes), 2 tags: (5, 1 byte: 1), (6, 5 bytes: [1]); swapped: 6 before 5
        assert two[20:24] == b"\x02\x05\x01\x01"
        bad = two[:21] + two[24:] + two[21:24]
        a, starts, ends = _bodies([bad])
        assert flat.decode(a, starts, ends, flat.plan(rdef, 2)) is None
        assert not _numpy_columns(a, starts, ends, rdef, 2)[1].all()
        return
    else:
        crdef = BY_TYPE_NAME["CONFIG_RECORD"]
        bad = encode_body(crdef.fields, 0, {"resourceType": 2, "resourceName": "ordérs", "name": "x", "value": "y"})
        a, starts, ends = _bodies([bad] * 3)
        assert flat.decode(a, starts, ends, flat.plan(crdef, 0)) is None
        want, fine = _numpy_columns(a, starts, ends, crdef, 0)  # valid UTF-8: the NumPy path takes it
        assert fine.all() and want["resourceName"].to_pylist() == ["ordérs"] * 3
        return
    a, starts, ends = _bodies([good, bad, good])
    assert flat.decode(a, starts, ends, flat.plan(rdef, 0)) is None
    _, fine = _numpy_columns(a, starts, ends, rdef, 0)
    if case == "unknown tag":
        assert fine.all()  # the NumPy path keeps the unknown tag (unknown_tagged_fields)
    else:
        assert fine.tolist() == [True, False, True]


def test_nested_record_types_have_no_flat_plan():
    assert flat.plan(BY_TYPE_NAME["REGISTER_BROKER_RECORD"], 3) is None  # endPoints, features: structs
    assert flat.plan(BY_TYPE_NAME["LEADER_CHANGE"], 0) is None  # voters: structs
    assert flat.plan(BY_TYPE_NAME["PARTITION_CHANGE_RECORD"], 2) is not None


# -------------------------------------------------------------------------------------- real logs
def _chunks(path: Path, use_flat: bool, monkeypatch) -> list:
    """The file's chunks with the flat loop on every group (any size) or on none."""
    monkeypatch.setattr(logfile, "COMPILED_MIN_RECORDS", 1 if use_flat else 1 << 62)
    monkeypatch.setattr(logfile, "_use_compiled", lambda size: True)
    return list(iter_chunks(str(path)))


def _assert_same_chunks(path: Path, monkeypatch) -> int:
    taken = []
    decode = flat.decode

    def counting(a, starts, ends, pl):
        out = decode(a, starts, ends, pl)
        taken.append(0 if out is None else len(starts))
        return out

    monkeypatch.setattr(flat, "decode", counting)
    with_flat = _chunks(path, True, monkeypatch)
    without = _chunks(path, False, monkeypatch)
    assert len(with_flat) == len(without)
    for x, y in zip(with_flat, without):
        assert [q.message for q in x.quarantine] == [q.message for q in y.quarantine]
        assert [(g.rdef.type_name, g.version, g.rows.tolist()) for g in x.groups] == \
               [(g.rdef.type_name, g.version, g.rows.tolist()) for g in y.groups]
        for gx, gy in zip(x.groups, y.groups):
            _assert_same(gx.columns, gy.columns)
    return sum(taken)


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: str(p.relative_to(REALDATA)))
def test_flat_groups_equal_the_numpy_groups_on_every_real_file(path, monkeypatch):
    assert _assert_same_chunks(path, monkeypatch) > 0


def test_flat_groups_equal_the_numpy_groups_on_a_simulated_log(tmp_path, monkeypatch):
    from controller_core.logdir import discover
    from simulator.fleet import simulate_fleet

    simulate_fleet(tmp_path, 2000, 6, seed=3)
    files = [lf.path for lf in discover(tmp_path) if lf.kind in ("segment", "snapshot")]
    records = sum(len(ch) for p in files for ch in iter_chunks(str(p)))
    taken = sum(_assert_same_chunks(p, monkeypatch) for p in files)
    assert taken > 0.9 * records  # nearly all: partition records and changes


def test_flat_loop_runs_as_plain_python_without_the_jit(monkeypatch):
    """NUMBA_DISABLE_JIT=1: the loop interpreted gives the compiled loop's columns."""
    code = ("import json, sys; import pyarrow as pa; from controller_core.codec import flat, logfile; "
            "logfile.COMPILED_MIN_RECORDS = 1; logfile._use_compiled = lambda size: True; "
            "chunks = list(logfile.iter_chunks(sys.argv[1])); "
            "print(json.dumps([[g.rdef.type_name, {k: c.to_pylist() for k, c in g.columns.items()}] "
            "for ch in chunks for g in ch.groups]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code, str(SMALL)], capture_output=True, text=True, env=env,
                         check=True, timeout=300)
    interpreted = json.loads(res.stdout)
    compiled = [[g.rdef.type_name, {k: c.to_pylist() for k, c in g.columns.items()}]
                for ch in _chunks(SMALL, True, monkeypatch) for g in ch.groups]
    assert interpreted == json.loads(json.dumps(compiled))
    assert any(t == "PARTITION_CHANGE_RECORD" for t, _ in interpreted)


def test_unknown_tag_body_keeps_its_unknown_tagged_fields_through_the_chunk(tmp_path, monkeypatch):
    """A group with one unknown-tag body is decoded the NumPy way as a whole: the tag is kept."""
    from controller_core.codec.batch import encode_batch

    rdef = BY_TYPE_NAME["PARTITION_CHANGE_RECORD"]
    recs = [("PARTITION_CHANGE_RECORD", 0, {"partitionId": i, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "leader": 1})
            for i in range(80)]
    raw = encode_batch(0, recs)
    body = encode_body(rdef.fields, 0, {"partitionId": 99, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"},
                       extra_tags={9: b"\x05"})
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(raw + _batch_with_body(80, rdef.api_key, body))
    monkeypatch.setattr(logfile, "_use_compiled", lambda size: True)
    monkeypatch.setattr(logfile, "COMPILED_MIN_RECORDS", 1)
    groups = [g for ch in iter_chunks(str(log)) for g in ch.groups]
    assert [len(g.rows) for g in groups] == [81]
    assert json.loads(groups[0].unknown_tagged_fields[80].as_py()) == [{"tag": 9, "data": "BQ=="}]


def _batch_with_body(offset: int, api_key: int, body: bytes) -> bytes:
    """A one-record batch whose value is frameVersion 1, the apiKey, version 0, then ``body``."""
    from controller_core.codec import batch as B

    return B.encode_batch(offset, [B.raw_record(api_key, 0, body)])


@pytest.mark.parametrize("et", ["int16", "int32", "int64"])
def test_signed_fields_read_in_one_pass_equal_the_numpy_gather(et):
    """A group's signed integer fields (compiled, byte by byte) equal NumPy's gather of big-endian words, the
    extremes and -1 included."""
    from controller_core.codec import vector as V

    rng = np.random.default_rng(len(et))
    a = rng.integers(0, 256, 4000, dtype=np.uint8)
    a[:8] = 0xFF  # -1
    a[8:16] = [0x80] + [0] * 7  # the most negative value of every width
    a[16:24] = [0x7F] + [0xFF] * 7  # the largest
    pos = np.concatenate([[0, 8, 16], rng.integers(0, 3990, 500)]).astype(np.int64)
    got = flat._fixed_values(a, pos, et).to_numpy()
    assert got.dtype == np.dtype(et) and (got == V.be(a, pos, et)).all()
