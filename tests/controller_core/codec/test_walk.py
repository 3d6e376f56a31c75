"""The compiled batch walk (controller_core/codec/walk.py): it finds the same batches, records, types and
versions as the full decoder on every real log and on a simulated one, its CRC32C is the crc32c package's,
and ``decode --summary`` built on it prints exactly what the full decoder's summary printed, also for
damaged files (irregular windows go to the full decoder)."""
from __future__ import annotations

import io
import json
import os
import random
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import crc32c as crc32c_package
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from controller_core.codec import logfile
from controller_core.codec import walk as W
from controller_core.codec.batch import crc32c, encode_batch, iter_batches_scalar
from controller_core.codec.logfile import TYPE_NAMES, DecodedChunk, iter_chunks
from jobs import decode
from realdata_facts import REALDATA, expected_counts, readme_table

ROOT = Path(__file__).resolve().parents[3]
REAL_FILES = sorted(REALDATA / rel for rel in readme_table())
SMALL = REALDATA / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log"
MAVILA = REALDATA / "mavila01-3broker-mv3.9/kafka1/__cluster_metadata-0/00000000000000000000.log"


def _rel(p: Path) -> str:
    return str(p.relative_to(REALDATA))


# --------------------------------------------------------------------------------------------- CRC
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 7))
def test_crc_equals_the_crc32c_package_on_random_bytes(data, skip):
    """Both the table and (where the CPU has it) the instruction, at any alignment and length."""
    want = crc32c_package.crc32c(data[skip:])
    a = np.frombuffer(data, np.uint8)
    assert int(W.crc32c_table(a, min(skip, len(a)), len(a))) == want
    if W.HAS_SSE42:
        assert int(W.crc32c_hw(a, min(skip, len(a)), len(a))) == want
    assert W.crc32c_of(data[skip:]) == want


@pytest.mark.parametrize("path", REAL_FILES[:6], ids=_rel)
def test_crc_equals_the_crc32c_package_on_real_files(path):
    raw = path.read_bytes()
    for hw in (False, True):
        assert W.crc32c_of(raw, hw=hw) == crc32c_package.crc32c(raw)


# ------------------------------------------------------------------------------- walk vs decoder
def _decoded(path: Path, **kw):
    """What the full decoder finds: (batch positions, records as (position, offset, type, version,
    timestamp), quarantine)."""
    chunks = list(iter_chunks(str(path), **kw))
    rec = [(int(p), int(o), TYPE_NAMES[int(t)], int(v), int(ts)) for c in chunks
           for p, o, t, v, ts in zip(c.position, c.offset, c.type_code, c.version, c.timestamp)]
    batches = sorted({int(b) for c in chunks for b in c.batch_position})
    return batches, rec, [q for c in chunks for q in c.quarantine]


def _walked(raw: bytes, first_offset=None):
    w = W.walk(raw, records=True, prev_last=None if first_offset is None else first_offset - 1)
    b, r = w.batch_rows, w.record_rows
    rec = [(int(x[W.R_POS]), int(x[W.R_OFFSET]), TYPE_NAMES[int(x[W.R_CODE])], int(x[W.R_VERSION]),
            int(b[x[W.R_BATCH], W.B_TIMESTAMP] + x[W.R_TS_DELTA])) for x in r]
    return w, b[:, W.B_POS].tolist(), rec


def _check_value_spans(raw: bytes, w: W.Walk) -> None:
    """A metadata record's value starts with frameVersion 1, apiKey, version and ends one byte (the
    header count) before its record does; a control record's value starts with its int16 version."""
    ends = {int(s): int(s + 12 + n) for s, n in zip(w.batch_rows[:, W.B_POS], w.batch_rows[:, W.B_LENGTH])}
    rows = w.record_rows
    for i, x in enumerate(rows):
        vend = int(x[W.R_VALUE_POS] + x[W.R_VALUE_LEN])
        nxt = int(rows[i + 1, W.R_POS]) if i + 1 < len(rows) and rows[i + 1, W.R_BATCH] == x[W.R_BATCH] else \
            ends[int(w.batch_rows[x[W.R_BATCH], W.B_POS])]
        assert vend == nxt - 1 and raw[vend] == 0
        v = int(x[W.R_VALUE_POS])
        if x[W.R_CODE] >= W.CONTROL_CODE_BASE:
            assert struct.unpack_from(">h", raw, v)[0] == x[W.R_VERSION]
        elif x[W.R_CODE] < 128 and x[W.R_VERSION] < 128:
            assert tuple(raw[v:v + 3]) == (1, x[W.R_CODE], x[W.R_VERSION])


