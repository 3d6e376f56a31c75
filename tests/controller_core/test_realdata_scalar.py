"""The scalar reader decodes real KRaft metadata exactly as Kafka does.

Every metadata log segment, snapshot (``*.checkpoint``) and ``bootstrap.checkpoint`` under
../shared/realdata is checked against ``expected-decode/<same path>.jsonl.gz`` (Kafka's own decode,
``kafka-dump-log.sh --cluster-metadata-decoder``) record by record, its batch CRCs are checked, and its
counts are checked against the per-file table of realdata/README.md.  Not included: producer-state
``*.snapshot`` files and the ``rxx-topic-1`` topic partition folders, which are not metadata.
"""
from __future__ import annotations

import gzip
import json
import struct
from collections import Counter
from functools import lru_cache
from pathlib import Path

import crc32c
import pytest

from controller_core.codec.batch import encode_batch, iter_batches_scalar, read_header, verify_crc

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
if not (REALDATA / "README.md").is_file():
    raise FileNotFoundError(f"real metadata is missing: {REALDATA} (need ../shared beside the checkout)")
EXPECTED = REALDATA / "expected-decode"


def discover_metadata_files() -> list[Path]:
    files = []
    for p in REALDATA.rglob("*"):
        if not p.is_file() or p.relative_to(REALDATA).parts[0] == "expected-decode":
            continue
        if p.name == "bootstrap.checkpoint":
            files.append(p)
        elif p.parent.name == "__cluster_metadata-0" and p.suffix in (".log", ".checkpoint"):
            files.append(p)
    return sorted(files)


METADATA_FILES = discover_metadata_files()
if not METADATA_FILES:
    raise FileNotFoundError(f"no metadata logs or snapshots found under {REALDATA}")
FILE_IDS = [str(p.relative_to(REALDATA)) for p in METADATA_FILES]

from realdata_facts import VERSION_COLUMN_TYPES, expected_counts, readme_row, readme_table  # noqa: E402


def versions_column(row: dict[str, str]) -> str:
    return next(v for k, v in row.items() if k.startswith("record versions"))


@lru_cache(maxsize=None)
def scalar_decode(path: Path):
    """(batch headers, records) as the scalar reference reader gives them."""
    buf = path.read_bytes()
    headers, records = [], []
    for hdr, recs in iter_batches_scalar(buf):
        headers.append(hdr)
        records.extend(recs)
    return headers, records


