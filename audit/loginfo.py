"""Per-replica log information, the offline counterpart of KIP-966's GetReplicaLogInfo.

KIP-966 has the controller ask each replica of a leaderless partition for four numbers before an
unclean recovery: the broker epoch, the partition leader epoch the replica knows, the last leader epoch
written to its log and its log end offset.  Brokers never shipped that RPC; kraft-audit reads the same
numbers off a broker's data directory (often copied from a dead machine) and writes them in the RPC's
response shape, so a file produced here, by a simulator or by a future Kafka can all feed
``audit.recovery``.

What is read, per partition folder ``<topic>-<partition>`` of a data directory:

* ``partition.metadata`` (``version: 0`` / ``topic_id: <base64 uuid>``): the topic id.
* ``leader-epoch-checkpoint`` (line 1 version ``0``, line 2 entry count, then ``epoch startOffset``
  lines): LastWrittenLeaderEpoch is the epoch of its last entry, exactly as the file holds it.
* the last segment ``<20-digit base offset>.log``: the batch headers are walked (CRC checked, as Kafka's
  own log recovery does) and LogEndOffset is the last valid batch's ``baseOffset + lastOffsetDelta + 1``;
  an empty segment gives its base offset.

CurrentLeaderEpoch is the checkpoint's last epoch as well.  The broker's *metadata cache* epoch (what
the RPC would report) is not stored in a partition folder; the leader-epoch cache is the broker's own
durable record of the newest epoch it has taken part in, whereas the last batch's partitionLeaderEpoch
lags behind whenever an epoch began without new data (a follower made leader writes an epoch entry
before any batch).  It is a lower bound of the metadata epoch: a leaderless partition's epoch is
always higher (leader -1 bumps it), which ``audit.recovery`` accounts for.

Error codes (Kafka's numbering), set on the entry while every field that could still be read is kept:

* ``KAFKA_STORAGE_ERROR`` (56): a file cannot be read (permissions, I/O), or the folder has no segment.
* ``CORRUPT_MESSAGE`` (2): a file is readable but does not follow its format (garbled
  ``partition.metadata``, checkpoint with a bad version / count / line, a segment whose bytes are not a
  valid batch before its end other than a torn tail).
* ``UNKNOWN_SERVER_ERROR`` (-1): a folder name without ``-<partition>``; anything unexpected.

A torn *tail* (the last batch cut short, the normal result of a crash) is not an error: Kafka's log
recovery truncates it too, so the last complete batch is what the broker would report.  A declared
length is a torn tail only when it is possible (at most ``MAX_BATCH_BYTES``, 1 GiB) and no batch whose
CRC verifies starts after it: a damaged length (a header claiming 2 GiB) hides the batches behind it
and is ``CORRUPT_MESSAGE``.
"""
from __future__ import annotations

import base64
import json
import re
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from controller_core.codec.batch import CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD, crc32c
from controller_core.codec.logfile import MAX_BATCH_BYTES  # larger declared lengths are damage, not batches

NONE = 0
UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
KAFKA_STORAGE_ERROR = 56

METADATA_LOG_DIR = "__cluster_metadata-0"
PARTITION_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# Folders Kafka keeps beside live replicas that are not the live replica: a replica queued for deletion,
# the destination of an intra-broker move, a stray replica (``<topic>-<p>.<uuid>-delete`` etc.).
NOT_LIVE_DIR_RE = re.compile(r"^.+-\d+\.[0-9a-f]{32}-(delete|future|stray)$")
SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_OLD_HEADER = struct.Struct(">qi")  # offset, size of a magic v0/v1 message set entry
_MAGIC_AT = 16


# --------------------------------------------------------------------------------------------------
# Reading one partition folder


@dataclass
class PartitionLogInfo:
    topic: str
    partition: int
    topic_id: str | None = None
    last_written_leader_epoch: int = -1
    current_leader_epoch: int = -1
    log_end_offset: int = -1
    errors: list[tuple[int, str]] = field(default_factory=list)

    def error(self, code: int, message: str) -> None:
        self.errors.append((code, message))

    @property
    def error_code(self) -> int:
        return self.errors[0][0] if self.errors else NONE

    @property
    def error_message(self) -> str | None:
        return "; ".join(m for _, m in self.errors) if self.errors else None

    def to_json(self) -> dict:
        return {"Partition": self.partition, "LastWrittenLeaderEpoch": self.last_written_leader_epoch,
                "CurrentLeaderEpoch": self.current_leader_epoch, "LogEndOffset": self.log_end_offset,
                "ErrorCode": self.error_code, "ErrorMessage": self.error_message}


