"""The configuration of a job the suite starts in its own process (a JVM of its own, local[1]).

Such a JVM lives for seconds: the C1 compiler alone and a serial collector take a fraction of the CPU
that tiered compilation and G1's background threads take on a 2-core machine (a job's wall time drops by
about a fifth here).  The suite's one long-lived session keeps the JVM's defaults."""
from __future__ import annotations

from pathlib import Path

SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def small_job_yaml(extra: str = "", master: str | None = "local[1]") -> str:
    """YAML for a short job: one core unless ``master`` is None, few shuffle partitions, a short-lived JVM;
    ``extra`` appends top-level sections (``replay:``, ``lock:`` ...)."""
    spark = f"  master: {master}\n" if master else ""
    return (f"spark:\n{spark}  shuffle_partitions: 2\n  driver_memory: 1g\n  conf:\n"
            f"    spark.driver.extraJavaOptions: {SHORT_JVM}\n    spark.executor.extraJavaOptions: {SHORT_JVM}\n"
            + extra)


def write_small_job_conf(path: Path, extra: str = "", master: str | None = "local[1]") -> Path:
    path.write_text(small_job_yaml(extra, master))
    return path
