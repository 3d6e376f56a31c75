"""The one place a SparkSession is built (jobs and the test suite both use it).

Settings here are not cosmetic; the Delta code in lake/delta.py depends on them:

* ``spark.sql.session.timeZone=UTC`` -- TimestampType is exported to Arrow as
  ``timestamp[us, tz=UTC]``. A tz-naive timestamp anywhere makes delta-rs create
  the table at protocol 3/7 (``timestampNtz`` feature) instead of 1/2.
* ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` -- Spark's default INT96
  is read by pyarrow as a *naive* ``timestamp[ns]`` (same 3/7 problem) when the
  delta-rs backend streams Spark-written staging parquet into a Delta table.
* ``PYSPARK_PYTHON=sys.executable`` -- otherwise Python workers use whatever
  ``python3`` is first on PATH (no pyarrow there -> UDFs fail).

We never call ``delta.configure_spark_with_delta_pip``: it sets ``spark.jars.packages``,
and the resulting Ivy/Maven resolution fails the session start on a machine without
Maven access (stack-notes section 3). Delta jars, if any, come from ``spark.jars`` in
the config (or the cluster's classpath).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def get_spark(config: dict) -> SparkSession:
    """Create (or return the already running) SparkSession configured from ``config``.

    ``getOrCreate`` semantics: if a session already exists in this process, static
    confs such as driver memory cannot change any more; the runtime SQL confs set
    below are still applied to it.
    """
    # Must happen before the JVM / Python workers start.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    sc = config["spark"]
    warehouse = sc.get("warehouse_dir") or str(
        Path(tempfile.gettempdir()) / f"kraft-audit-warehouse-{os.getuid()}"
    )
    extra = dict(sc.get("conf") or {})

    builder = (
        SparkSession.builder.master(sc["master"])
        .appName(sc["app_name"])
        .config("spark.driver.memory", sc["driver_memory"])
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", warehouse)
    )
    for key, value in _runtime_confs(sc).items():
        builder = builder.config(key, value)
    if _wants_delta_spark(config["delta"]["backend"], extra):
        builder = builder.config("spark.sql.extensions", DELTA_EXTENSION).config(
            "spark.sql.catalog.spark_catalog", DELTA_CATALOG
        )
    for key, value in extra.items():  # user confs last: they win
        builder = builder.config(key, value)

    spark = builder.getOrCreate()
    # Re-apply runtime confs in case getOrCreate returned a pre-existing session.
    for key, value in {**_runtime_confs(sc), **extra}.items():
        if not spark.conf.isModifiable(key):
            continue
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel(sc.get("log_level") or "ERROR")
    return spark


def _runtime_confs(sc: dict) -> dict[str, str]:
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(sc["shuffle_partitions"]),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A silent fallback to the non-Arrow path is ~10x slower and changes types
        # (decimals); better to fail and see it.
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }


def _wants_delta_spark(backend: str, extra_conf: dict[str, str]) -> bool:
    """Whether to install Delta's session extension + catalog.

    ``auto`` only does so when the user passed Delta jars explicitly (a ``spark.jars``
    / ``spark.jars.packages`` value mentioning "delta"): registering the catalog without
    the classes breaks every catalog operation (CANNOT_LOAD_CATALOG.PLUGIN_CLASS_NOT_FOUND).
    On a cluster whose classpath already has Delta, use ``backend: delta-spark``.
    """
    if backend == "delta-spark":
        return True
    if backend == "auto":
        jars = " ".join(extra_conf.get(k, "") for k in ("spark.jars", "spark.jars.packages"))
        return "delta" in jars.lower()
    return False


def delta_jvm_available(spark: SparkSession) -> bool:
    """True when Delta's JVM classes can be loaded by this session.

    Uses the thread context class loader, which sees jars added via ``spark.jars``;
    ``Class.forName`` does not (it returned False even with the jar present).
    Spark Connect sessions have no ``_jvm``: reported as unavailable.
    """
    try:
        loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass("io.delta.tables.DeltaTable")
        return True
    except Exception:
        return False
