"""Issue 12 item 4: ingest + replay of a log with a damaged batch in the middle never writes duplicate
partition_state keys (the records after the damaged batch are replayed once, on top of what came before)."""
from __future__ import annotations

import shutil

from pyspark.sql import functions as F

from jobs.ingest import ingest
from jobs.replay import replay
from lake import catalog
from realdata_facts import CLUSTERS, REALDATA


def test_replay_after_a_quarantined_batch_writes_unique_partition_state_keys(lake, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(REALDATA / CLUSTERS["vasifvortex"], data, copy_function=shutil.copyfile)
    for d in (data, data / "__cluster_metadata-0"):
        d.chmod(0o755)  # the shared copy is read-only
    seg = data / "__cluster_metadata-0" / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a batch in the middle: its CRC no longer verifies
    seg.write_bytes(bytes(raw))
    res = ingest(lake.spark, lake, "damaged", str(data), 64 << 20)
    assert res.quarantined
    replay(lake.spark, lake, "damaged", buckets=3)
    state = lake.read(catalog.PARTITION_STATE.name).where(F.col("cluster") == "damaged")
    key = list(catalog.PARTITION_STATE.key)
    assert state.count() > 0
    assert state.groupBy(*key).count().where(F.col("count") > 1).count() == 0
