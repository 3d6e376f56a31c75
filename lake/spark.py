"""The one place a SparkSession is built (jobs and the test suite both use it).

Settings here are not cosmetic; the Delta code in lake/delta.py depends on them:

* ``spark.sql.session.timeZone=UTC`` -- TimestampType is exported to Arrow as
  ``timestamp[us, tz=UTC]``. A tz-naive timestamp anywhere makes delta-rs create
  the table at protocol 3/7 (``timestampNtz`` feature) instead of 1/2.
* ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` -- Spark's default INT96
  is read by pyarrow as a *naive* ``timestamp[ns]`` (same 3/7 problem) when the
  delta-rs backend streams Spark-written staging parquet into a Delta table
  (``delta.spark_writes: driver``; the default has the tasks write the files with pyarrow).
* ``PYSPARK_PYTHON=sys.executable`` -- otherwise Python workers use whatever
  ``python3`` is first on PATH (no pyarrow there -> UDFs fail).  Only for a local master,
  like ``SPARK_LOCAL_IP=127.0.0.1``: on a cluster the executors' Python and the driver's
  address are the cluster's business (spark-submit, ``PYSPARK_PYTHON``, ``SPARK_LOCAL_IP``).

The master: ``--master`` of the command, else the one spark-submit (or ``PYSPARK_SUBMIT_ARGS``)
gave the JVM, else ``spark.master`` of the config, else ``local[*]`` (:func:`resolve_master`).
On a cluster the project's packages are zipped and shipped to the executors with
``addPyFile`` (:func:`ship_code`), so an executor needs only the pinned dependencies.

We never call ``delta.configure_spark_with_delta_pip``: it sets ``spark.jars.packages``,
and the resulting Ivy/Maven resolution fails the session start on a machine without
Maven access (stack-notes section 3). Delta jars, if any, come from ``spark.jars`` in
the config (or the cluster's classpath).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


# The project's top-level packages (pyproject's [tool.setuptools.packages.find]): what an executor imports.
SHIPPED_PACKAGES = ("controller_core", "audit", "lake", "transforms", "jobs", "simulator", "conf")
# Package data shipped with them (conf/defaults.yaml, the built-in scenarios).
_SHIPPED_SUFFIXES = (".py", ".yaml")
DEFAULT_MASTER = "local[*]"


def _progress_wanted() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)()) and not os.environ.get("CI")


def get_spark(config: dict, master: str | None = None) -> SparkSession:
    """Create (or return the already running) SparkSession configured from ``config``.

    ``master`` (a command's ``--master``) wins over everything (see :func:`resolve_master`).
    ``getOrCreate`` semantics: if a session already exists in this process, static
    confs such as driver memory (and the master) cannot change any more; the runtime SQL confs
    set below are still applied to it.
    """
    sc = config["spark"]
    master = resolve_master(config, master)
    if is_local(master):
        # Must happen before the JVM / Python workers start.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    warehouse = sc.get("warehouse_dir") or str(
        Path(tempfile.gettempdir()) / f"kraft-audit-warehouse-{os.getuid()}"
    )
    extra = dict(sc.get("conf") or {})

    builder = (
        SparkSession.builder.master(master)
        .appName(sc["app_name"])
        .config("spark.driver.memory", sc["driver_memory"])
        .config("spark.ui.enabled", "false")
        # Spark's own stage bar only for a person at a terminal (never in CI logs or pipes)
        .config("spark.ui.showConsoleProgress", "true" if _progress_wanted() else "false")
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
    if sc.get("ship_code", True) and not is_local(spark.sparkContext.master):
        ship_code(spark)
    return spark


def resolve_master(config: dict, master: str | None = None) -> str:
    """The master a run uses, first found: ``master`` (the command's ``--master``); the master of
    the SparkContext already running in this process; the one spark-submit gave the JVM it launched
    us from (or ``--master`` in ``PYSPARK_SUBMIT_ARGS``); ``spark.master`` of the config; ``local[*]``."""
    if master:
        return master
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return active.master
    return _submitted_master() or config["spark"].get("master") or DEFAULT_MASTER


def _submitted_master() -> str | None:
    """The master spark-submit chose, when this process was started by it (the JVM is already up and
    holds it as a system property), or the one ``PYSPARK_SUBMIT_ARGS`` will pass to the JVM."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkContext

        SparkContext._ensure_initialized()  # connects to spark-submit's JVM, launches nothing
        return SparkContext._jvm.java.lang.System.getProperty("spark.master")
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    for i, arg in enumerate(args):
        if arg == "--master" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--master="):
            return arg.split("=", 1)[1]
    return None


def is_local(master: str) -> bool:
    """A master whose executors are threads of the driver's JVM (``local``, ``local[N]``,
    ``local[N, F]``): they share the driver's files, Python and imports.  ``local-cluster[...]``
    starts separate executor processes and counts as a cluster."""
    return master == "local" or master.startswith("local[")


def ship_code(spark: SparkSession) -> str | None:
    """Add a zip of the project's packages (:func:`code_zip`) to every executor's Python path
    (``SparkContext.addPyFile``), once per SparkContext; returns the zip's path, or None when the
    packages are not plain directories here (imported from a zip that ``--py-files`` already ships).
    The driver's own ``sys.path`` is left as it was."""
    sc = spark.sparkContext
    shipped = getattr(sc, "_kraft_audit_code", None)
    if shipped is not None:  # "" : nothing to ship
        return shipped or None
    folder = Path(tempfile.mkdtemp(prefix="kraft-audit-code-"))
    atexit.register(shutil.rmtree, folder, True)  # Spark serves the file from here until the end
    archive = code_zip(folder)
    if archive is not None:
        before = list(sys.path)
        sc.addPyFile(str(archive))
        sys.path[:] = before  # addPyFile also puts the zip first on the driver's path: keep ours
    sc._kraft_audit_code = str(archive) if archive else ""
    return sc._kraft_audit_code or None


def code_zip(folder: Path) -> Path | None:
    """``folder/kraft_audit.zip``: the packages of :data:`SHIPPED_PACKAGES` as this process imports them,
    their ``.py`` files and package data (``conf/defaults.yaml``, the scenarios), no ``__pycache__``.
    None when a package is not a plain directory (a zip, an egg)."""
    roots = {}
    for name in SHIPPED_PACKAGES:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if len(locations) != 1 or not Path(locations[0]).is_dir():
            return None
        roots[name] = Path(locations[0])
    archive = Path(folder) / "kraft_audit.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, root in roots.items():
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root)
                if path.is_file() and path.suffix in _SHIPPED_SUFFIXES and "__pycache__" not in rel.parts:
                    zf.write(path, f"{name}/{rel.as_posix()}")
    return archive


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