def uuid_is_valid(text) -> bool:
    """A Kafka topic id as printed: 22 characters of URL-safe base64 without padding, 16 bytes."""
    if not isinstance(text, str) or len(text) != 22 or not re.fullmatch(r"[A-Za-z0-9_-]{22}", text):
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except ValueError:
        return False


def read_partition_metadata(path: Path) -> str:
    """The topic id of a ``partition.metadata`` file; ValueError names what is wrong."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fields = {}
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"{path}: line {no} is not 'key: value': {line[:60]!r}")
        fields[key.strip()] = value.strip()
    if fields.get("version") != "0":
        raise ValueError(f"{path}: version is {fields.get('version')!r}, expected '0'")
    tid = fields.get("topic_id")
    if not uuid_is_valid(tid):
        raise ValueError(f"{path}: topic_id {tid!r} is not a base64 topic id")
    return tid


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a ``leader-epoch-checkpoint``; ValueError names file and line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        raise ValueError(f"{path}: {len(lines)} line(s), a checkpoint has at least a version and a count")
    if lines[0].strip() != "0":
        raise ValueError(f"{path}: line 1: version {lines[0].strip()[:20]!r}, expected 0")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise ValueError(f"{path}: line 2: entry count {lines[1].strip()[:20]!r} is not an integer") from None
    body = [ln for ln in lines[2:] if ln.strip()]
    if count < 0 or count != len(body):
        raise ValueError(f"{path}: line 2: entry count {count} but {len(body)} entry line(s) follow")
    entries = []
    for no, line in enumerate(lines[2:], 3):
        if not line.strip():
            continue
        parts = line.split()
        try:
            epoch, start = (int(x) for x in parts) if len(parts) == 2 else (None, None)
        except ValueError:
            epoch = None
        if epoch is None:
            raise ValueError(f"{path}: line {no}: {line[:60]!r} is not 'epoch startOffset'")
        if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
            raise ValueError(f"{path}: line {no}: entry ({epoch}, {start}) does not follow "
                             f"({entries[-1][0]}, {entries[-1][1]}) (epochs must increase, offsets not decrease)")
        entries.append((epoch, start))
    return entries


@dataclass
class SegmentEnd:
    log_end_offset: int
    batches: int
    stop_position: int | None = None  # where the walk stopped before the end of the file
    stop_reason: str | None = None
    torn_tail: bool = False  # stopped on a batch cut short by the end of the file (not an error)


def segment_log_end_offset(data: bytes, base_offset: int) -> SegmentEnd:
    """Walk the batch headers of one segment's bytes: the offset after the last valid batch.

    A v2 batch is valid when its header is whole, its magic is 2, its length fits the file, its CRC32C
    verifies and its offsets do not go back.  Magic 0/1 message-set entries (logs written before Kafka
    0.11) are stepped over by their ``offset``/``size`` prefix; their offset is the entry's last offset.
    """
    pos, end, next_offset, n = 0, len(data), base_offset, 0

    def stop(reason: str, torn: bool = False) -> SegmentEnd:
        return SegmentEnd(next_offset, n, pos, reason, torn)

    while pos < end:
        if end - pos < LOG_OVERHEAD + 5:
            return stop(f"{end - pos} trailing byte(s), too few for a batch", torn=True)
        magic = data[pos + _MAGIC_AT]
        if magic in (0, 1):
            offset, size = _OLD_HEADER.unpack_from(data, pos)
            if size < 14 or pos + LOG_OVERHEAD + size > end:
                return stop(f"magic {magic} entry declares {size} bytes, {end - pos - LOG_OVERHEAD} remain",
                            torn=14 <= size <= MAX_BATCH_BYTES and _no_batch_after(data, pos + 1))
            if offset < next_offset:
                return stop(f"offset {offset} goes back (expected >= {next_offset})")
            next_offset, n, pos = offset + 1, n + 1, pos + LOG_OVERHEAD + size
            continue
        if magic != 2:
            return stop(f"magic byte {magic} (expected 2)")
        if end - pos < HEADER_SIZE:
            return stop(f"{end - pos} bytes left, a batch header needs {HEADER_SIZE}", torn=True)
        (bo, length, _ple, _magic, crc, _attr, last_delta, *_rest) = HEADER.unpack_from(data, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            return stop(f"batchLength {length} is smaller than a batch header")
        if length > MAX_BATCH_BYTES:
            return stop(f"batchLength {length} is larger than any batch ({MAX_BATCH_BYTES} bytes at most)")
        if pos + LOG_OVERHEAD + length > end:
            # a torn tail only if nothing after it verifies: a damaged length hides the batches behind it
            torn = _no_batch_after(data, pos + 1)
            return stop(f"batch declares {LOG_OVERHEAD + length} bytes, {end - pos} remain"
                        + ("" if torn else "; an intact batch follows inside that span (the length is damaged)"),
                        torn=torn)
        if crc32c(memoryview(data)[pos + CRC_START:pos + LOG_OVERHEAD + length]) != crc:
            return stop("CRC32C mismatch")
        if bo < next_offset or last_delta < 0:
            return stop(f"baseOffset {bo} / lastOffsetDelta {last_delta} go back (expected >= {next_offset})")
        next_offset, n, pos = bo + last_delta + 1, n + 1, pos + LOG_OVERHEAD + length
    return SegmentEnd(next_offset, n)


def _no_batch_after(data: bytes, start: int) -> bool:
    """No v2 batch whose header is sane and whose CRC32C verifies starts at or after ``start``."""
    p = start
    end = len(data)
    while True:
        p = data.find(b"\x02", p + _MAGIC_AT) - _MAGIC_AT  # candidates: a magic byte 2 at offset 16
        if p < start or p + HEADER_SIZE > end:
            return True
        length = struct.unpack_from(">i", data, p + 8)[0]
        if HEADER_SIZE - LOG_OVERHEAD <= length <= MAX_BATCH_BYTES and p + LOG_OVERHEAD + length <= end:
            stored = struct.unpack_from(">I", data, p + 17)[0]
            if crc32c(memoryview(data)[p + CRC_START:p + LOG_OVERHEAD + length]) == stored:
                return False
        p += 1


def read_partition_dir(path: Path) -> PartitionLogInfo | None:
    """The log info of one replica folder; None for folders that are not live replicas."""
    name = path.name
    if name == METADATA_LOG_DIR or NOT_LIVE_DIR_RE.match(name):
        return None
    m = PARTITION_DIR_RE.match(name)
    if not m:
        info = PartitionLogInfo(name, -1)
        info.error(UNKNOWN_SERVER_ERROR, f"{path}: folder name is not '<topic>-<partition>'")
        return info
    info = PartitionLogInfo(m["topic"], int(m["partition"]))
    try:
        _read_topic_id(path, info)
        _read_epochs(path, info)
        _read_log_end(path, info)
    except Exception as exc:  # never crash on one folder: the rest of the directory still counts
        info.error(UNKNOWN_SERVER_ERROR, f"{path}: {type(exc).__name__}: {exc}")
    return info


def _read_topic_id(path: Path, info: PartitionLogInfo) -> None:
    f = path / "partition.metadata"
    try:
        info.topic_id = read_partition_metadata(f)
    except FileNotFoundError:
        info.error(KAFKA_STORAGE_ERROR, f"{f}: missing (the topic id is unknown)")
    except UnicodeDecodeError as exc:
        info.error(CORRUPT_MESSAGE, f"{f}: not text (byte {exc.start})")
    except ValueError as exc:
        info.error(CORRUPT_MESSAGE, str(exc))
    except OSError as exc:
        info.error(KAFKA_STORAGE_ERROR, f"{f}: {exc.strerror or exc}")


def _read_epochs(path: Path, info: PartitionLogInfo) -> None:
    f = path / "leader-epoch-checkpoint"
    try:
        entries = read_leader_epoch_checkpoint(f)
    except FileNotFoundError:
        return  # Kafka starts such a replica with an empty epoch cache: epochs unknown, not an error
    except UnicodeDecodeError as exc:
        info.error(CORRUPT_MESSAGE, f"{f}: not text (byte {exc.start})")
        return
    except ValueError as exc:
        info.error(CORRUPT_MESSAGE, str(exc))
        return
    except OSError as exc:
        info.error(KAFKA_STORAGE_ERROR, f"{f}: {exc.strerror or exc}")
        return
    if entries:
        info.last_written_leader_epoch = info.current_leader_epoch = entries[-1][0]


def _read_log_end(path: Path, info: PartitionLogInfo) -> None:
    try:
        segments = sorted((int(m.group(1)), p) for p in path.iterdir()
                          if (m := SEGMENT_RE.match(p.name)) and p.is_file())
    except OSError as exc:
        info.error(KAFKA_STORAGE_ERROR, f"{path}: cannot list the folder: {exc.strerror or exc}")
        return
    if not segments:
        info.error(KAFKA_STORAGE_ERROR, f"{path}: no log segment (<20-digit offset>.log)")
        return
    base, seg = segments[-1]
    try:
        data = seg.read_bytes()
    except OSError as exc:
        info.error(KAFKA_STORAGE_ERROR, f"{seg}: {exc.strerror or exc}")
        return
    walked = segment_log_end_offset(data, base)
    info.log_end_offset = walked.log_end_offset
    if walked.stop_position is not None and not walked.torn_tail:
        info.error(CORRUPT_MESSAGE, f"{seg}: byte {walked.stop_position}: {walked.stop_reason}; "
                                    f"log end offset taken after the last valid batch ({walked.batches} read)")


# --------------------------------------------------------------------------------------------------
# A whole data directory, as a GetReplicaLogInfo response


def collect(data_dirs, broker_id: int, broker_epoch: int = -1, collected_at: str | None = None,
            collected_at_offset: int | None = None) -> dict:
    """The GetReplicaLogInfo-shaped document for every partition folder of ``data_dirs`` (one path or a
    list: Kafka's ``log.dirs``).  Topics sorted by id (unknown ids last, by name), partitions by number."""
    if isinstance(data_dirs, (str, Path)):
        data_dirs = [data_dirs]
    infos = []
    for d in data_dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"{d}: not a directory")
        for p in sorted(d.iterdir()):
            if p.is_dir() and (info := read_partition_dir(p)) is not None:
                infos.append(info)
    groups: dict[tuple, list[PartitionLogInfo]] = {}
    for info in infos:
        key = (0, info.topic_id, "") if info.topic_id else (1, "", info.topic)
        groups.setdefault(key, []).append(info)
    topics = []
    for key in sorted(groups):
        parts = sorted(groups[key], key=lambda i: (i.partition, i.topic))
        entry = {"TopicId": key[1] or None}
        if not key[1]:
            entry["TopicName"] = key[2]
        entry["PartitionLogInfo"] = [i.to_json() for i in parts]
        topics.append(entry)
    return {"BrokerId": broker_id, "BrokerEpoch": broker_epoch,
            "CollectedAt": collected_at or iso_utc(datetime.now(timezone.utc)),
            "CollectedAtOffset": collected_at_offset, "TopicPartitionLogInfoList": topics}


