"""What running on a cluster rests on, without starting one (tests/jobs/test_standalone_cluster.py runs
the jobs on a real standalone cluster): which master a run uses, the code zip shipped to executors
(importable, config readable, from the zip alone), and the check of the staged output before a commit."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake import spark as S
from lake.config import load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("master, local", [
    ("local", True), ("local[*]", True), ("local[2]", True), ("local[4, 2]", True),
    ("local-cluster[2,1,1024]", False), ("spark://127.0.0.1:7077", False), ("yarn", False),
    ("k8s://https://host:6443", False),
])
def test_only_local_masters_are_local(master, local):
    assert S.is_local(master) is local


@pytest.fixture
def no_session(monkeypatch):
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)


def test_master_precedence_flag_then_submit_args_then_config_then_local(no_session, monkeypatch):
    config = load_config()
    assert config["spark"]["master"] is None  # unset: spark-submit's, else local[*]
    assert S.resolve_master(config) == "local[*]"
    yaml_master = load_config(overrides={"spark": {"master": "yarn"}})
    assert S.resolve_master(yaml_master) == "yarn"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g --master spark://h:7077 pyspark-shell")
    assert S.resolve_master(yaml_master) == "spark://h:7077"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master=local[3] pyspark-shell")
    assert S.resolve_master(config) == "local[3]"
    assert S.resolve_master(yaml_master, "spark://flag:7077") == "spark://flag:7077"


def test_a_running_context_keeps_its_master(spark):
    assert S.resolve_master(load_config(overrides={"spark": {"master": "yarn"}})) == spark.sparkContext.master


def test_the_shipped_packages_are_the_installed_ones():
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert set(S.SHIPPED_PACKAGES) == {p.split(".")[0].rstrip("*") for p in include}


def test_the_code_zip_runs_from_the_zip_alone(tmp_path):
    archive = S.code_zip(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    assert {"conf/defaults.yaml", "conf/scenarios/default-cluster.yaml", "transforms/silver.py",
            "controller_core/pipeline.py", "jobs/cli.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    # a Python with the dependencies but not the project (no site: no editable install), in another cwd
    import pyarrow

    site = str(Path(pyarrow.__file__).resolve().parents[1])
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import transforms.silver, lake.config; "
            "from simulator.scenario import builtin_names; "
            "print(transforms.silver.__file__.startswith(sys.argv[1]), lake.config.load_config()['replay']['buckets'],"
            " 'default-cluster' in builtin_names())")
    res = subprocess.run([sys.executable, "-S", "-c", code, str(archive)], capture_output=True, text=True,
                         cwd=tmp_path, env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                                            "PYTHONPATH": site}, timeout=120)
    assert res.stdout.split() == ["True", "None", "True"], res.stderr
    # without the zip that Python cannot import the project: the zip is what the executors get
    res = subprocess.run([sys.executable, "-S", "-c", "import transforms"], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": site}, timeout=60)
    assert "No module named 'transforms'" in res.stderr


def test_staged_output_is_checked_against_what_the_tasks_wrote(tmp_path):
    from jobs import common
    from lake.delta import StagedOutputError, _staged

    staging = tmp_path / "_staging" / "x"
    staging.mkdir(parents=True)
    pq.write_table(pa.table({"a": [1, 2, 3]}), staging / "part-0.parquet")
    (staging / "_SUCCESS").write_text("")
    assert _staged("t", staging, 3).count_rows() == 3
    with pytest.raises(StagedOutputError) as lost:
        _staged("t", staging, 5)
    with pytest.raises(StagedOutputError) as missing:
        _staged("t", tmp_path / "gone", 5)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _staged("t", empty, 0) is None
    with pytest.raises(StagedOutputError):
        _staged("t", empty, 2)
    line = common.error_line("ingest", lost.value)
    assert common.cannot_run(lost.value) and "\n" not in line
    assert line.startswith("kraft-audit ingest: table t: the Spark tasks wrote 5 rows but the driver finds 3 ")
    assert line.endswith(f"({staging})")
    assert "missing on the driver" in str(missing.value)
