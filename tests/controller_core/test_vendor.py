"""A Confluent Server log's metadata version (controller_core/vendor.py).

A Confluent Server controller finalizes confluent.metadata.version and writes no metadata.version record (a real
Confluent Platform 7.7 log held level 119 and replayed with 119 divergences and as many INV-BUMP-ON-SHRINK-OLDMV
errors under the rules of a log without one).  Real Apache Kafka logs whose metadata.version records are renamed
the way that controller writes them stand in for such logs here: their registrations list the metadata.version
range each broker supports, as Confluent's do.
"""
from __future__ import annotations

import base64
import json
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core import pipeline, vendor
from controller_core.image import METADATA_VERSION
from controller_core.replay import read_log_dir
from realdata_facts import CLUSTERS, REALDATA


def _set(rows: pa.Table, name: str, where, value) -> pa.Table:
    i = rows.schema.get_field_index(name)
    return rows.set_column(i, rows.schema.field(i), pc.if_else(where, value, rows.column(i)))


def as_confluent(rows: pa.Table, level: int = 119) -> pa.Table:
    """``rows`` with every metadata.version FeatureLevelRecord written as a Confluent Server controller writes its
    feature (typed columns and data_json alike)."""
    mv = pc.fill_null(pc.equal(rows.column("feature_name"), METADATA_VERSION), False)
    rows = _set(rows, "feature_name", mv, pa.scalar(vendor.CONFLUENT_MV))
    rows = _set(rows, "feature_level", mv, pa.scalar(level, rows.schema.field("feature_level").type))
    return _set(rows, "data_json", mv, pa.scalar(json.dumps({"name": vendor.CONFLUENT_MV, "featureLevel": level})))


def _registered_max(rows: pa.Table) -> int:
    """The lowest maxSupportedVersion of metadata.version over the log's RegisterBrokerRecords."""
    reg = pc.equal(rows.column("record_type"), "REGISTER_BROKER_RECORD")
    ranges = [f["maxSupportedVersion"] for text in rows.column("data_json").filter(reg).to_pylist()
              for f in json.loads(text)["features"] if f["name"] == METADATA_VERSION]
    assert ranges
    return min(ranges)


def _findings(rep: pipeline.Replay) -> tuple:
    return (sorted(map(str, rep.divergences.to_pylist())),
            sorted(Counter(zip(rep.breaches.column("rule").to_pylist(),
                               rep.breaches.column("severity").to_pylist())).items()))


@pytest.mark.parametrize("cluster", ["ogs59", "mavila01", "induswargods"])
def test_a_confluent_log_replays_at_the_level_its_registrations_bound(cluster, monkeypatch):
    """Renamed, a real log (3.7, 3.9, 4.2 with ELR) replays to its own findings, the level read being the lowest
    metadata.version its registrations support at most, said in one note; read at level 0 instead (no inference),
    the same records break the rules of an old controller."""
    rows, _ = read_log_dir(REALDATA / CLUSTERS[cluster], [], partition_json=False)
    confluent = as_confluent(rows)
    assert vendor.infer(rows) is None  # an Apache Kafka log: read as it is
    got = vendor.infer(confluent)
    assert got.level == _registered_max(rows) and got.confluent_level == 119
    own, read = pipeline.run(rows), pipeline.run(confluent)
    assert own.notes == []
    assert read.notes == [got.note()]
    assert f"replayed as {METADATA_VERSION} {got.level} (" in got.note()
    assert _findings(read) == _findings(own)
    assert read.image.features[METADATA_VERSION] == got.level

    monkeypatch.setattr(vendor, "as_apache", lambda records: (records, []))
    unread = pipeline.run(confluent)
    assert _findings(unread) != _findings(own)  # (the rules of a pre-3.3 controller: what the inference spares)


def test_registrations_without_a_range_leave_the_log_at_level_zero_with_a_warning():
    """Registrations that list no metadata.version range bound nothing: the log keeps the rules of one without a
    metadata.version record, and the replay warns that its findings may be the two controllers' differences."""
    rows, _ = read_log_dir(REALDATA / CLUSTERS["ogs59"], [], partition_json=False)
    reg = pc.equal(rows.column("record_type"), "REGISTER_BROKER_RECORD")
    texts = [json.dumps({**d, "features": [f for f in d["features"] if f["name"] != METADATA_VERSION]})
             for d in map(json.loads, rows.column("data_json").filter(reg).to_pylist())]
    stripped = rows.column("data_json").to_pylist()
    for i, text in zip(pc.indices_nonzero(reg).to_pylist(), texts):
        stripped[i] = text
    rows = rows.set_column(rows.schema.get_field_index("data_json"), "data_json", pa.array(stripped, pa.string()))
    confluent = as_confluent(rows)
    got = vendor.infer(confluent)
    assert got.level is None and got.registrations == 0
    rep = pipeline.run(confluent)
    [line] = rep.notes
    assert line.startswith("warning: the log's metadata version is confluent.metadata.version 119 (a Confluent "
                           "Server controller's), it has no metadata.version record")
    assert METADATA_VERSION not in rep.image.features
    assert ("INV-BUMP-ON-SHRINK-OLDMV", "ERROR") in dict(_findings(rep)[1])


