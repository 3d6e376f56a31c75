"""`kraft-audit decode`: Kafka's dump, file order, summaries and errors, without Spark."""
from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import time
from collections import Counter

from jobs import cli, decode
from realdata_facts import REALDATA, expected_counts, readme_table

ARTHUR = REALDATA / "arthurarutunyan04-2segments-mv4.0/kafka-data"


def _expected_lines(rel: str) -> list[dict]:
    with gzip.open(REALDATA / "expected-decode" / (rel + ".jsonl.gz"), "rt") as fh:
        return [json.loads(line) for line in fh]


def test_folder_is_dumped_in_replay_order_exactly_as_kafka_prints_it():
    out = io.StringIO()
    assert decode.run([str(ARTHUR)], out=out, err=io.StringIO()) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    order = ["bootstrap.checkpoint", "__cluster_metadata-0/00000000000000000000.log",
             "__cluster_metadata-0/00000000000000005151.log"]
    want = [r for rel in order for r in _expected_lines("arthurarutunyan04-2segments-mv4.0/kafka-data/" + rel)]
    assert [{k: line[k] for k in ("offset", "type", "version", "data")} for line in lines] == want
    files = [line["file"] for line in lines]
    assert files == sorted(files, key=lambda f: [o in f for o in order].index(True))
    first_segment = next(line for line in lines if line["file"].endswith("00000000000000000000.log"))
    # the first record of a segment sits right after the 61-byte batch header
    assert (first_segment["position"], first_segment["batchBaseOffset"], first_segment["control"]) == (61, 0, True)
    assert isinstance(first_segment["batchTimestamp"], int) and isinstance(first_segment["batchLeaderEpoch"], int)


def test_summary_counts_equal_the_readme():
    out = io.StringIO()
    decode.run([str(REALDATA / "ogs59-3broker-mv3.7/kafka-1/__cluster_metadata-0")], summary=True, out=out,
               err=io.StringIO())
    summaries = [json.loads(line) for line in out.getvalue().splitlines()]
    table = readme_table()
    # the folder's data directory holds bootstrap.checkpoint: it comes first, as in a replay
    assert [s["file"].rsplit("/", 1)[1] for s in summaries] == [
        "bootstrap.checkpoint", "00000000000000000000.log", "00000000000000020475-0000000026.checkpoint"]
    for s in summaries:
        rel = str(s["file"]).split("realdata/", 1)[1]
        assert set(s) == {"file", "batches", "records", "types", "errors"}
        assert (s["batches"], s["records"], s["errors"]) == (int(table[rel]["batches"]), int(table[rel]["records"]), [])
        assert Counter(s["types"]) == expected_counts(table[rel])


def test_bad_file_is_reported_with_position_and_strict_fails(tmp_path, capsys):
    raw = bytearray((REALDATA / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log")
                    .read_bytes())
    raw[1000] ^= 1
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(bytes(raw))
    assert cli.main(["decode", "--summary", str(bad)]) == 0
    assert cli.main(["decode", "--strict", str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"{bad} at byte " in captured.err and "[CRC_MISMATCH]" in captured.err
    summary = json.loads(captured.out.splitlines()[0])
    assert [e["reason"] for e in summary["errors"]] == ["CRC_MISMATCH"]
    assert 0 < summary["records"] < 153


def test_missing_path_is_a_clear_error(capsys):
    assert cli.main(["decode", "/nonexistent/kraft"]) == 2
    assert "/nonexistent/kraft: no such file or directory" in capsys.readouterr().err


# What decode's start-up must not pay for: Spark, pandas, SciPy's linear algebra (numba's BLAS probe,
# controller_core/numba_cache.py) and the other commands' modules (only the command run adds its options).
NOT_LOADED = ("pyspark", "pandas", "scipy.linalg", "jobs.audit", "jobs.simulate", "jobs.compare_copies", "jobs.report")


def test_decode_starts_without_spark_or_pandas_and_fast():
    src = REALDATA / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log"
    code = ("import sys, time; t = time.perf_counter(); from jobs.cli import main; main(['decode', sys.argv[1]]); "
            "sys.stderr.write(repr([m for m in sys.argv[2:] if sys.modules.get(m)]) + ' ' + "
            "str(time.perf_counter() - t))")
    best = None
    for _ in range(3):  # best of three: the machine is shared
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", code, str(src), *NOT_LOADED], capture_output=True, text=True,
                             check=True)
        wall = time.perf_counter() - t0
        best = wall if best is None else min(best, wall)
    assert len(res.stdout.splitlines()) == 153
    loaded, _ = res.stderr.rsplit(" ", 1)
    assert loaded.split("\n")[-1] == "[]"
    assert best < 2.0, f"decode of a small log took {best:.2f} s including interpreter start"


def test_numba_blas_probe_skipped_but_scipy_still_importable():
    """numba_cache loads numba's NumPy typing without SciPy; SciPy itself stays usable afterwards (the quality
    job's Great Expectations imports it)."""
    code = ("import sys; import controller_core.numba_cache, numba.np.arraymath as m; "
            "print('scipy.linalg' in sys.modules, m._HAVE_BLAS); import scipy.linalg; print(scipy.linalg.norm([3, 4]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "5.0"]