def iso_utc(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """ISO 8601 → aware UTC datetime (no offset = UTC).  ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a string")
    t = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


# --------------------------------------------------------------------------------------------------
# Reading such documents back as flat, validated rows

LOG_INFO_SCHEMA = pa.schema([
    pa.field("broker_id", pa.int32(), nullable=False),
    pa.field("broker_epoch", pa.int64(), nullable=False),
    pa.field("collected_at", pa.timestamp("ms", tz="UTC")),
    pa.field("collected_at_offset", pa.int64()),
    pa.field("topic_id", pa.string()),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("last_written_leader_epoch", pa.int32(), nullable=False),
    pa.field("current_leader_epoch", pa.int32(), nullable=False),
    pa.field("log_end_offset", pa.int64(), nullable=False),
    pa.field("error_code", pa.int16(), nullable=False),
    pa.field("error_message", pa.string()),
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("topic_name", pa.string()),  # only for entries whose topic id is unknown
])

LOG_INFO_QUARANTINE_SCHEMA = pa.schema([
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("json_path", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
])

_I16, _I32, _I64 = (-(1 << 15), (1 << 15) - 1), (-(1 << 31), (1 << 31) - 1), (-(1 << 63), (1 << 63) - 1)


def _int(value, bounds, low=None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
            and (low is None or value >= low))


class _Bad(Exception):
    pass


def read_log_info(paths) -> tuple[pa.Table, pa.Table]:
    """Rows (LOG_INFO_SCHEMA) and quarantine rows (LOG_INFO_QUARANTINE_SCHEMA) of one or more
    GetReplicaLogInfo-shaped JSON files.  Never raises on bad input: an unreadable file, or one whose
    BrokerId / BrokerEpoch / list is unusable, becomes one quarantine row; a bad topic or partition entry
    becomes a quarantine row naming its JSON path, and the file's other entries are kept."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows, bad = [], []
    for path in paths:
        _read_one(str(path), rows, bad)
    return (pa.Table.from_pylist(rows, schema=LOG_INFO_SCHEMA),
            pa.Table.from_pylist(bad, schema=LOG_INFO_QUARANTINE_SCHEMA))


def _read_one(src: str, rows: list, bad: list) -> None:
    def quarantine(json_path: str, why: str) -> None:
        bad.append({"source_file": src, "json_path": json_path, "reason": f"{src}: {json_path}: {why}"})

    try:
        doc = json.loads(Path(src).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        quarantine("$", f"not a readable JSON file ({exc})")
        return
    except RecursionError:  # arrays or objects nested deeper than the parser goes: no log info document
        quarantine("$", "not a readable JSON file (nested too deeply)")
        return
    if not isinstance(doc, dict):
        quarantine("$", f"top level is {type(doc).__name__}, expected an object")
        return
    broker_id, epoch = doc.get("BrokerId"), doc.get("BrokerEpoch", -1)
    if not _int(broker_id, _I32, 0):
        quarantine("$.BrokerId", f"{broker_id!r} is not a broker id; the file's entries cannot be attributed")
        return
    if not _int(epoch, _I64, -1):
        quarantine("$.BrokerEpoch", f"{epoch!r} is not a broker epoch (int64 >= -1); the file is not used")
        return
    at = doc.get("CollectedAt")
    if at is not None:
        try:
            at = parse_iso(at)
        except ValueError:
            quarantine("$.CollectedAt", f"{at!r} is not an ISO 8601 time; left null")
            at = None
    at_offset = doc.get("CollectedAtOffset")
    if at_offset is not None and not _int(at_offset, _I64, -1):
        quarantine("$.CollectedAtOffset", f"{at_offset!r} is not an offset; left null")
        at_offset = None
    topics = doc.get("TopicPartitionLogInfoList")
    if not isinstance(topics, list):
        quarantine("$.TopicPartitionLogInfoList", f"{type(topics).__name__}, expected a list")
        return
    head = {"broker_id": broker_id, "broker_epoch": epoch, "collected_at": at,
            "collected_at_offset": at_offset, "source_file": src}
    seen = set()
    for ti, topic in enumerate(topics):
        tpath = f"$.TopicPartitionLogInfoList[{ti}]"
        if not isinstance(topic, dict) or not isinstance(topic.get("PartitionLogInfo"), list):
            quarantine(tpath, "not an object with a PartitionLogInfo list")
            continue
        tid, tname = topic.get("TopicId"), topic.get("TopicName")
        if tid is not None and not uuid_is_valid(tid):
            quarantine(f"{tpath}.TopicId", f"{tid!r} is not a base64 topic id; its partitions are not used")
            continue
        if tid is None and not isinstance(tname, str):
            quarantine(tpath, "TopicId is null and no TopicName says which topic it is")
            continue
        for pi, entry in enumerate(topic["PartitionLogInfo"]):
            ppath = f"{tpath}.PartitionLogInfo[{pi}]"
            try:
                row = _entry_row(entry, ppath)
            except _Bad as exc:
                quarantine(*exc.args)
                continue
            key = (tid, tname if tid is None else None, row["partition"])
            if key in seen:
                quarantine(ppath, f"second entry for partition {row['partition']} of this topic; the first is kept")
                continue
            seen.add(key)
            rows.append({**head, **row, "topic_id": tid, "topic_name": tname if tid is None else None})


def _entry_row(entry, ppath: str) -> dict:
    if not isinstance(entry, dict):
        raise _Bad(ppath, f"{type(entry).__name__}, expected an object")
    checks = [("Partition", _I32, -1 if entry.get("ErrorCode") not in (0, None) else 0),
              ("LastWrittenLeaderEpoch", _I32, -1), ("CurrentLeaderEpoch", _I32, -1),
              ("LogEndOffset", _I64, -1), ("ErrorCode", _I16, None)]
    for name, bounds, low in checks:
        if name not in entry:
            raise _Bad(f"{ppath}.{name}", "missing")
        if not _int(entry[name], bounds, low):
            raise _Bad(f"{ppath}.{name}", f"{entry[name]!r} is out of range or not an integer")
    msg = entry.get("ErrorMessage")
    if msg is not None and not isinstance(msg, str):
        raise _Bad(f"{ppath}.ErrorMessage", f"{msg!r} is not a string or null")
    return {"partition": entry["Partition"], "last_written_leader_epoch": entry["LastWrittenLeaderEpoch"],
            "current_leader_epoch": entry["CurrentLeaderEpoch"], "log_end_offset": entry["LogEndOffset"],
            "error_code": entry["ErrorCode"], "error_message": msg}