def test_the_spark_drivers_records_read_the_same_level():
    """The Spark replay's driver builds the broker and topic timelines of the cluster-level records as Recs
    (jobs/replay.cluster_timelines): the same level, the same note, the same timelines as a replay of the rows."""
    from jobs import replay as R
    from controller_core.vector.explain import cluster_level_recs

    rows, _ = read_log_dir(REALDATA / CLUSTERS["mavila01"], [], partition_json=True)
    confluent = as_confluent(rows)
    notes: list = []
    brokers, topics, image = R.cluster_timelines(cluster_level_recs(confluent), notes)
    whole = pipeline.run(confluent)
    assert notes == whole.notes and len(notes) == 1
    assert brokers.equals(whole.brokers) and topics.equals(whole.topics)
    assert image.features == whole.image.features


def _register(b: int, epoch: int, top: int) -> tuple:
    return ("REGISTER_BROKER_RECORD", 1, {
        "brokerId": b, "incarnationId": base64.urlsafe_b64encode(bytes([b, epoch]) * 8).decode()[:22],
        "brokerEpoch": epoch, "endPoints": [], "rack": None, "fenced": False,
        "features": [{"name": vendor.CONFLUENT_MV, "minSupportedVersion": 1, "maxSupportedVersion": 100 + top},
                     {"name": METADATA_VERSION, "minSupportedVersion": 1, "maxSupportedVersion": top}]})


def test_an_upgrade_reads_each_confluent_record_at_the_level_of_the_brokers_then(tmp_path, capsys, monkeypatch):
    """A Confluent cluster whose brokers support metadata.version up to 3.5-IV2 (11) shrinks an ISR re-setting its
    leader (a bump, as that level requires); the brokers restart on a release supporting 3.7-IV4 (19), the controller
    finalizes the Confluent feature's next level, and an ISR shrink keeps its leader with no bump (the rule from
    3.6-IV0).  Each record is read at the level of the registrations current there: no divergence, no breach.  One
    level for the whole log (the lowest every registration supports) would call the second shrink wrong."""
    from jobs import cli
    from simulator.writer import write_log

    tid = "dXBncmFkZWQtdG9waWMhIQ"
    batches = [
        [("FEATURE_LEVEL_RECORD", 0, {"name": vendor.CONFLUENT_MV, "featureLevel": 111})],
        [_register(1, 1, 11), _register(2, 2, 11), _register(3, 3, 11)],
        [("TOPIC_RECORD", 0, {"name": "upgraded", "topicId": tid}),
         ("PARTITION_RECORD", 0, {"partitionId": 0, "topicId": tid, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                                  "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0,
                                  "partitionEpoch": 0})],
        [("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": tid, "isr": [1, 2], "leader": 1})],
        [_register(3, 7, 19), _register(2, 8, 19), _register(1, 9, 19)],
        [("FEATURE_LEVEL_RECORD", 0, {"name": vendor.CONFLUENT_MV, "featureLevel": 119})],
        [("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": tid, "isr": [1]})],
    ]
    log = write_log(tmp_path, batches, timestamp=lambda o: 1_700_000_000_000 + o).parent
    rows, _ = read_log_dir(log, [], partition_json=False)
    got = vendor.infer(rows)
    assert got.records == ((0, 11, 111), (10, 19, 119))
    rep = pipeline.run(rows)
    assert rep.divergences.num_rows == 0 and "INV-BUMP-ON-SHRINK-OLDMV" not in rep.breaches.column("rule").to_pylist()
    assert rep.notes == [got.note()] and ("replayed as metadata.version 11 (3.5-IV2) from offset 0, then 19 (3.7-IV4) "
                                          "from offset 10") in got.note()
    assert rep.image.features[METADATA_VERSION] == 19
    assert cli.main(["verify", "--log-dir", str(log)]) == 0
    assert got.note() in capsys.readouterr().err

    one_level = vendor.Inferred(((0, 11, 111), (10, 11, 119)), got.registrations)
    monkeypatch.setattr(vendor, "infer", lambda records: one_level)
    assert pipeline.run(rows).divergences.num_rows == 1
