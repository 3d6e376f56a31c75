"""Record batch v2 framing (controller_core.codec.batch) follows Kafka's on-disk format.

The test parses batches with ``struct`` and its own small varint reader, straight from the format:

    0  baseOffset int64        8  batchLength int32     12 partitionLeaderEpoch int32
    16 magic int8 (2)          17 crc uint32 = CRC32C(bytes 21..end)
    21 attributes int16 (bits 0-2 compression, bit 4 transactional, bit 5 control)
    23 lastOffsetDelta int32   27 baseTimestamp int64   35 maxTimestamp int64
    43 producerId int64        51 producerEpoch int16   53 baseSequence int32   57 recordsCount int32
    61 records: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
       keyLength varint (-1 = null), key, valueLength varint, value, headerCount varint
"""
from __future__ import annotations

import struct

import crc32c
import pytest

from controller_core.codec import errors as E
from controller_core.codec.batch import encode_batch, iter_batches_scalar, read_header, read_records, verify_crc
from controller_core.codec.errors import DecodeError

h = bytes.fromhex
HEADER = struct.Struct(">qiibIhiqqqhii")
TOPIC_S = "AAECAwQFBgcICQoLDA0ODw"
DIR1_S = "EREREREREREREREREREREQ"


# --------------------------------------------------------------------------------- reference parsing
def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def zigzag(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def parse_header(buf: bytes) -> dict:
    names = ("baseOffset", "batchLength", "partitionLeaderEpoch", "magic", "crc", "attributes", "lastOffsetDelta",
             "baseTimestamp", "maxTimestamp", "producerId", "producerEpoch", "baseSequence", "recordsCount")
    return dict(zip(names, HEADER.unpack_from(buf, 0)))


def parse_records(buf: bytes, count: int) -> list[dict]:
    pos, out = 61, []
    for _ in range(count):
        length, pos = read_zigzag(buf, pos)
        end = pos + length
        attributes = buf[pos]
        pos += 1
        ts_delta, pos = read_zigzag(buf, pos)
        off_delta, pos = read_zigzag(buf, pos)
        klen, pos = read_zigzag(buf, pos)
        key = None if klen < 0 else buf[pos:pos + klen]
        pos += max(klen, 0)
        vlen, pos = read_zigzag(buf, pos)
        value = buf[pos:pos + vlen]
        pos += vlen
        nheaders, pos = read_zigzag(buf, pos)
        assert pos == end, "record length does not match its contents"
        out.append({"attributes": attributes, "timestampDelta": ts_delta, "offsetDelta": off_delta, "key": key,
                    "value": value, "headers": nheaders})
    assert pos == len(buf), "bytes after the last record"
    return out


def frame_batch(records: list[bytes], *, attributes: int = 0, base_offset: int = 0, magic: int = 2,
                records_count: int | None = None) -> bytes:
    """An independent v2 batch writer, for hand-made batches the project's encoder would not write."""
    body = b"".join(zigzag(len(r)) + r for r in records)
    n = len(records) if records_count is None else records_count
    tail = struct.pack(">hiqqqhii", attributes, max(len(records) - 1, 0), 0, 0, -1, -1, -1, n) + body
    return struct.pack(">qiibI", base_offset, 49 + len(body), 0, magic, crc32c.crc32c(tail)) + tail


def frame_record(key: bytes | None, value: bytes, offset_delta: int = 0) -> bytes:
    k = zigzag(-1) if key is None else zigzag(len(key)) + key
    return b"\x00" + zigzag(0) + zigzag(offset_delta) + k + zigzag(len(value)) + value + zigzag(0)


def test_crc_library_is_crc32c_castagnoli():
    # the standard check value of CRC-32C (not the zlib CRC-32, whose check value is 0xCBF43926)
    assert crc32c.crc32c(b"123456789") == 0xE3069283


# ------------------------------------------------------------------------------------ header fields
FEATURE_LEVEL = ("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 19})
FEATURE_LEVEL_VALUE = h("01 0C 00") + h("11") + b"metadata.version" + h("0013 00")  # frame 1, apiKey 12, v0, body
NO_OP = ("NO_OP_RECORD", 0, {})
NO_OP_VALUE = h("01 14 00 00")                                                    # frame 1, apiKey 20, v0, body
PARTITION_CHANGE = ("PARTITION_CHANGE_RECORD", 2,
                    {"partitionId": 0, "topicId": TOPIC_S, "isr": [], "leader": -1})
PARTITION_CHANGE_VALUE = (h("01 05 02") + h("00000000") + h("000102030405060708090a0b0c0d0e0f")
                          + h("02 00 01 01 01 04 FFFFFFFF"))


def test_metadata_batch_header_fields_follow_the_v2_format():
    buf = encode_batch(1000, [FEATURE_LEVEL, NO_OP, PARTITION_CHANGE], leader_epoch=7,
                       timestamp=1_700_000_000_000, timestamp_deltas=[0, 5, 3])
    hd = parse_header(buf)
    assert hd["baseOffset"] == 1000
    assert hd["batchLength"] == len(buf) - 12  # everything after baseOffset and batchLength
    assert hd["partitionLeaderEpoch"] == 7
    assert hd["magic"] == 2
    assert hd["crc"] == crc32c.crc32c(buf[21:])
    assert hd["attributes"] == 0  # uncompressed, not transactional, not control
    assert hd["lastOffsetDelta"] == 2
    assert hd["baseTimestamp"] == 1_700_000_000_000
    assert hd["maxTimestamp"] == 1_700_000_000_005
    assert (hd["producerId"], hd["producerEpoch"], hd["baseSequence"]) == (-1, -1, -1)
    assert hd["recordsCount"] == 3


def test_metadata_records_have_null_keys_and_framed_values():
    buf = encode_batch(1000, [FEATURE_LEVEL, NO_OP, PARTITION_CHANGE], timestamp_deltas=[0, 5, 3])
    recs = parse_records(buf, 3)
    assert [r["offsetDelta"] for r in recs] == [0, 1, 2]
    assert [r["timestampDelta"] for r in recs] == [0, 5, 3]
    assert all(r["attributes"] == 0 and r["headers"] == 0 and r["key"] is None for r in recs)
    assert [r["value"].hex(" ") for r in recs] == [FEATURE_LEVEL_VALUE.hex(" "), NO_OP_VALUE.hex(" "),
                                                    PARTITION_CHANGE_VALUE.hex(" ")]


def test_control_batch_sets_the_control_bit_and_keys_records_by_control_type():
    header = ("SNAPSHOT_HEADER", 0, {"version": 0, "lastContainedLogTimestamp": 1758545662354})
    buf = encode_batch(0, [header], leader_epoch=26, timestamp=1758545662354)
    hd = parse_header(buf)
    assert hd["attributes"] == 0x20
    assert hd["crc"] == crc32c.crc32c(buf[21:])
    assert (hd["lastOffsetDelta"], hd["recordsCount"], hd["producerId"]) == (0, 1, -1)
    (rec,) = parse_records(buf, 1)
    assert rec["key"] == h("0000 0003")  # key version 0, ControlRecordType SNAPSHOT_HEADER = 3
    assert rec["value"] == h("0000") + struct.pack(">q", 1758545662354) + h("00")


# ---------------------------------------------------------------------------------- round trips
CONTROL_RECORDS = [
    pytest.param("LEADER_CHANGE", 0, 2,
                 {"version": 0, "leaderId": 3, "voters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
                  "grantingVoters": [{"voterId": 1}, {"voterId": 3}]}, id="LEADER_CHANGE_v0"),
    pytest.param("LEADER_CHANGE", 1, 2,
                 {"version": 1, "leaderId": 1, "voters": [{"voterId": 1, "voterDirectoryId": DIR1_S}],
                  "grantingVoters": [{"voterId": 1, "voterDirectoryId": DIR1_S}]}, id="LEADER_CHANGE_v1"),
    pytest.param("SNAPSHOT_HEADER", 0, 3, {"version": 0, "lastContainedLogTimestamp": 1775491329234},
                 id="SNAPSHOT_HEADER"),
    pytest.param("SNAPSHOT_FOOTER", 0, 4, {"version": 0}, id="SNAPSHOT_FOOTER"),
    pytest.param("KRAFT_VERSION", 0, 5, {"version": 0, "kRaftVersion": 1}, id="KRAFT_VERSION"),
    pytest.param("KRAFT_VOTERS", 0, 6,
                 {"version": 0, "voters": [
                     {"voterId": 1, "voterDirectoryId": DIR1_S,
                      "endpoints": [{"name": "CONTROLLER", "host": "kafka1", "port": 9093}],
                      "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}]},
                 id="KRAFT_VOTERS"),
]


@pytest.mark.parametrize("type_name, version, control_type, data", CONTROL_RECORDS)
def test_control_record_round_trips_through_a_batch(type_name, version, control_type, data, assert_same_json):
    buf = encode_batch(42, [(type_name, version, data)], leader_epoch=3, timestamp=1000)
    (rec,) = parse_records(buf, 1)
    assert rec["key"] == struct.pack(">hh", 0, control_type)
    assert struct.unpack_from(">h", rec["value"])[0] == version  # the value starts with its own Version
    ((hdr, records),) = list(iter_batches_scalar(buf))
    assert hdr.is_control and hdr.base_offset == 42 and hdr.leader_epoch == 3
    (r,) = records
    assert (r.offset, r.timestamp, r.type, r.version) == (42, 1000, type_name, version)
    assert_same_json(r.data, data)


def test_metadata_records_round_trip_through_a_batch_with_offsets_and_timestamps(assert_same_json):
    buf = encode_batch(500, [FEATURE_LEVEL, NO_OP, PARTITION_CHANGE], timestamp=10_000, timestamp_deltas=[0, 7, 2])
    ((hdr, records),) = list(iter_batches_scalar(buf))
    assert not hdr.is_control
    assert [(r.offset, r.timestamp, r.type, r.version) for r in records] == [
        (500, 10_000, "FEATURE_LEVEL_RECORD", 0), (501, 10_007, "NO_OP_RECORD", 0),
        (502, 10_002, "PARTITION_CHANGE_RECORD", 2)]
    for r, (_, _, data) in zip(records, [FEATURE_LEVEL, NO_OP, PARTITION_CHANGE]):
        assert_same_json(r.data, data)


def test_consecutive_batches_are_read_in_order():
    buf = (encode_batch(0, [("SNAPSHOT_HEADER", 0, {"version": 0, "lastContainedLogTimestamp": 0})])
           + encode_batch(1, [FEATURE_LEVEL, NO_OP])
           + encode_batch(3, [("SNAPSHOT_FOOTER", 0, {"version": 0})]))
    got = [(r.offset, r.type) for _, recs in iter_batches_scalar(buf) for r in recs]
    assert got == [(0, "SNAPSHOT_HEADER"), (1, "FEATURE_LEVEL_RECORD"), (2, "NO_OP_RECORD"), (3, "SNAPSHOT_FOOTER")]


@pytest.mark.parametrize("records", [
    pytest.param([FEATURE_LEVEL, ("SNAPSHOT_FOOTER", 0, {"version": 0})], id="metadata_then_control"),
    pytest.param([("LEADER_CHANGE", 0, {"version": 0, "leaderId": 1, "voters": [], "grantingVoters": []}), NO_OP],
                 id="control_then_metadata"),
])
def test_control_and_metadata_records_cannot_share_a_batch(records):
    with pytest.raises(ValueError):
        encode_batch(0, records)


def test_a_batch_holds_at_least_one_record():
    with pytest.raises(ValueError):
        encode_batch(0, [])


# ---------------------------------------------------------------------------------------------- CRC
def test_flipping_any_byte_covered_by_the_crc_is_a_crc_mismatch():
    buf = encode_batch(7, [FEATURE_LEVEL, PARTITION_CHANGE], leader_epoch=2, timestamp=123)
    verify_crc(buf, read_header(buf, 0, len(buf)))
    for pos in range(17, len(buf)):  # the stored CRC itself (17..20) and everything it covers (21..end)
        for mask in (0x01, 0x80):
            bad = bytearray(buf)
            bad[pos] ^= mask
            with pytest.raises(DecodeError) as exc:
                verify_crc(bad, read_header(bad, 0, len(bad)))
            assert exc.value.reason == E.CRC_MISMATCH, f"byte {pos}"


def test_partition_leader_epoch_is_not_covered_by_the_crc():
    buf = bytearray(encode_batch(7, [NO_OP], leader_epoch=2))
    buf[12:16] = struct.pack(">i", 99)
    verify_crc(buf, read_header(buf, 0, len(buf)))  # must not raise


def test_crc_mismatch_stops_the_scalar_reader():
    bad = bytearray(encode_batch(0, [NO_OP]))
    bad[-1] ^= 0xFF
    with pytest.raises(DecodeError) as exc:
        list(iter_batches_scalar(bad))
    assert exc.value.reason == E.CRC_MISMATCH


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batch_is_refused(codec):
    buf = bytearray(encode_batch(0, [NO_OP, NO_OP]))
    struct.pack_into(">h", buf, 21, codec)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))  # a valid CRC, so compression is the fault
    hdr = read_header(buf, 0, len(buf))
    verify_crc(buf, hdr)
    with pytest.raises(DecodeError) as exc:
        read_records(buf, hdr)
    assert exc.value.reason == E.COMPRESSED_BATCH
    with pytest.raises(DecodeError) as exc:
        list(iter_batches_scalar(buf))
    assert exc.value.reason == E.COMPRESSED_BATCH


# ----------------------------------------------------------------------------------- header errors
def test_independent_batch_writer_agrees_with_encode_batch():
    # pins frame_batch/frame_record (used below for batches encode_batch cannot make) to the real format
    assert frame_batch([frame_record(None, NO_OP_VALUE)]) == encode_batch(0, [NO_OP], leader_epoch=0)


@pytest.mark.parametrize("buf, reason", [
    pytest.param(encode_batch(0, [NO_OP])[:60], E.TRUNCATED_BATCH, id="shorter_than_a_header"),
    pytest.param(encode_batch(0, [NO_OP])[:-1], E.TRUNCATED_BATCH, id="shorter_than_batch_length"),
    pytest.param(frame_batch([frame_record(None, NO_OP_VALUE)], magic=1), E.UNSUPPORTED_MAGIC, id="magic_1"),
    pytest.param(encode_batch(0, [NO_OP])[:8] + struct.pack(">i", 48) + encode_batch(0, [NO_OP])[12:],
                 E.BAD_BATCH_HEADER, id="batch_length_below_header_size"),
])
def test_bad_batch_header_is_reported(buf, reason):
    with pytest.raises(DecodeError) as exc:
        read_header(buf, 0, len(buf))
    assert exc.value.reason == reason


@pytest.mark.parametrize("records, attributes, want", [
    # README "Newer Kafka": an undeclared type is kept with its number and value bytes, never an error
    pytest.param([frame_record(None, h("01 06 00 00"))], 0, ("UNKNOWN_RECORD", 0, {"apiKey": 6, "value": "AA=="}),
                 id="api_key_6_retired"),
    pytest.param([frame_record(None, h("01 63 00 00"))], 0, ("UNKNOWN_RECORD", 0, {"apiKey": 99, "value": "AA=="}),
                 id="api_key_99"),
    pytest.param([frame_record(h("0000 0007"), h("0000 00"))], 0x20,
                 ("UNKNOWN_RECORD", 0, {"controlType": 7, "value": "AAAA"}), id="control_type_7"),
    # a newer version that only adds tagged fields reads with the newest layout
    pytest.param([frame_record(h("0000 0004"), h("0001 00"))], 0x20, ("SNAPSHOT_FOOTER", 1, {"version": 1}),
                 id="SnapshotFooter_v1"),
])
def test_record_of_a_newer_kafka_is_kept(records, attributes, want):
    buf = frame_batch(records, attributes=attributes)
    hdr = read_header(buf, 0, len(buf))
    verify_crc(buf, hdr)
    [rec] = read_records(buf, hdr)
    assert (rec.type, rec.version, rec.data) == want


@pytest.mark.parametrize("records, attributes, reason", [
    # a version above the newest declared whose bytes do not read with the newest layout (not only new tags)
    pytest.param([frame_record(None, h("01 03 03") + bytes(40))], 0, E.UNKNOWN_RECORD_VERSION,
                 id="PartitionRecord_v3_not_the_v2_layout"),
    pytest.param([frame_record(None, h("02 14 00 00"))], 0, E.MALFORMED_RECORD, id="frame_version_2"),
    pytest.param([frame_record(None, h("01 14 00 00 00"))], 0, E.TRAILING_BYTES, id="NoOp_with_extra_byte"),
    pytest.param([frame_record(None, h("0000 00"))], 0x20, E.MALFORMED_RECORD, id="control_record_without_key"),
])
def test_bad_record_in_a_valid_batch_is_reported(records, attributes, reason):
    buf = frame_batch(records, attributes=attributes)
    hdr = read_header(buf, 0, len(buf))
    verify_crc(buf, hdr)
    with pytest.raises(DecodeError) as exc:
        read_records(buf, hdr)
    assert exc.value.reason == reason


@pytest.mark.parametrize("records, count", [
    pytest.param([frame_record(None, NO_OP_VALUE)] * 2, 1, id="fewer_records_counted_than_present"),
    pytest.param([frame_record(None, NO_OP_VALUE)], 2, id="more_records_counted_than_present"),
])
def test_records_count_must_match_the_records_in_the_batch(records, count):
    buf = frame_batch(records, records_count=count)
    hdr = read_header(buf, 0, len(buf))
    with pytest.raises(DecodeError) as exc:
        read_records(buf, hdr)
    assert exc.value.reason in (E.MALFORMED_RECORD, E.BAD_VARINT)


def _record(klen: int, vlen: int, value: bytes, nheaders: int = 0) -> bytes:
    return b"\x00" + zigzag(0) + zigzag(0) + zigzag(klen) + zigzag(vlen) + value + zigzag(nheaders)


@pytest.mark.parametrize("record", [
    pytest.param(_record(-1, 10, NO_OP_VALUE), id="value_length_past_the_record"),
    pytest.param(_record(50, 4, NO_OP_VALUE), id="key_length_past_the_record"),
])
def test_length_field_overrunning_its_record_is_malformed_record(record):
    buf = frame_batch([record])
    hdr = read_header(buf, 0, len(buf))
    with pytest.raises(DecodeError) as exc:
        read_records(buf, hdr)
    assert exc.value.reason == E.MALFORMED_RECORD


def test_value_length_short_of_its_record_is_malformed_record():
    buf = frame_batch([_record(-1, 3, NO_OP_VALUE)])  # value ends one byte early: framing does not add up
    hdr = read_header(buf, 0, len(buf))
    with pytest.raises(DecodeError) as exc:
        read_records(buf, hdr)
    assert exc.value.reason == E.MALFORMED_RECORD
