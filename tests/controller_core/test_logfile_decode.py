"""The vectorized file decoder: equal to Kafka's decode on real logs, equal to the scalar reference on
encoder-built logs, and robust to damaged files (every bad span quarantined, nothing valid lost)."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from controller_core.codec.bronze import records_table
from controller_core.codec import errors as E
from controller_core.codec.batch import encode_batch, iter_batches_scalar
from controller_core.codec.logfile import iter_chunks, split_points
from controller_core.codec.message import uuid_to_str

SHARED = Path(__file__).resolve().parents[3] / "shared"
REAL = SHARED / "realdata"
EXPECTED = sorted((REAL / "expected-decode").rglob("*.jsonl.gz"))


def _decode(path, **kw):
    chunks = list(iter_chunks(str(path), **kw))
    tables = [records_table(c, "test", "f", "segment") for c in chunks if len(c)]
    table = pa.concat_tables(tables) if tables else None
    quarantine = [q for c in chunks for q in c.quarantine]
    return table, quarantine, sum(c.batches for c in chunks)


def _lines(table):
    cols = [table.column(n).to_pylist() for n in ("offset", "record_type", "record_version", "data_json")]
    return ['{"offset":%d,"type":"%s","version":%d,"data":%s}' % row for row in zip(*cols)]


def test_real_files_are_present():
    assert len(EXPECTED) == 17, f"expected 17 decoded files under {REAL}/expected-decode"


@pytest.mark.parametrize("expected", EXPECTED, ids=lambda p: str(p.relative_to(REAL / "expected-decode")))
def test_vectorized_decode_prints_exactly_what_kafka_dump_log_prints(expected):
    src = Path(str(expected).replace("/expected-decode", "").removesuffix(".jsonl.gz"))
    table, quarantine, _ = _decode(src)
    assert quarantine == []
    want = [line.rstrip("\n") for line in gzip.open(expected, "rt")]
    got = _lines(table)
    assert len(got) == len(want)
    mismatches = [(g, w) for g, w in zip(got, want) if g != w]
    assert mismatches == [], mismatches[:3]


@pytest.mark.parametrize("chunk_bytes", [4096, 100_000])
def test_small_windows_decode_the_same_records(chunk_bytes):
    src = REAL / "ogs59-3broker-mv3.7/kafka-1/__cluster_metadata-0/00000000000000000000.log"
    whole, _, batches = _decode(src)
    windowed, quarantine, wbatches = _decode(src, chunk_bytes=chunk_bytes)
    assert quarantine == []
    assert wbatches == batches == 31510
    assert windowed.equals(whole)


def test_split_points_cut_at_batch_boundaries_and_cover_the_file():
    src = REAL / "induswargods-elr-mv4.2/kafka-data/__cluster_metadata-0/00000000000000000000.log"
    points = split_points(str(src), 256 * 1024)
    assert points[0] == 0 and len(points) > 5
    size = src.stat().st_size
    parts = []
    for start, end in zip(points, points[1:] + [size]):
        table, quarantine, _ = _decode(src, start=start, end=end)
        assert quarantine == []
        parts.append(table)
    whole, _, _ = _decode(src)
    assert pa.concat_tables(parts).column("offset").to_pylist() == whole.column("offset").to_pylist()


# ------------------------------------------------------------------------ encoder-built logs
def _random_log(seed: int, batches: int = 60) -> bytes:
    """A log with every kind of batch shape: many-record batches, single heartbeats, control batches."""
    rng = random.Random(seed)
    topics = [uuid_to_str(rng.randbytes(16)) for _ in range(4)]
    dirs = [uuid_to_str(rng.randbytes(16)) for _ in range(3)]
    out = bytearray()
    offset = 0
    for b in range(batches):
        kind = rng.random()
        if kind < 0.1:
            recs = [("LEADER_CHANGE", rng.choice([0, 1]), {"leaderId": rng.randrange(3), "voters": [{"voterId": 1}],
                                                            "grantingVoters": [{"voterId": 1}]})]
        elif kind < 0.4:
            recs = [("NO_OP_RECORD", 0, {})]
        else:
            recs = []
            for _ in range(rng.randint(1, 400)):
                v = rng.choice([0, 1, 2])
                reps = rng.sample(range(1, 6), rng.randint(1, 3))
                if rng.random() < 0.5:
                    data = {"partitionId": rng.randrange(100), "topicId": rng.choice(topics), "replicas": reps,
                            "isr": reps[: rng.randint(0, len(reps))], "removingReplicas": [], "addingReplicas": [],
                            "leader": reps[0], "leaderEpoch": rng.randrange(1 << 20),
                            "partitionEpoch": rng.randrange(1 << 20), "leaderRecoveryState": rng.choice([0, 1])}
                    if v >= 1:
                        data["directories"] = [rng.choice(dirs) for _ in reps]
                    if v >= 2 and rng.random() < 0.5:
                        data["eligibleLeaderReplicas"] = reps[:1]
                        data["lastKnownElr"] = reps[-1:]
                    recs.append(("PARTITION_RECORD", v, data))
                else:
                    data = {"partitionId": rng.randrange(100), "topicId": rng.choice(topics)}
                    if rng.random() < 0.7:
                        data["isr"] = reps[: rng.randint(0, len(reps))]
                    if rng.random() < 0.5:
                        data["leader"] = rng.choice([-1] + reps)
                    if v >= 2 and rng.random() < 0.3:
                        data["eligibleLeaderReplicas"] = reps
                    recs.append(("PARTITION_CHANGE_RECORD", v, data))
        out += encode_batch(offset, recs, leader_epoch=rng.randrange(5), timestamp=1_700_000_000_000 + b,
                            timestamp_deltas=[rng.randrange(1000) for _ in recs])
        offset += len(recs)
    return bytes(out)


@pytest.mark.parametrize("seed", range(6))
def test_vectorized_decoder_equals_scalar_reference(tmp_path, seed):
    raw = _random_log(seed)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(raw)
    table, quarantine, _ = _decode(path, chunk_bytes=8192 * (seed + 1))
    assert quarantine == []
    ref = [(r.offset, r.type, r.version, r.data, r.timestamp) for _, recs in iter_batches_scalar(raw) for r in recs]
    got = list(zip(table.column("offset").to_pylist(), table.column("record_type").to_pylist(),
                   table.column("record_version").to_pylist(),
                   [json.loads(d) for d in table.column("data_json").to_pylist()],
                   [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()]))
    assert got == ref


# ------------------------------------------------------------------------------- corruption
LOG = REAL / "mavila01-3broker-mv3.9/kafka1/__cluster_metadata-0/00000000000000000000.log"


def _batch_starts(raw: bytes) -> list[int]:
    return [h.position for h, _ in iter_batches_scalar(raw)]


def _offsets(table):
    return set(table.column("offset").to_pylist()) if table is not None else set()


@pytest.fixture(scope="module")
def clean():
    raw = LOG.read_bytes()
    table, quarantine, _ = _decode(LOG)
    assert quarantine == []
    return raw, _offsets(table)


def test_flipped_byte_quarantines_only_its_batch(tmp_path, clean):
    raw, all_offsets = clean
    starts = _batch_starts(raw)
    victim = starts[100]
    damaged = bytearray(raw)
    damaged[victim + 70] ^= 0x40  # inside the first record of batch 100
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(damaged))
    table, quarantine, _ = _decode(path)
    assert [(q.reason, q.position, q.length) for q in quarantine] == [(E.CRC_MISMATCH, victim, starts[101] - victim)]
    assert f"at byte {victim}" in quarantine[0].message and str(path) in quarantine[0].message
    lost = all_offsets - _offsets(table)
    lost_batch = {r.offset for h, recs in iter_batches_scalar(raw) if h.position == victim for r in recs}
    assert lost == lost_batch


def test_damaged_batch_length_resynchronises_on_the_next_batch(tmp_path, clean):
    raw, all_offsets = clean
    starts = _batch_starts(raw)
    victim = starts[50]
    damaged = bytearray(raw)
    damaged[victim + 9] ^= 0x7F  # batchLength now points into the middle of some later batch
    path = tmp_path / "x.log"
    path.write_bytes(bytes(damaged))
    table, quarantine, _ = _decode(path)
    assert quarantine[0].position == victim and quarantine[0].reason in (E.CRC_MISMATCH, E.TRUNCATED_BATCH)
    resumed = victim + quarantine[0].length
    assert resumed in starts  # the walk picked up again exactly at a real batch
    kept = _offsets(table)
    after = {r.offset for h, recs in iter_batches_scalar(raw) if h.position >= resumed for r in recs}
    before = {r.offset for h, recs in iter_batches_scalar(raw) if h.position < victim for r in recs}
    assert before | after <= kept
    assert kept <= all_offsets


def test_truncated_tail_keeps_every_complete_batch(tmp_path, clean):
    raw, all_offsets = clean
    starts = _batch_starts(raw)
    cut = starts[-1] + 30  # the last batch loses its end
    path = tmp_path / "x.log"
    path.write_bytes(raw[:cut])
    table, quarantine, _ = _decode(path)
    assert [(q.reason, q.position, q.length) for q in quarantine] == [(E.TRUNCATED_BATCH, starts[-1], 30)]
    last = {r.offset for h, recs in iter_batches_scalar(raw) if h.position == starts[-1] for r in recs}
    assert _offsets(table) == all_offsets - last


def test_garbage_appended_is_quarantined_and_nothing_else_changes(tmp_path, clean):
    raw, all_offsets = clean
    junk = random.Random(7).randbytes(5000)
    path = tmp_path / "x.log"
    path.write_bytes(raw + junk)
    table, quarantine, _ = _decode(path)
    assert _offsets(table) == all_offsets
    assert quarantine and quarantine[0].position == len(raw)
    assert sum(q.length for q in quarantine) == len(junk)
    assert {q.reason for q in quarantine} <= {E.GARBAGE, E.BAD_BATCH_HEADER, E.TRUNCATED_BATCH, E.UNSUPPORTED_MAGIC}


def test_garbage_in_the_middle_is_skipped(tmp_path, clean):
    raw, all_offsets = clean
    starts = _batch_starts(raw)
    junk = bytes(range(256)) * 3
    path = tmp_path / "x.log"
    path.write_bytes(raw[:starts[10]] + junk + raw[starts[10]:])
    table, quarantine, _ = _decode(path, chunk_bytes=4096)
    assert _offsets(table) == all_offsets
    assert [(q.position, q.length) for q in quarantine] == [(starts[10], len(junk))]


def test_zero_length_file(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"")
    table, quarantine, _ = _decode(path)
    assert table is None
    assert [(q.reason, q.position, q.length) for q in quarantine] == [(E.EMPTY_FILE, 0, 0)]


def test_producer_state_snapshot_is_not_a_log():
    path = REAL / "ogs59-3broker-mv3.7/kafka-1/rxx-topic-1/00000000000000000002.snapshot"
    table, quarantine, _ = _decode(path)
    assert table is None
    assert [(q.reason, q.position, q.length) for q in quarantine] == [(E.NOT_A_LOG, 0, path.stat().st_size)]


def test_index_file_is_not_a_log():
    path = REAL / "mavila01-3broker-mv3.9/kafka1/__cluster_metadata-0/00000000000000000000.index"
    table, quarantine, _ = _decode(path)
    assert table is None and [q.reason for q in quarantine] == [E.NOT_A_LOG]


def _one_batch_log(tmp_path, records) -> Path:
    path = tmp_path / "x.log"
    path.write_bytes(encode_batch(0, [("NO_OP_RECORD", 0, {})]) + records + encode_batch(10, [("NO_OP_RECORD", 0, {})]))
    return path


def test_unknown_record_type_is_kept_as_unknown_record(tmp_path):
    """A CRC-valid batch holding a record of an apiKey this build does not know (a newer Kafka): that
    record is kept as UNKNOWN_RECORD with its apiKey and value bytes (README "Newer Kafka"), nothing
    is quarantined."""
    good = encode_batch(1, [("TOPIC_RECORD", 0, {"name": "a", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}),
                            ("NO_OP_RECORD", 0, {}), ("NO_OP_RECORD", 0, {})])
    # rewrite the 2nd record's apiKey (20 = NoOp) to 99 and fix the CRC
    raw = bytearray(good)
    idx = raw.index(bytes([1, 20, 0, 0]), 61 + 20)
    raw[idx + 1] = 99
    from controller_core.codec.batch import crc32c
    import struct
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    path = _one_batch_log(tmp_path, bytes(raw))
    table, quarantine, _ = _decode(path)
    assert quarantine == []
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 10]
    row = table.slice(2, 1).to_pylist()[0]
    assert (row["record_type"], row["record_type_id"], row["record_version"]) == ("UNKNOWN_RECORD", 99, 0)
    assert json.loads(row["data_json"]) == {"apiKey": 99, "value": "AA=="}  # the empty body's tag count


def test_newer_record_version_reads_with_the_newest_layout(tmp_path):
    good = encode_batch(1, [("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 21})])
    raw = bytearray(good)
    idx = raw.index(bytes([1, 12, 0]), 61)
    raw[idx + 2] = 7  # FeatureLevelRecord v7 does not exist
    from controller_core.codec.batch import crc32c
    import struct
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    path = _one_batch_log(tmp_path, bytes(raw))
    table, quarantine, _ = _decode(path)
    assert quarantine == []
    assert table.column("record_version").to_pylist() == [0, 7, 0]
    assert json.loads(table.column("data_json")[1].as_py()) == {"name": "metadata.version", "featureLevel": 21}


def test_newer_record_version_that_is_not_the_newest_layout_is_quarantined(tmp_path):
    """A newer version must read with the newest declared layout plus tagged fields; bytes that do not
    (here a FeatureLevelRecord "v7" with an extra byte before its tags) are quarantined, named."""
    good = encode_batch(1, [("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 21})])
    body = good[good.index(bytes([1, 12, 0]), 61) + 3:-1]  # the body, then the headers count
    from controller_core.codec.batch import raw_record
    raw = encode_batch(1, [raw_record(12, 7, body[:-1] + b"\x05" + body[-1:])])
    path = _one_batch_log(tmp_path, raw)
    table, quarantine, _ = _decode(path)
    assert [q.reason for q in quarantine] == [E.UNKNOWN_RECORD_VERSION]
    assert "FEATURE_LEVEL_RECORD v7 does not read with the newest known layout (v0)" in quarantine[0].message
    assert table.column("offset").to_pylist() == [0, 10]


def test_compressed_batch_is_reported_as_such(tmp_path):
    raw = bytearray(encode_batch(1, [("NO_OP_RECORD", 0, {})]))
    raw[22] |= 4  # zstd
    from controller_core.codec.batch import crc32c
    import struct
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    path = _one_batch_log(tmp_path, bytes(raw))
    table, quarantine, _ = _decode(path)
    assert [q.reason for q in quarantine] == [E.COMPRESSED_BATCH]
    assert "zstd" in quarantine[0].message
    assert table.column("offset").to_pylist() == [0, 10]


@pytest.mark.parametrize("seed", range(40))
def test_random_damage_never_loses_an_untouched_batch(tmp_path, clean, seed):
    """Overwrite a few random byte ranges: every batch whose bytes were not touched must still be
    decoded, nothing may be invented, and nothing may raise."""
    raw, _ = clean
    rng = random.Random(seed)
    damaged = bytearray(raw)
    hits = []
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(raw) - 64)
        n = rng.randint(1, 64)
        damaged[at:at + n] = rng.randbytes(n)
        hits.append((at, at + n))
    path = tmp_path / "x.log"
    path.write_bytes(bytes(damaged))
    table, quarantine, _ = _decode(path, chunk_bytes=rng.choice([2048, 65536, 1 << 20]), first_offset=0)
    untouched = set()
    for h, recs in iter_batches_scalar(raw):
        if not any(a < h.position + h.size and h.position < b for a, b in hits):
            untouched |= {r.offset for r in recs}
    kept = _offsets(table)
    assert untouched <= kept
    # a touched batch survives only if the damage left its bytes the same (random bytes can match)
    assert kept <= {r.offset for _, recs in iter_batches_scalar(raw) for r in recs}
    assert quarantine or kept == untouched
