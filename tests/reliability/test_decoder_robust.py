"""The decoder on damaged and crafted bytes (issue 13 item 4): every count and length bounded before
anything is allocated, resynchronisation after a damaged batchLength that loses only that batch,
offset checks that keep intact batches and quarantine wrong or duplicated ones, a bad string or an
offsetDelta outside its batch costing one record.  Each case runs through every decode path
(``fuzz/targets.decode_bytes``: NumPy and compiled walks, default and small windows, bronze rows, the
``--summary`` reader, the compiled walk alone, collect-log-info's segment walk)."""
from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from controller_core.codec import errors as E
from controller_core.codec import logfile
from controller_core.codec.batch import CRC_START, LOG_OVERHEAD, crc32c, encode_batch
from fuzz import targets
from fuzz.mutate import batch_starts

REAL = Path(__file__).resolve().parents[3] / "shared" / "realdata"
BIG = REAL / "induswargods-elr-mv4.2/kafka-data/__cluster_metadata-0/00000000000000000000.log"  # 3.7 MB
SMALL = REAL / "mavila01-3broker-mv3.9/kafka1/__cluster_metadata-0/00000000000000000000.log"
BIG_RECORDS, SMALL_RECORDS = 51264, 3088  # realdata/README.md


def _fix_crc(buf: bytearray, p: int = 0) -> None:
    end = p + LOG_OVERHEAD + struct.unpack_from(">i", buf, p + 8)[0]
    struct.pack_into(">I", buf, p + 17, crc32c(bytes(buf[p + CRC_START:end])))


def _decode(path: Path, compiled: bool = False, chunk_bytes: int = logfile.DEFAULT_CHUNK_BYTES,
            first_offset: int | None = 0):
    saved = logfile._use_compiled
    logfile._use_compiled = lambda size: compiled
    try:
        chunks = list(logfile.iter_chunks(str(path), "f", chunk_bytes=chunk_bytes, first_offset=first_offset))
    finally:
        logfile._use_compiled = saved
    offsets = [o for c in chunks for o in c.offset.tolist()]
    return offsets, [q for c in chunks for q in c.quarantine]


def _every_path(tmp_path, data: bytes, first_offset: int | None = 0, seconds: float = 5.0) -> dict:
    """All decode paths over ``data``: no exception, bounded time, and the same records on each."""
    t0 = time.process_time()
    found = targets.decode_bytes(data, tmp_path, first_offset)
    assert time.process_time() - t0 < seconds
    counts = {k: v for k, v in found.items() if k != "walk_regular"}
    assert len(set(counts.values())) == 1, counts
    return found


def _noop(base: int, n: int = 1) -> bytes:
    return encode_batch(base, [("NO_OP_RECORD", 0, {})] * n)


def _write(tmp_path, data: bytes) -> Path:
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(data)
    return p


# --------------------------------------------------------------------------- crafted, CRC-valid batches
def test_negative_length_and_huge_count_with_valid_crc(tmp_path):
    """A batch claiming 2^31-1 records whose first record length is negative, CRC fixed: no walk
    follows the count (it cannot fit in the batch's bytes), nothing large is allocated, the batch is
    quarantined and its neighbours decoded."""
    bad = bytearray(_noop(1, 3))
    struct.pack_into(">i", bad, 57, 0x7FFFFFFF)  # recordsCount
    bad[61] = 0x01  # first record length: zigzag(-1)
    _fix_crc(bad)
    data = _noop(0) + bytes(bad) + _noop(4)
    found = _every_path(tmp_path, data)
    assert found["numpy"] == 2
    offsets, quarantine = _decode(_write(tmp_path, data))
    assert offsets == [0, 4]
    assert [q.reason for q in quarantine] == [E.MALFORMED_RECORD]
    assert "recordsCount 2147483647 cannot fit" in quarantine[0].message


@pytest.mark.parametrize("count", [-1, -0x80000000, 4, 1000])
def test_record_count_beyond_the_batch(tmp_path, count):
    bad = bytearray(_noop(1, 3))
    struct.pack_into(">i", bad, 57, count)
    _fix_crc(bad)
    data = _noop(0) + bytes(bad) + _noop(4)
    assert _every_path(tmp_path, data)["numpy"] == 2


