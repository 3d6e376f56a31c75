"""Seeds and mutations for the decoder fuzz run (no coverage feedback: plain random mutation).

Seeds are runs of consecutive batches cut from the real logs of ``../shared/realdata`` (segments,
snapshots, bootstrap checkpoints).  A mutation stacks one to four edits: bit flips, random bytes, byte
insertion and deletion, truncation, edits of a batch's length, baseOffset, record count or other header
fields, duplicated / swapped / spliced batches, and "crafted" edits inside a batch followed by a fresh
CRC32C, so that the mutation reaches the record decoder instead of stopping at the CRC check.

Everything is a function of (seed corpus, input number): ``make_input(corpus, seed, i)`` always returns
the same bytes, so a run is reproducible and any input can be regenerated from its number.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

from controller_core.codec.batch import CRC_START, HEADER_SIZE, LOG_OVERHEAD, crc32c

REALDATA = Path(__file__).resolve().parent.parent.parent / "shared" / "realdata"
INTERESTING32 = [0, 1, -1, 48, 49, 60, 61, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 1 << 20, 1 << 24,
                 (1 << 30) - 1, 1 << 30, (1 << 30) + 1, 0x7FFFFFFF, -0x80000000, -2, -48]


def batch_starts(data: bytes) -> list[int]:
    """Positions of the batches of ``data`` while their headers chain (no CRC check)."""
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(data):
        blen = struct.unpack_from(">i", data, pos + 8)[0]
        if blen < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + blen > len(data):
            break
        out.append(pos)
        pos += LOG_OVERHEAD + blen
    return out


def load_corpus(root: Path = REALDATA) -> list[bytes]:
    """Every real metadata file (segments, snapshots, bootstrap.checkpoint) under ``root``."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name == "__cluster_metadata-0"
                   and (p.suffix == ".log" or p.suffix == ".checkpoint"))
    files += sorted(root.rglob("bootstrap.checkpoint"))
    return [p.read_bytes() for p in files if p.stat().st_size > 0]


_STARTS: dict[int, list[int]] = {}


def seed_slice(rng: random.Random, corpus: list[bytes]) -> bytes:
    k = rng.randrange(len(corpus))
    data = corpus[k]
    starts = _STARTS.get(id(data))
    if starts is None:
        starts = _STARTS[id(data)] = batch_starts(data)
    if len(data) < 16384 and rng.random() < 0.3:
        return data
    n = rng.choice((1, 1, 2, 3, 5, 8, 20, 60))
    i = rng.randrange(max(1, len(starts) - n + 1))
    end = starts[i + n] if i + n < len(starts) else len(data)
    return data[starts[i]:end]


def _fix_crc(buf: bytearray, p: int) -> None:
    blen = struct.unpack_from(">i", buf, p + 8)[0]
    end = p + LOG_OVERHEAD + blen
    if HEADER_SIZE - LOG_OVERHEAD <= blen and end <= len(buf):
        struct.pack_into(">I", buf, p + 17, crc32c(bytes(buf[p + CRC_START:end])))


def _pick_batch(rng, buf) -> tuple[int, int] | None:
    starts = batch_starts(bytes(buf))
    if not starts:
        return None
    i = rng.randrange(len(starts))
    p = starts[i]
    return p, p + LOG_OVERHEAD + struct.unpack_from(">i", buf, p + 8)[0]


