"""Issue 14 item 3, "Newer Kafka" (README "Newer Kafka"; the rule: ../shared/kafka-schemas/README.md "Newer record
versions"): a log holding a hand-built UnregisterControllerRecord (apiKey 29), a RegisterBrokerRecord v4 with a
cordoned log directory, a PartitionChangeRecord of a version above the newest known carrying an unknown tagged
field, and a record of the unknown apiKey 99.  Every record is kept and shown as described, nothing is
quarantined, nothing is silently lost -- by the vectorized decoder, the scalar reference reader and the compiled
walk of ``decode --summary`` alike -- and the replay carries the cordoned directories and skips the unknown record."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa

from controller_core import pipeline
from controller_core.codec.batch import iter_batches_scalar, raw_record
from controller_core.codec.bronze import NewerKafka, records_table
from controller_core.codec.logfile import TYPE_NAMES, DecodedChunk, iter_chunks
from log_builder import DIRS, EXTRA_BYTES, EXTRA_TAG, newer_log

def _segment(d: Path) -> Path:
    return next(d.rglob("*.log"))


def _vector(d: Path) -> tuple[pa.Table, list]:
    chunks = list(iter_chunks(str(_segment(d)), first_offset=0))
    return pa.concat_tables([records_table(c, "c", "f", "segment") for c in chunks if len(c)]), \
        [q for c in chunks for q in c.quarantine]


def test_every_record_is_kept_and_shown_as_described(tmp_path):
    d, at = newer_log(tmp_path)
    table, quarantine = _vector(d)
    assert quarantine == []
    rows = {r["offset"]: r for r in table.to_pylist()}
    assert len(rows) == table.num_rows == at["no_change"] + 1  # nothing lost

    r = rows[at["unregister_controller"]]
    assert (r["record_type"], r["record_type_id"], r["controller_id"]) == ("UNREGISTER_CONTROLLER_RECORD", 29, 3)

    r = rows[at["register_v4"]]
    assert (r["record_type"], r["record_version"], r["unknown_tagged_fields"]) == ("REGISTER_BROKER_RECORD", 4, None)
    assert json.loads(r["data_json"])["cordonedLogDirs"] == [DIRS[1]]

    r = rows[at["pcr_v3"]]  # read with the v2 layout, the unknown tag kept as tag and bytes
    assert (r["record_type"], r["record_version"], r["isr"]) == ("PARTITION_CHANGE_RECORD", 3, [1, 2])
    assert json.loads(r["unknown_tagged_fields"]) == [{"tag": EXTRA_TAG,
                                                       "data": base64.b64encode(EXTRA_BYTES).decode()}]

    r = rows[at["api_key_99"]]
    assert (r["record_type"], r["record_type_id"], r["record_version"], r["is_control"]) == \
        ("UNKNOWN_RECORD", 99, 0, False)
    assert json.loads(r["data_json"]) == {"apiKey": 99, "value": base64.b64encode(b"\x00vendor").decode()}


def test_the_scalar_reference_reader_agrees(tmp_path):
    d, _ = newer_log(tmp_path)
    table, _ = _vector(d)
    scalar = [r for _, recs in iter_batches_scalar(_segment(d).read_bytes()) for r in recs]
    assert [(r.offset, r.type, r.version, r.type_id, r.data,
             None if r.unknown_tagged_fields is None else json.dumps(r.unknown_tagged_fields, separators=(",", ":")))
            for r in scalar] == \
        [(r["offset"], r["record_type"], r["record_version"], r["record_type_id"], json.loads(r["data_json"]),
          r["unknown_tagged_fields"]) for r in table.to_pylist()]


def test_the_compiled_walk_hands_the_window_to_the_full_decoder(tmp_path):
    from controller_core.codec.walk import SummaryWalk

    d, _ = newer_log(tmp_path)
    items = list(iter_chunks(str(_segment(d)), first_offset=0, fast=SummaryWalk()))
    counts: dict[str, int] = {}
    for c in items:
        if isinstance(c, DecodedChunk):
            assert c.quarantine == []
            for code in c.type_code.tolist():
                counts[TYPE_NAMES[code]] = counts.get(TYPE_NAMES[code], 0) + 1
        else:
            for code, n in enumerate(c.counts.tolist()):
                if n:
                    counts[TYPE_NAMES[code]] = counts.get(TYPE_NAMES[code], 0) + n
    table, _ = _vector(d)
    want: dict[str, int] = {}
    for t in table.column("record_type").to_pylist():
        want[t] = want.get(t, 0) + 1
    assert counts == want and counts["UNKNOWN_RECORD"] == 1


def test_one_warning_per_type_and_version(tmp_path):
    d, at = newer_log(tmp_path)
    table, _ = _vector(d)
    newer = NewerKafka()
    newer.add(table)
    lines = newer.lines()
    assert len(lines) == 2, lines  # RegisterBrokerRecord v4 and UnregisterControllerRecord are declared
    assert lines[0].startswith(f"1 PARTITION_CHANGE_RECORD v3 record (newer than this build knows), first at offset "
                               f"{at['pcr_v3']}") and f"tags {EXTRA_TAG}" in lines[0] and "(v2)" in lines[0]
    assert lines[1].startswith(f"1 record of apiKey 99 (version 0) this build does not know, first at offset "
                               f"{at['api_key_99']}")


def test_the_replay_carries_cordoned_dirs_and_skips_the_unknown_record(tmp_path):
    d, at = newer_log(tmp_path)
    rep, _ = pipeline.from_log_dir(d)
    assert rep.quarantine == [] and rep.divergences.num_rows == 0
    assert len(rep.newer_kafka) == 2
    br = rep.image.brokers[4]
    assert br.log_dirs == DIRS and br.cordoned_log_dirs == []  # uncordoned by the v3 change, kept by the null one
    rows = [r for r in rep.brokers.to_pylist() if r["broker_id"] == 4]
    assert [(r["offset"], r["cordoned_log_dirs"]) for r in rows] == [
        (at["register_v4"], [DIRS[1]]), (at["uncordon"], []), (at["no_change"], [])]
    assert rows[0]["log_dirs"] == DIRS
    brokers_before = [b for b in rep.image.brokers if b != 4]
    assert brokers_before == [1, 2, 3]
    assert all(rep.image.brokers[b].cordoned_log_dirs is None for b in brokers_before)  # v1 records never said


def test_replay_rows_coded_chunk_by_chunk(tmp_path):
    """A replay's rows code their record types and files per chunk (REPLAY_SCHEMA): another log's chunks before the
    newer records make the dictionaries differ (a Confluent Server log's tagged fields raised "Unifying differing
    dictionaries" from verify and audit); the same warnings as from plain rows."""
    from controller_core.replay import read_log_dir
    from realdata_facts import CLUSTERS, REALDATA

    d, at = newer_log(tmp_path)
    newer_rows, _ = read_log_dir(d, [], partition_json=False)
    other, _ = read_log_dir(REALDATA / CLUSTERS["ogs59"], [], partition_json=False)
    rows = pa.concat_tables([other, newer_rows])
    assert pa.types.is_dictionary(rows.schema.field("record_type").type) and rows.column("record_type").num_chunks > 1
    coded, plain_rows = NewerKafka(), NewerKafka()
    coded.add(rows)
    plain_rows.add(_vector(d)[0])
    assert [line.split(" in ")[0] for line in coded.lines()] == [line.split(" in ")[0] for line in plain_rows.lines()]
    assert len(coded.lines()) == 2
