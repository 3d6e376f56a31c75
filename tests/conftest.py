"""Suite-wide fixtures.

There is exactly ONE SparkSession for the whole run (JVM start costs 10-15 s here);
it is built through lake.spark.get_spark so the suite exercises the same session
settings the jobs use (UTC, Arrow, TIMESTAMP_MICROS ...), only sized for tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"


@pytest.fixture(scope="session")
def spark_config(tmp_path_factory):
    from lake.config import load_config

    return load_config(
        overrides={
            "lake": str(tmp_path_factory.mktemp("lake-default")),
            "spark": {
                "master": "local[2]",
                "app_name": "kraft-audit-tests",
                "driver_memory": "2g",
                "shuffle_partitions": 2,
                "warehouse_dir": str(tmp_path_factory.mktemp("warehouse")),
                "conf": {"spark.default.parallelism": "2"},
            },
        }
    )


@pytest.fixture(scope="session")
def spark(spark_config):
    from lake.spark import get_spark

    session = get_spark(spark_config)
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path, spark):
    """A fresh, empty lake per test, backend chosen as in production ("auto")."""
    from lake.delta import Lake

    return Lake(tmp_path / "lake", spark)


@pytest.fixture(scope="session")
def realdata() -> Path:
    """Real KRaft metadata logs shared beside the checkout (../shared/realdata).

    Fails instead of skipping: silently skipping the real-data tests would make a
    broken CI checkout look green.
    """
    if not REALDATA.is_dir():
        pytest.fail(
            f"real-data directory not found: {REALDATA}\n"
            "The tests expect the shared data set checked out beside this repository "
            "(<parent>/shared/realdata next to <parent>/<this checkout>).",
            pytrace=False,
        )
    return REALDATA


@pytest.fixture(scope="session")
def silver(spark, tmp_path_factory):
    """One lake with two real clusters ingested and replayed (bronze + silver), and the replay counts;
    shared by the replay tests (tests/jobs/test_replay.py) and the catalog tests (tests/lake)."""
    from jobs.ingest import ingest
    from jobs.replay import replay
    from lake.delta import Lake
    from realdata_facts import CLUSTERS

    lake = Lake(tmp_path_factory.mktemp("silver") / "lake", spark)
    for name in ("induswargods", "vasifvortex"):
        ingest(spark, lake, name, str(REALDATA / CLUSTERS[name]), 64 << 20)
    counts = {name: replay(spark, lake, name, buckets=3) for name in ("induswargods", "vasifvortex")}
    return lake, counts


@pytest.fixture(scope="session")
def real_bronze(spark, tmp_path_factory):
    """One lake with every real cluster's log ingested (bronze, 64 MiB splits), and each ingest's result;
    shared by the ingest tests (which read bronze) and the one-engine tests (which add simulated clusters
    and replay them all in it)."""
    from jobs.ingest import ingest
    from lake.delta import Lake
    from realdata_facts import CLUSTERS

    lake = Lake(tmp_path_factory.mktemp("real") / "lake", spark)
    results = {name: ingest(spark, lake, name, str(REALDATA / rel), 64 << 20) for name, rel in CLUSTERS.items()}
    return lake, results


@pytest.fixture(scope="session")
def growth(spark, tmp_path_factory):
    """A real log growing segment by segment, ingested and replayed at each step, the lake copied at every
    commit point (tests/growth_sweep.py); shared by the crash tests and the incremental-replay tests."""
    from growth_sweep import build

    return build(spark, tmp_path_factory.mktemp("growth"))