def _varint_bytes(rng) -> bytes:
    v = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, (1 << 63) - 1, rng.getrandbits(64)])
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def mutate_once(rng: random.Random, buf: bytearray, corpus: list[bytes]) -> bytearray:
    kind = rng.randrange(16)
    n = len(buf)
    if kind == 0 and n:  # bit flip
        p = rng.randrange(n)
        buf[p] ^= 1 << rng.randrange(8)
    elif kind == 1 and n:  # random bytes
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(n)] = rng.randrange(256)
    elif kind == 2:  # insert bytes
        p = rng.randint(0, n)
        buf[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    elif kind == 3 and n:  # delete a range
        p = rng.randrange(n)
        del buf[p:p + rng.randint(1, 64)]
    elif kind == 4 and n:  # truncate
        del buf[rng.randrange(n):]
    elif kind in (5, 6):  # a batch's length (not covered by the CRC)
        b = _pick_batch(rng, buf)
        if b:
            p, end = b
            v = rng.choice(INTERESTING32 + [end - p - LOG_OVERHEAD + rng.randint(-70, 70),
                                            (end - p - LOG_OVERHEAD) ^ (1 << rng.randrange(31))])
            struct.pack_into(">i", buf, p + 8, max(-0x80000000, min(0x7FFFFFFF, v)))
    elif kind == 7:  # a batch's baseOffset (not covered by the CRC)
        b = _pick_batch(rng, buf)
        if b:
            old = struct.unpack_from(">q", buf, b[0])[0]
            new = rng.choice([old + 1, old - 1, old + rng.randint(-100, 100), 0, -1, 1 << 62, rng.getrandbits(63),
                              old ^ (1 << rng.randrange(63))])
            struct.pack_into(">q", buf, b[0], (new + (1 << 63)) % (1 << 64) - (1 << 63))  # wrapped to an int64
    elif kind in (8, 9, 10):  # crafted: a header field or record byte edited, CRC fixed
        b = _pick_batch(rng, buf)
        if b:
            p, end = b
            what = rng.randrange(6)
            if what == 0:  # recordsCount
                struct.pack_into(">i", buf, p + 57, rng.choice(INTERESTING32 + [rng.getrandbits(31)]))
            elif what == 1:  # lastOffsetDelta
                struct.pack_into(">i", buf, p + 23, rng.choice(INTERESTING32))
            elif what == 2:  # attributes
                struct.pack_into(">h", buf, p + 21, rng.choice([0, 1, 2, 3, 4, 7, 0x10, 0x20, 0x30, 0x40, -1]))
            elif what == 3:  # timestamps
                struct.pack_into(">q", buf, p + rng.choice((27, 35)), rng.choice([0, -1, 1 << 62, -(1 << 62)]))
            elif end > p + HEADER_SIZE:  # record bytes: flips, a varint, a length
                q = rng.randrange(p + HEADER_SIZE, end)
                if what == 4:
                    buf[q] ^= 1 << rng.randrange(8)
                else:
                    vb = _varint_bytes(rng)
                    buf[q:q + len(vb)] = vb
                    buf = buf[:max(q + len(vb), end)] + buf[max(q + len(vb), end):]
                    struct.pack_into(">i", buf, p + 8, max(HEADER_SIZE - LOG_OVERHEAD, end - p - LOG_OVERHEAD))
            _fix_crc(buf, p)
    elif kind == 11:  # duplicate a batch
        b = _pick_batch(rng, buf)
        if b:
            buf[b[1]:b[1]] = buf[b[0]:b[1]]
    elif kind == 12:  # swap two adjacent batches
        starts = batch_starts(bytes(buf))
        if len(starts) >= 2:
            i = rng.randrange(len(starts) - 1)
            a0, a1 = starts[i], starts[i + 1]
            a2 = a1 + LOG_OVERHEAD + struct.unpack_from(">i", buf, a1 + 8)[0]
            buf[a0:a2] = buf[a1:a2] + buf[a0:a1]
    elif kind == 13:  # splice another seed
        other = seed_slice(rng, corpus)
        p = rng.randint(0, n)
        buf[p:p] = other
    elif kind == 14:  # garbage that looks like a header (magic 2 at byte 16)
        fake = bytearray(rng.randbytes(HEADER_SIZE))
        fake[16] = 2
        struct.pack_into(">i", fake, 8, rng.choice(INTERESTING32))
        p = rng.randint(0, n)
        buf[p:p] = fake
    else:  # string bytes: a high byte / invalid UTF-8 inside a record, CRC fixed
        b = _pick_batch(rng, buf)
        if b and b[1] > b[0] + HEADER_SIZE:
            q = rng.randrange(b[0] + HEADER_SIZE, b[1])
            buf[q] = rng.choice((0x80, 0xC0, 0xFF, 0xED, 0xF5))
            _fix_crc(buf, b[0])
    return buf


def make_input(corpus: list[bytes], seed: int, i: int) -> bytes:
    rng = random.Random(seed * 1_000_003 + i)
    buf = bytearray(seed_slice(rng, corpus))
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        buf = mutate_once(rng, buf, corpus)
    return bytes(buf)


def make_json_input(seed: int, i: int) -> bytes:
    """A mutated GetReplicaLogInfo document."""
    import json

    rng = random.Random(seed * 7_000_003 + i)
    doc = {"BrokerId": rng.choice([1, 0, -1, "1", None, 2 ** 40, 1.5, True]),
           "BrokerEpoch": rng.choice([-1, 5, -2, 2 ** 70, "x", None]),
           "CollectedAt": rng.choice(["2026-01-01T00:00:00Z", "yesterday", 7, None, "2026-13-45T99:00:00Z"]),
           "CollectedAtOffset": rng.choice([None, 10, -5, "1", 2 ** 64]),
           "TopicPartitionLogInfoList": [
               {"TopicId": rng.choice(["AAAAAAAAAAAAAAAAAAAAAA", "bad", None, 5, "AAAAAAAAAAAAAAAAAAAAA="]),
                "TopicName": rng.choice(["t", None, 3]),
                "PartitionLogInfo": [
                    {k: rng.choice([0, -1, 1, 2 ** 31, -(2 ** 63) - 1, None, "0", [], {}, 1e308])
                     for k in ("Partition", "LastWrittenLeaderEpoch", "CurrentLeaderEpoch", "LogEndOffset",
                               "ErrorCode", "ErrorMessage") if rng.random() < 0.9}
                    for _ in range(rng.randint(0, 3))]}
               for _ in range(rng.randint(0, 3))]}
    data = bytearray(json.dumps(doc).encode())
    for _ in range(rng.choice((0, 0, 1, 2))):
        if data:
            k = rng.randrange(3)
            p = rng.randrange(len(data))
            if k == 0:
                data[p] = rng.randrange(256)
            elif k == 1:
                del data[p:p + rng.randint(1, 8)]
            else:
                data[p:p] = rng.choice([b"[", b"{", b'"', b"\xff", b"1e999999", b"NaN", b"[" * 5000])
    return bytes(data)