def test_negative_record_length_in_a_long_batch(tmp_path):
    """The former IndexError / hang of the straggler walk (logfile._straggler_starts): a record length
    that goes back inside a batch of many records, CRC fixed."""
    bad = bytearray(_noop(1, 200))
    starts = [61]
    for _ in range(150):  # the 150th record's length byte
        starts.append(starts[-1] + 1 + (bad[starts[-1]] >> 1))
    bad[starts[-1]] = 0x03  # zigzag(-2)
    _fix_crc(bad)
    data = _noop(0) + bytes(bad) + _noop(201)
    assert _every_path(tmp_path, data)["numpy"] == 2


def test_bad_utf8_costs_one_record(tmp_path):
    recs = [("TOPIC_RECORD", 0, {"name": f"topic{i}", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}) for i in range(5)]
    bad = bytearray(encode_batch(0, recs))
    at = bad.index(b"topic2")
    bad[at + 1] = 0xFF
    _fix_crc(bad)
    data = bytes(bad) + encode_batch(5, [("TOPIC_RECORD", 0, {"name": "zz", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"})])
    assert _every_path(tmp_path, data)["numpy"] == 5
    for compiled in (False, True):
        offsets, quarantine = _decode(_write(tmp_path, data), compiled)
        assert offsets == [0, 1, 3, 4, 5]
        assert [(q.reason, q.position) for q in quarantine] == [(E.MALFORMED_RECORD, 61 + 34 * 2)]
        assert "UTF-8" in quarantine[0].message


def _batch_with_offset_delta(record: int, delta: int) -> bytes:
    """Three NoOps with the offsetDelta of one record rewritten (one-byte varints), CRC fixed."""
    raw = bytearray(_noop(10, 3))
    p = 61
    for _ in range(record):
        p += 1 + (raw[p] >> 1)
    raw[p + 3] = (delta << 1) if delta >= 0 else ((-delta << 1) - 1)  # zigzag
    _fix_crc(raw)
    return bytes(raw)


@pytest.mark.parametrize("record,delta", [(0, 5), (2, 3), (1, 0), (2, -1)])
def test_offset_delta_outside_its_batch_costs_one_record(tmp_path, record, delta):
    data = _noop(0, 10) + _batch_with_offset_delta(record, delta) + _noop(13)
    assert _every_path(tmp_path, data)["numpy"] == 13
    offsets, quarantine = _decode(_write(tmp_path, data))
    assert [q.reason for q in quarantine] == [E.MALFORMED_RECORD]
    assert "offsetDelta" in quarantine[0].message
    assert offsets == list(range(10)) + [10 + i for i in range(3) if i != record] + [13]


def test_timestamp_outside_its_batch_costs_one_record(tmp_path):
    raw = bytearray(_noop(1, 3))
    p = 61 + 1 + (raw[61] >> 1)  # the second record
    raw[p + 2] = 0x02  # timestampDelta 1, maxTimestamp = baseTimestamp = 0
    _fix_crc(raw)
    data = _noop(0) + bytes(raw) + _noop(4)
    assert _every_path(tmp_path, data)["numpy"] == 4
    offsets, quarantine = _decode(_write(tmp_path, data))
    assert offsets == [0, 1, 3, 4] and "timestampDelta 1" in quarantine[0].message


# ------------------------------------------------------------------------------------- offset checks
def _real_with(edit) -> tuple[bytes, list[int], bytes]:
    raw = SMALL.read_bytes()
    starts = batch_starts(raw)
    return raw, starts, edit(bytearray(raw), starts)


def _count(raw: bytes, p: int) -> int:
    return struct.unpack_from(">i", raw, p + 57)[0]


@pytest.mark.parametrize("shift", [1, -1, 1000, 1 << 40, -(1 << 40), None])
@pytest.mark.parametrize("victim", [0, 100, 3042])
def test_wrong_base_offset_is_quarantined_intact_batches_kept(tmp_path, shift, victim):
    def edit(buf, starts):
        old = struct.unpack_from(">q", buf, starts[victim])[0]
        struct.pack_into(">q", buf, starts[victim], 0 if shift is None else old + shift)
        return bytes(buf)

    raw, starts, data = _real_with(edit)
    if victim == 3042 and shift is not None and 0 < shift < (1 << 31):
        pytest.skip("the last batch of a file jumping ahead by a possible amount: nothing after it disagrees")
    if victim == 0 and shift is None:
        pytest.skip("batch 0 already starts at offset 0")
    for first_offset in (0, None):
        for compiled, chunk in ((False, logfile.DEFAULT_CHUNK_BYTES), (True, 4096)):
            offsets, quarantine = _decode(_write(tmp_path, data), compiled, chunk, first_offset)
            assert len(offsets) == len(set(offsets)) == SMALL_RECORDS - _count(raw, starts[victim])
            assert [(q.reason, q.position) for q in quarantine] == [(E.BAD_BATCH_HEADER, starts[victim])]


def test_duplicated_batch_is_emitted_once(tmp_path):
    def edit(buf, starts):
        return bytes(buf[:starts[101]] + buf[starts[100]:starts[101]] + buf[starts[101]:])

    raw, starts, data = _real_with(edit)
    _every_path(tmp_path, data)
    for compiled in (False, True):
        offsets, quarantine = _decode(_write(tmp_path, data), compiled)
        assert len(offsets) == len(set(offsets)) == SMALL_RECORDS
        assert [(q.reason, q.position) for q in quarantine] == [(E.BAD_BATCH_HEADER, starts[101])]
        assert "duplicated" in quarantine[0].message


def test_two_adjacent_batches_shifted_alike(tmp_path):
    """Two damaged batches agreeing with each other do not outvote the log after them."""
    def edit(buf, starts):
        for k in (200, 201):
            struct.pack_into(">q", buf, starts[k], struct.unpack_from(">q", buf, starts[k])[0] + 3)
        return bytes(buf)

    raw, starts, data = _real_with(edit)
    offsets, quarantine = _decode(_write(tmp_path, data))
    assert len(offsets) == len(set(offsets)) == SMALL_RECORDS - 2
    assert [q.position for q in quarantine] == [starts[200], starts[201]]


# ------------------------------------------------------------------------------ a flipped length bit
@pytest.mark.parametrize("victim", [0, 1000, 30000, -1])
def test_flipped_batch_length_bit_loses_only_that_batch(tmp_path, victim):
    """Every bit of one batchLength of the largest real segment (3.7 MB, 51,244 batches), with the
    default window and with 256 KiB windows (the damaged length then claims more than a window, the
    case that lost 292 k of 482 k records in a 26 MB segment): exactly that batch's records are lost."""
    raw = BIG.read_bytes()
    starts = batch_starts(raw)
    p = starts[victim]
    lost = _count(raw, p)
    blen = struct.unpack_from(">I", raw, p + 8)[0]
    for bit in range(32):
        buf = bytearray(raw)
        struct.pack_into(">I", buf, p + 8, blen ^ (1 << bit))
        path = _write(tmp_path, bytes(buf))
        for compiled, chunk in ((False, 256 << 10), (True, 256 << 10), (False, logfile.DEFAULT_CHUNK_BYTES)):
            if chunk == logfile.DEFAULT_CHUNK_BYTES and bit % 4:
                continue  # one window holds the whole file: a few bits suffice
            offsets, quarantine = _decode(path, compiled, chunk)
            assert len(offsets) == len(set(offsets)) == BIG_RECORDS - lost, (bit, compiled, chunk)
            assert quarantine and quarantine[0].position == p


def test_summary_counts_equal_after_a_flipped_length(tmp_path):
    raw = bytearray(BIG.read_bytes())
    p = batch_starts(bytes(raw))[1000]
    struct.pack_into(">I", raw, p + 8, struct.unpack_from(">I", raw, p + 8)[0] ^ (1 << 20))
    found = _every_path(tmp_path, bytes(raw), seconds=60)
    assert found["summary"] == BIG_RECORDS - _count(bytes(raw), p)


@pytest.mark.parametrize("compiled", [False, True])
def test_every_other_batch_damaged_stays_linear(tmp_path, compiled):
    """25,622 CRC-damaged batches and an offset break in one window: each damaged batch costs the walk
    the batches up to the next damage, not the rest of the window (this took 195 s of CPU before)."""
    raw = bytearray(BIG.read_bytes())
    starts = batch_starts(bytes(raw))
    for k in range(0, len(starts), 2):
        raw[starts[k] + 62] ^= 0xFF
    struct.pack_into(">q", raw, starts[1], 10 ** 9)
    data = bytes(raw)
    t0 = time.process_time()
    offsets, quarantine = _decode(_write(tmp_path, data), compiled)
    assert time.process_time() - t0 < 30
    assert len(offsets) == sum(_count(data, starts[k]) for k in range(3, len(starts), 2))
    assert len(quarantine) == (len(starts) + 1) // 2 + 1