@pytest.mark.parametrize("path", REAL_FILES, ids=_rel)
def test_walk_equals_the_decoder_on_every_real_file(path):
    raw = path.read_bytes()
    w, batches, records = _walked(raw)
    assert w.regular and w.stop == len(raw)
    want_batches, want_records, quarantine = _decoded(path)
    assert quarantine == []
    assert batches == want_batches
    assert records == want_records
    row = readme_table()[_rel(path)]
    assert (w.batches, w.records) == (int(row["batches"]), int(row["records"]))
    counts = Counter({TYPE_NAMES[c]: int(n) for c, n in enumerate(w.counts) if n})
    assert {k: counts.get(k, 0) for k in expected_counts(row)} == dict(expected_counts(row))
    _check_value_spans(raw, w)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A simulated data directory (the benchmarks' fleet-large scenario, small)."""
    from controller_core.logdir import discover
    from simulator.fleet import simulate_fleet

    out = tmp_path_factory.mktemp("fleet")
    simulate_fleet(out, 3000, 6, seed=1)
    return [lf for lf in discover(out) if lf.kind in ("segment", "snapshot")]


def test_walk_equals_the_decoder_on_a_simulated_log(fleet):
    assert {lf.kind for lf in fleet} == {"segment", "snapshot"}
    for lf in fleet:
        raw = lf.path.read_bytes()
        w, batches, records = _walked(raw, lf.first_offset)
        assert w.regular, W.STATUS_NAMES[w.status]
        want_batches, want_records, quarantine = _decoded(lf.path, first_offset=lf.first_offset)
        assert quarantine == [] and batches == want_batches and records == want_records
        _check_value_spans(raw, w)


# ------------------------------------------------------------------------------- decode --summary
def _summary(path: Path, fast: bool, **kw) -> dict:
    """decode --summary's figures for one file, with or without the compiled walk."""
    batches = records = 0
    types: Counter = Counter()
    errors = []
    for c in iter_chunks(str(path), str(path), fast=W.SummaryWalk() if fast else None, **kw):
        batches += c.batches
        records += c.records if not isinstance(c, DecodedChunk) else len(c)
        if isinstance(c, DecodedChunk):
            types.update(TYPE_NAMES[int(t)] for t in c.type_code)
            errors += [(q.position, q.length, q.reason, q.message) for q in c.quarantine]
        else:
            types.update({TYPE_NAMES[i]: int(n) for i, n in enumerate(c.counts) if n})
    return {"batches": batches, "records": records, "types": types, "errors": errors}


def _damage(raw: bytes, rng: random.Random) -> bytes:
    d = bytearray(raw)
    kind = rng.randrange(4)
    if kind == 0:  # flip one bit
        at = rng.randrange(len(d))
        d[at] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        d = d[:rng.randrange(len(d))]
    elif kind == 2:  # overwrite a span
        at = rng.randrange(len(d) - 64)
        n = rng.randint(1, 64)
        d[at:at + n] = rng.randbytes(n)
    else:  # insert garbage
        at = rng.randrange(len(d))
        d[at:at] = rng.randbytes(rng.randint(1, 100))
    return bytes(d)


@pytest.mark.parametrize("seed", range(24))
def test_damaged_log_gives_the_same_summary_and_quarantine(tmp_path, seed):
    """Small windows, so a damaged file mixes windows the walk takes and windows it hands over."""
    rng = random.Random(seed)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_damage(MAVILA.read_bytes(), rng))
    chunk_bytes = rng.choice([2048, 16384, 65536, 1 << 20])
    fast = _summary(path, True, chunk_bytes=chunk_bytes, first_offset=0)
    assert fast == _summary(path, False, chunk_bytes=chunk_bytes, first_offset=0)


