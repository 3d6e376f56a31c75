"""benchmarks/run_all.py: the one table of every benchmark figure.  Not a timed test: it checks the table's
shape, that a failed measurement is a row with its error, that bench_e2e's lines are read, and that one real
measurement (decode --summary on the smallest simulated fleet) gives a row with a number."""
from __future__ import annotations

import json

from benchmarks import run_all


def test_table_has_a_row_per_measurement_and_errors_as_rows():
    rows = [run_all.row("decode-summary", "decode --summary", records=1_152_814, partitions=100_000, seconds=0.05,
                        rate=23_000_000.0, base_what="scalar reader", base_seconds=2.0, base_rate=47_000.0,
                        versus="489x faster", target=">= 10 M rec/s", met=True, rss_driver_mb=300.0, startup_s=0.5),
            run_all.row("spark-replay", "Spark replay", records=1_000, partitions=100, seconds=3.0, rate=333.0,
                        base_seconds=1.0, versus=run_all.speed(3.0, 1.0), target="<= 2x in-process", met=False,
                        rss_driver_mb=500.0, rss_exec_mb=2048.0),
            run_all.error_row("core", "replay core", ValueError("cannot find the pipeline's rate"))]
    text = run_all.format_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[0] == "measurement" and set(lines[1]) <= {"-", " "}
    body = {line.split()[0]: line for line in lines[2:5]}
    assert set(body) == {"decode-summary", "spark-replay", "core"}
    assert "23.00 M/s" in body["decode-summary"] and "yes" in body["decode-summary"]
    assert "3.00x slower" in body["spark-replay"] and "NO" in body["spark-replay"]
    assert "2.0 GiB" in body["spark-replay"]
    assert "ERROR" in body["core"]
    assert "core: ValueError: cannot find the pipeline's rate" in text


def test_reads_bench_e2e_stage_lines():
    text = ("simulate fleet-large                           3.0 s      384,271 rec/s  peak RSS     120 MB  60 MB log\n"
            "decode segments (vectorized, 1 core)           0.4 s    2,880,000 rec/s  peak RSS     400 MB  \n"
            "Spark ingest (local[2])                       40.1 s       28,000 rec/s  peak RSS     900 MB  \n"
            "audit (violations + recovery)                  2.5 s                     peak RSS   1,200 MB  3 findings\n")
    stages = run_all.e2e_stages(text)
    assert stages["Spark ingest (local[2])"] == (40.1, 900.0)
    assert stages["audit (violations + recovery)"] == (2.5, 1200.0)
    assert run_all._stage(stages, "decode segments") == 0.4


def test_one_real_measurement_gives_a_row_with_a_number(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert run_all.main(["--scale", "tiny", "--only", "decode-summary", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "machine:" in printed and "load average before" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [r["name"] for r in rows] == ["decode-summary"]
    r = rows[0]
    assert not r.get("error"), r.get("error")
    assert r["records"] > 0 and r["rate"] > 0 and r["base_rate"] > 0 and r["met"] in (True, False)
    line = next(line for line in printed.splitlines() if line.startswith("decode-summary"))
    assert run_all.fmt_rate(r["rate"]) in line


def test_describe_row_is_the_median_of_fresh_first_calls():
    """describe's row at the tiny scale, its first call taken in two fresh processes: the row's seconds are their
    median, the note names both, and the scalar baseline was measured (once)."""
    import re
    import statistics

    cfg = {**run_all.SCALES["tiny"], "first_calls": 2}
    (r,) = run_all.m_describe(cfg)
    assert not r.get("error"), r.get("error")
    m = re.search(r"the median of the first call in 2 fresh processes \(([^)]*)\)", r["note"])
    assert m, r["note"]
    firsts = [float(x.strip().rstrip("s")) for x in m.group(1).split(",")]
    assert len(firsts) == 2 and all(x > 0 for x in firsts)
    assert abs(r["seconds"] - statistics.median(firsts)) <= 0.06  # (the note's figures are rounded)
    assert r["records"] > 0 and r["base_rate"] > 0 and r["rate"] == r["records"] / r["seconds"]


def test_reads_bench_replay_and_bench_spark_replay_lines():
    replay = ("\n20,000 partitions, 234,567 records (200,000 PartitionChangeRecords) in 2 groups\n"
              "pipeline         206,200 records/s (fold + recompute + dating, no invariants, one core)\n"
              "same 2,000-partition cluster (24,844 records): scalar reference 14,700 records/s (0 divergences), "
              "pipeline without invariants 375,600 records/s: 26x\n")
    f = run_all.core_figures(replay)
    assert (f["partitions"], f["records"], f["rate"]) == (20_000, 234_567, 206_200.0)
    assert (f["base_records"], f["base_rate"], f["same_rate"]) == (24_844, 14_700.0, 375_600.0)
    assert f["steps"] is None  # (a bench_replay.py from before its profile line)
    checked = replay.replace("no invariants", "invariants").replace("without invariants", "with invariants")
    assert run_all.core_figures(checked)["same_rate"] == 375_600.0  # bench_replay.py --invariants
    profiled = replay.replace("one core)\n", "one core)\nsteps (CPU ns a record): layout 27, fold 39, invariants 62\n")
    assert run_all.core_figures(profiled)["steps"] == "layout 27, fold 39, invariants 62"
    spark = ("20,000 partitions, 232,536 bronze records (simulated (cached) and decoded in 1.5 s, written to Delta "
             "in 2.0 s)\n"
             "replay job (with invariants, writes: executors): 87.2 s wall on local[2] -> 2,667 records/s; driver "
             "peak RSS during the job 412 MB\n  partition_state_history       200,000\ndriver peak RSS 1,234 MB\n")
    f = run_all.spark_replay_figures(spark)
    assert f == {"records": 232_536, "prepare": 3.5, "seconds": 87.2, "driver_mb": 1234.0}
    assert run_all.spark_replay_figures(spark.replace(", writes: executors", "").split("; driver")[0])["seconds"] == 87.2