@lru_cache(maxsize=None)
def kafka_decode(path: Path) -> list[dict]:
    exp = EXPECTED / (str(path.relative_to(REALDATA)) + ".jsonl.gz")
    assert exp.is_file(), f"no expected decode for {path.relative_to(REALDATA)}: {exp}"
    with gzip.open(exp, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ---------------------------------------------------------------------------------------- inventory
def test_readme_table_expected_decode_and_files_on_disk_agree():
    on_disk = set(FILE_IDS)
    in_readme = set(readme_table())
    decoded = {str(p.relative_to(EXPECTED))[:-len(".jsonl.gz")] for p in EXPECTED.rglob("*.jsonl.gz")}
    assert on_disk == in_readme, f"disk only: {on_disk - in_readme}, README only: {in_readme - on_disk}"
    assert on_disk == decoded, f"disk only: {on_disk - decoded}, expected-decode only: {decoded - on_disk}"


def test_discovery_leaves_out_producer_state_and_topic_partitions():
    producer_state = list(REALDATA.rglob("*.snapshot"))
    topic_segments = list(REALDATA.rglob("rxx-topic-1/*.log"))
    assert producer_state and topic_segments, "the realdata layout changed: update the discovery rule"
    assert not [f for f in FILE_IDS if f.endswith(".snapshot") or "rxx-topic-1" in f]


# ------------------------------------------------------------------------------------------ per file
@pytest.mark.parametrize("path", METADATA_FILES, ids=FILE_IDS)
def test_scalar_reader_equals_kafka_decode_record_by_record(path: Path):
    _, records = scalar_decode(path)
    want = kafka_decode(path)
    for i, (rec, exp) in enumerate(zip(records, want)):
        got = json.dumps(rec.to_json_dict())
        ref = json.dumps(exp)  # key order, bool vs int and int vs float all count
        assert got == ref, f"record #{i} (offset {exp.get('offset')}):\n  scalar: {got}\n  kafka:  {ref}"
    assert len(records) == len(want), f"{len(records)} records decoded, Kafka decoded {len(want)}"


@pytest.mark.parametrize("path", METADATA_FILES, ids=FILE_IDS)
def test_every_batch_crc_verifies_and_batches_tile_the_file(path: Path):
    buf = path.read_bytes()
    pos = batches = 0
    while pos < len(buf):
        hdr = read_header(buf, pos, len(buf))
        (batch_length,) = struct.unpack_from(">i", buf, pos + 8)
        (stored,) = struct.unpack_from(">I", buf, pos + 17)
        end = pos + 12 + batch_length
        assert crc32c.crc32c(buf[pos + 21:end]) == stored, f"batch at byte {pos}: CRC32C does not match"
        verify_crc(buf, hdr)
        assert hdr.size == 12 + batch_length
        pos, batches = end, batches + 1
    assert pos == len(buf), "the last batch overruns the file"
    assert batches == len(scalar_decode(path)[0])


@pytest.mark.parametrize("path", METADATA_FILES, ids=FILE_IDS)
def test_counts_equal_the_readme_table(path: Path):
    row = readme_row(str(path.relative_to(REALDATA)))
    headers, records = scalar_decode(path)
    assert path.stat().st_size == int(row["bytes"])
    assert len(headers) == int(row["batches"])
    assert len(records) == int(row["records"])
    assert sum(h.records_count for h in headers) == int(row["records"])
    assert Counter(r.type for r in records) == expected_counts(row)


@pytest.mark.parametrize("path", METADATA_FILES, ids=FILE_IDS)
def test_metadata_version_and_record_versions_equal_the_readme_table(path: Path):
    row = readme_row(str(path.relative_to(REALDATA)))
    _, records = scalar_decode(path)
    levels = {r.data["featureLevel"] for r in records
              if r.type == "FEATURE_LEVEL_RECORD" and r.data["name"] == "metadata.version"}
    mv = row["metadata.version"]
    assert levels == (set() if mv == "none" else {int(mv)})
    for type_name, cell in zip(VERSION_COLUMN_TYPES, versions_column(row).split("/")):
        versions = {r.version for r in records if r.type == type_name}
        assert versions == (set() if cell == "-" else {int(cell)}), type_name


@pytest.mark.parametrize("path", METADATA_FILES, ids=FILE_IDS)
def test_encoder_rewrites_kafkas_batches_byte_for_byte(path: Path):
    """encode_batch, fed Kafka's decode of each batch, writes exactly the bytes Kafka wrote."""
    buf = path.read_bytes()
    headers, records = scalar_decode(path)
    want = kafka_decode(path)
    i = 0
    for hdr in headers:
        batch = want[i:i + hdr.records_count]
        stamps = records[i:i + hdr.records_count]
        i += hdr.records_count
        out = encode_batch(hdr.base_offset, [(r["type"], r["version"], r["data"]) for r in batch],
                           leader_epoch=hdr.leader_epoch, timestamp=hdr.base_timestamp,
                           timestamp_deltas=[r.timestamp - hdr.base_timestamp for r in stamps])
        original = buf[hdr.position:hdr.position + hdr.size]
        if out != original:
            diff = next((k for k in range(min(len(out), len(original))) if out[k] != original[k]), None)
            pytest.fail(f"batch at byte {hdr.position} (offset {hdr.base_offset}): re-encoded {len(out)} bytes, "
                        f"Kafka wrote {len(original)}; first difference at batch byte {diff}")
    assert i == len(want)