def test_walk_takes_the_clean_windows_of_a_damaged_file(tmp_path):
    raw = bytearray(MAVILA.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(raw))
    walker = W.SummaryWalk()
    list(iter_chunks(str(path), fast=walker, chunk_bytes=16384, first_offset=0))
    assert walker.windows > 5 and walker.fallbacks == {"crc mismatch": 1}


def _one_batch_log(tmp_path, middle: bytes) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_batch(0, [("NO_OP_RECORD", 0, {})]) + middle + encode_batch(2, [("NO_OP_RECORD", 0, {})]))
    return path


def _recrc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def _irregular_batches():
    """(name, batch at offset 1, the walk's status): batches the walk must hand to the full decoder."""
    noop = bytearray(encode_batch(1, [("NO_OP_RECORD", 0, {})]))
    compressed = bytearray(noop)
    compressed[22] |= 4  # zstd
    unknown = bytearray(noop)
    unknown[unknown.index(bytes([1, 20, 0, 0]), 61) + 1] = 99  # apiKey 99
    version = bytearray(noop)
    version[version.index(bytes([1, 20, 0, 0]), 61) + 2] = 9  # NoOpRecord v9
    topic = encode_batch(1, [("TOPIC_RECORD", 0, {"name": "caf\u00e9", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"})])
    body = bytearray(encode_batch(1, [("TOPIC_RECORD", 0, {"name": "ab", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"})]))
    body[body.index(b"ab") - 1] = 100  # the name's length runs past the body
    return [("compressed", _recrc(compressed), W.COMPRESSED), ("unknown type", _recrc(unknown), W.UNKNOWN_TYPE),
            ("unknown version", _recrc(version), W.UNKNOWN_TYPE), ("non-ASCII name", topic, W.BODY),
            ("bad body", _recrc(body), W.BODY)]


@pytest.mark.parametrize("name,batch,status", _irregular_batches(), ids=lambda x: x if isinstance(x, str) else "")
def test_irregular_batch_goes_to_the_decoder_with_the_same_result(tmp_path, name, batch, status):
    path = _one_batch_log(tmp_path, batch)
    w = W.walk(path.read_bytes())
    at = len(encode_batch(0, [("NO_OP_RECORD", 0, {})]))  # the batch starts after the first one
    assert (w.status, w.irregular_at) == (status, at if status == W.COMPRESSED else at + 61)
    assert _summary(path, True, first_offset=0) == _summary(path, False, first_offset=0)


def test_decode_summary_job_prints_what_the_decoder_alone_prints(tmp_path):
    """``decode --summary`` (the job, compiled walk inside) against the same figures from the decoder
    alone, on a real folder and on a damaged file."""
    bad = tmp_path / "00000000000000000000.log"
    raw = bytearray(SMALL.read_bytes())
    raw[3000] ^= 1
    bad.write_bytes(bytes(raw))
    for target in (REALDATA / "arthurarutunyan04-2segments-mv4.0/kafka-data", bad):
        out, err = io.StringIO(), io.StringIO()
        decode.run([str(target)], summary=True, out=out, err=err)
        from controller_core.logdir import expand

        for line, lf in zip(out.getvalue().splitlines(), expand([str(target)]), strict=True):
            got = json.loads(line)
            want = _summary(lf.path, False, first_offset=lf.first_offset)
            assert (got["batches"], got["records"], got["types"]) == (want["batches"], want["records"],
                                                                       dict(sorted(want["types"].items())))
            assert [(e["position"], e["length"], e["reason"], e["message"]) for e in got["errors"]] == want["errors"]


# ------------------------------------------------------------------------------ plain Python / start-up
def test_walk_runs_as_plain_python_without_the_jit(monkeypatch):
    """NUMBA_DISABLE_JIT=1: the same functions run as Python, so the logic can be stepped through."""
    code = ("import json, sys; from controller_core.codec import logfile, walk as W; "
            "w = W.walk(open(sys.argv[1], 'rb').read(), records=True); "
            "logfile._use_compiled = lambda size: True; "  # the full decoder's pieces too
            "chunks = list(logfile.iter_chunks(sys.argv[1])); "
            "points = logfile.split_points(sys.argv[1], 1024); "  # the header chain walk, W.chain_points
            "print(json.dumps([W.HAS_SSE42, w.status, w.batches, w.records, w.counts.tolist(), "
            "w.record_rows.tolist(), [c.position.tolist() for c in chunks], points]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code, str(SMALL)], capture_output=True, text=True, env=env,
                         check=True, timeout=300)
    hw, status, batches, records, counts, rows, positions, points = json.loads(res.stdout)
    w = W.walk(SMALL.read_bytes(), records=True)
    assert hw is False  # the instruction needs the compiler; the table runs anywhere
    assert (status, batches, records, counts, rows) == (W.OK, w.batches, w.records, w.counts.tolist(),
                                                       w.record_rows.tolist())
    assert positions == [c.position.tolist() for c in iter_chunks(str(SMALL))]
    monkeypatch.setattr(logfile, "_use_compiled", lambda size: False)  # the seek-by-seek walk
    assert points == logfile.split_points(str(SMALL), 1024) and len(points) > 3


def test_cached_summary_starts_fast():
    """First output line of ``decode --summary`` on a tiny log, interpreter start included, once the
    compiled functions are cached (the first run may compile them)."""
    cmd = [sys.executable, "-c", "import sys; from jobs.cli import main; main(sys.argv[1:])", "decode", "--summary",
           str(SMALL)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(cmd, capture_output=True, check=True, env=env, cwd=ROOT, timeout=300)  # fills the cache
    best = None
    for _ in range(3):  # best of three: the machine is shared
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=ROOT, timeout=300)
        best = min(best or 1e9, time.perf_counter() - t0)
    assert json.loads(res.stdout)["records"] == 153
    # the target is 1 s (benchmarks/README.md); the bound is loose for a loaded shared box, and still
    # catches a cache that does not work (compiling takes 6-10 s here)
    assert best < 3.0, f"cached decode --summary of a tiny log took {best:.2f} s"


def _mixed_batches() -> list[bytes]:
    """Batches of the shapes a metadata log holds: heartbeats, records with bodies and tagged fields,
    several records per batch, control records."""
    topic = "AAAAAAAAAAAAAAAAAAAAAQ"
    return [
        encode_batch(0, [("NO_OP_RECORD", 0, {})]),
        encode_batch(1, [("LEADER_CHANGE", 0, {"leaderId": 1, "voters": [{"voterId": 1}],
                                                "grantingVoters": [{"voterId": 1}]})]),
        encode_batch(2, [("TOPIC_RECORD", 0, {"name": "t", "topicId": topic}),
                         ("PARTITION_RECORD", 1, {"partitionId": 0, "topicId": topic, "replicas": [1, 2],
                                                  "isr": [1, 2], "leader": 1,
                                                  "directories": [topic, topic]})],
                     timestamp_deltas=[0, 300]),
        encode_batch(4, [("PARTITION_CHANGE_RECORD", 2, {"partitionId": 0, "topicId": topic, "isr": [1],
                                                         "eligibleLeaderReplicas": [2]})]),
        encode_batch(5, [("NO_OP_RECORD", 0, {})]),
    ]


@pytest.mark.parametrize("seed", range(60))
def test_crc_valid_damage_inside_records_gives_the_same_summary(tmp_path, seed):
    """Bytes changed inside the records of a batch whose CRC is then fixed (what a buggy writer, not a
    disk, would produce): the walk's record checks, not the CRC, must hand these to the decoder."""
    rng = random.Random(seed)
    batches = [bytearray(b) for b in _mixed_batches()]
    victim = batches[rng.randrange(len(batches))]
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(61, len(victim))
        victim[at] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF, victim[at] ^ (1 << rng.randrange(8))])
    _recrc(victim)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(bytes(b) for b in batches))
    assert _summary(path, True, first_offset=0) == _summary(path, False, first_offset=0)


def _intact_run_reference(buf: bytes, pos: int, end: int) -> tuple[list[int], int]:
    """The definition, in plain Python: follow plausible headers, stop before the first wrong magic
    byte or CRC32C."""
    run = []
    while pos + 61 <= end:
        blen = struct.unpack_from(">i", buf, pos + 8)[0]
        if blen < 49 or pos + 12 + blen > end or blen > (1 << 30):
            break
        run.append(pos)
        pos += 12 + blen
    for j, p in enumerate(run):
        size = 12 + struct.unpack_from(">i", buf, p + 8)[0]
        if buf[p + 16] != 2 or crc32c(buf[p + 21:p + size]) != struct.unpack_from(">I", buf, p + 17)[0]:
            return run[:j], p
    return run, pos


@pytest.mark.parametrize("seed", range(30))
def test_intact_run_follows_its_definition_on_damaged_bytes(seed):
    """The full decoder's run of intact batches (logfile._fast_chain) is the compiled intact_run."""
    rng = random.Random(seed)
    raw = _damage(SMALL.read_bytes() + MAVILA.read_bytes()[:20000], rng)
    a = np.frombuffer(raw, np.uint8)
    starts = [0] + [h.position for h, _ in iter_batches_scalar(SMALL.read_bytes())][1:6]
    for start in starts:
        for hw in {False, W.HAS_SSE42}:
            out = np.empty(len(raw) // 61 + 1, np.int64)
            n, stop = W.intact_run(a, start, len(raw), hw, out)
            assert (out[:n].tolist(), int(stop)) == _intact_run_reference(raw, start, len(raw))


def _full_decode(path: Path, compiled: bool, monkeypatch, **kw):
    """Everything the full decoder yields, with the compiled walk forced on or off for every window."""
    from controller_core.codec import logfile

    monkeypatch.setattr(logfile, "_use_compiled", lambda file_size: compiled)
    out = []
    for c in iter_chunks(str(path), **kw):
        out.append((c.batches, c.offset.tolist(), c.position.tolist(), c.type_code.tolist(), c.version.tolist(),
                    c.timestamp.tolist(), [(q.position, q.length, q.reason, q.message) for q in c.quarantine],
                    [(g.rdef.type_name, g.version, g.rows.tolist(), {k: v.to_pylist() for k, v in g.columns.items()})
                     for g in c.groups]))
    return out


@pytest.mark.parametrize("seed", range(16))
def test_full_decoder_is_the_same_with_and_without_the_compiled_walk(tmp_path, monkeypatch, seed):
    """The full decoder uses the compiled batch run and record chains for large files (or once numba
    is loaded) and NumPy/Python otherwise: both give the same chunks, on damaged real logs and on
    CRC-valid damage inside records."""
    rng = random.Random(seed)
    path = tmp_path / "00000000000000000000.log"
    if seed % 2:
        path.write_bytes(_damage(MAVILA.read_bytes(), rng))
    else:
        batches = [bytearray(b) for b in _mixed_batches()] * 3
        batches = [bytearray(b) for b in batches]
        victim = batches[rng.randrange(len(batches))]
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(57, len(victim))
            victim[at] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF, victim[at] ^ (1 << rng.randrange(8))])
        _recrc(victim)
        path.write_bytes(b"".join(bytes(b) for b in batches))
    kw = {"chunk_bytes": rng.choice([2048, 1 << 20]), "first_offset": 0}
    assert _full_decode(path, True, monkeypatch, **kw) == _full_decode(path, False, monkeypatch, **kw)


def test_full_decoder_is_the_same_with_and_without_the_compiled_walk_on_real_and_simulated_logs(fleet, monkeypatch):
    for path in [REALDATA / "ogs59-3broker-mv3.7/kafka-1/__cluster_metadata-0/00000000000000020475-0000000026.checkpoint",
                 SMALL] + [lf.path for lf in fleet]:
        assert _full_decode(path, True, monkeypatch) == _full_decode(path, False, monkeypatch)
