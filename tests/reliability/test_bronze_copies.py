"""Bronze keyed by the log, not the file: every node's copy of a real cluster's log ingested into one lake (one
after another and several in one run) replays and audits exactly as the most complete copy ingested alone --
the copies are compared, never replayed twice (README "Tables": metadata_records)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from jobs import cli
from jobs.ingest import ingest
from jobs.replay import replay
from lake import catalog
from lake.delta import Lake
from realdata_facts import REALDATA

SPLIT = 64 << 20
BUCKETS = 3
NODES = [REALDATA.parent / "realdata-copies" / "ogs59-3broker-mv3.7" / f"kafka-{n}" for n in (1, 2, 3)]
SILVER = tuple(t.name for t in (catalog.PARTITION_STATE_HISTORY, catalog.PARTITION_STATE, catalog.BROKER_STATE_HISTORY,
                                catalog.TOPIC_CONFIG_HISTORY, catalog.QUORUM_HISTORY, catalog.DIVERGENCES,
                                catalog.INVARIANT_BREACHES))


def _rows(root: Path, name: str) -> list[str]:
    t = Lake(root, None, backend="delta-rs").read_arrow(name)
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in t.to_pylist())


def _audit(root: Path) -> dict:
    out = io.StringIO()
    args = cli.build_parser().parse_args(["audit", "--cluster", "ogs", "--lake", str(root), "--json", "--all"])
    from jobs import audit

    assert audit.run(args, out=out) in (0, 1)
    doc = json.loads(out.getvalue())
    assert doc["findingsTotal"] == doc["findingsListed"]  # --all: every finding listed
    return doc


@pytest.fixture(scope="module")
def lakes(spark, tmp_path_factory):
    """``copies``: kafka-1's copy, then kafka-2's and kafka-3's in one run; ``single``: kafka-2's copy (the most
    complete) alone.  Both replayed."""
    root = tmp_path_factory.mktemp("bronze-copies")
    many, single = Lake(root / "copies", spark), Lake(root / "single", spark)
    results = [ingest(spark, many, "ogs", str(NODES[0]), SPLIT), ingest(spark, many, "ogs", [str(d) for d in NODES[1:]],
                                                                          SPLIT)]
    ingest(spark, single, "ogs", str(NODES[1]), SPLIT)
    for lake in (many, single):
        replay(spark, lake, "ogs", BUCKETS)
    return dict(many=Path(many.root), single=Path(single.root), results=results)


def test_the_copies_add_only_what_the_first_lacked(lakes):
    first, rest = lakes["results"]
    assert first.quarantined == rest.quarantined == []
    assert [c["added"] for c in rest.copies] == [1, 0]  # kafka-2's copy is one batch longer, kafka-3's the same
    assert [c["firstDifference"] for c in rest.copies] == [None, None]


def test_bronze_segment_rows_equal_the_single_copy_ingest(lakes):
    cols = [catalog.LOG_PART, "offset", "batch_base_offset", "batch_leader_epoch", catalog.BATCH_CRC, "record_type",
            "data_json", "source_file"]

    def log_rows(root):
        t = Lake(root, None, backend="delta-rs").read_arrow(catalog.METADATA_RECORDS.name, columns=cols)
        return sorted(json.dumps(r, default=str) for r in t.to_pylist() if r[catalog.LOG_PART] == catalog.LOG_PART_LOG)

    assert log_rows(lakes["many"]) == log_rows(lakes["single"])


@pytest.mark.parametrize("table", SILVER)
def test_the_replay_of_the_copies_equals_the_single_copy_replay(lakes, table):
    assert _rows(lakes["many"], table) == _rows(lakes["single"], table)


def test_the_audit_of_the_copies_equals_the_single_copy_audit(lakes):
    assert _audit(lakes["many"]) == _audit(lakes["single"])
