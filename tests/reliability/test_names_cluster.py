"""Issue 13 item 3, cluster names: one cluster's name never breaks the others.

A cluster name is a partition value of every table.  ``ingest --cluster ""`` used to make the lake unreadable
for every cluster, a non-ASCII name silently ingested nothing, ``'`` or ``\\`` crashed replay.  Now every command
taking ``--cluster`` checks the name first (``jobs.common.cluster_name``, called by ``preflight``): 1 to 128
characters of A-Z a-z 0-9 . _ -, starting with a letter or a digit; anything else exits 2 with one line
naming ``--cluster`` and the rule, before Spark starts and before the lake is touched.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_errors import one_line as _one_line
from jobs import cli, common

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "last-replica-standing-elr-off"  # 60 records: the cheapest real ingest
GOOD = "ok-name_1.2"  # every character class of the rule, through the real Spark ingest and replay

BAD = {
    "empty": ("", "empty"),
    "blank": (" ", "' ' is not allowed"),
    "slash": ("a/b", "'/' is not allowed"),
    "dot-dot": ("..", "starts with '.'"),
    "leading dot": (".hidden", "starts with '.'"),
    "leading dash": ("-x", "starts with '-'"),
    "non-ascii": ("naïve", "'ï' is not allowed"),
    "quote": ("o'brien", "\"'\" is not allowed"),
    "backslash": ("back\\slash", "'\\\\' is not allowed"),
    "too long": ("x" * 200, "200 characters"),
    "tab": ("tab\tname", "'\\t' is not allowed"),
    "newline": ("two\nlines", "'\\n' is not allowed"),
    "hive null": ("__HIVE_DEFAULT_PARTITION__", "starts with '_'"),
    "equals": ("a=b", "'=' is not allowed"),
    "percent": ("a%2Fb", "'%' is not allowed"),
}
GOOD_NAMES = ["ok-name_1.2", "prod-eu1", "A", "9", "x" * 128, "a..b", "kafka_01.prod-EU"]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_the_rule_accepts_these_names(name):
    assert common.cluster_name(name) == name


@pytest.mark.parametrize("name, why", list(BAD.values()), ids=list(BAD))
def test_ingest_refuses_a_bad_name_in_one_line_naming_the_flag_and_the_rule(name, why, tmp_path, capsys):
    lake = tmp_path / "lake"
    assert cli.main(["ingest", f"--cluster={name}", "--log-dir", str(DATA), "--lake", str(lake)]) == 2
    _one_line(capsys.readouterr().err, "ingest", "(--cluster)", why, common.CLUSTER_NAME_RULE)
    assert not lake.exists()  # refused before the lake was touched


COMMANDS = {
    "replay": ["replay", "--lake", "{lake}"],
    "audit": ["audit", "--lake", "{lake}"],
    "plan": ["plan", "--lake", "{lake}", "--election-type", "preferred"],
    "quality": ["quality", "--lake", "{lake}"],
    "describe": ["describe", "--lake", "{lake}"],
    "ingest": ["ingest", "--lake", "{lake}", "--log-dir", str(DATA)],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", ["", "o'brien", "naïve"])
def test_every_command_taking_cluster_checks_the_name(command, name, tmp_path, capsys):
    # --cluster=NAME: a name such as "-x" is a value, not a flag
    argv = [a.format(lake=tmp_path / "lake") for a in COMMANDS[command]] + [f"--cluster={name}"]
    assert cli.main(argv) == 2
    _one_line(capsys.readouterr().err, command, "(--cluster)", common.CLUSTER_NAME_RULE)


def test_bad_names_are_refused_before_spark_or_the_ingest_job_loads(tmp_path):
    """Every bad name in one fresh interpreter: exit 2 each time, and neither the ingest job module nor a
    SparkContext (JVM) was ever loaded."""
    code = ("import sys, json; from jobs.cli import main\n"
            "names, lake, data = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
            "codes = [main(['ingest', '--cluster=' + n, '--log-dir', data, '--lake', lake]) for n in names]\n"
            "sc = getattr(sys.modules.get('pyspark'), 'SparkContext', None)\n"
            "print(json.dumps([codes, 'jobs.ingest' in sys.modules, bool(sc and sc._active_spark_context)]))\n")
    import json

    names = [n for n, _ in BAD.values()]
    res = subprocess.run([sys.executable, "-c", code, json.dumps(names), str(tmp_path / "lake"), str(DATA)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    codes, ingest_loaded, spark_started = json.loads(res.stdout)
    assert codes == [2] * len(names)
    assert (ingest_loaded, spark_started) == (False, False)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == len(names) and all(line.startswith("kraft-audit ingest: ") for line in lines), res.stderr


def test_a_good_cluster_is_unaffected_by_refused_names(spark, tmp_path, capsys):
    """Ingest GOOD through the real Spark job, try every bad name against the same lake, then replay, audit
    and describe GOOD: the lake still holds GOOD alone and reads as before."""
    import json

    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", GOOD, "--log-dir", str(DATA), "--lake", lake]) == 0
    for name, _ in BAD.values():
        assert cli.main(["ingest", f"--cluster={name}", "--log-dir", str(DATA), "--lake", lake]) == 2
        assert cli.main(["replay", f"--cluster={name}", "--lake", lake]) == 2
    capsys.readouterr()
    assert common.known_clusters(lake) == [GOOD]
    assert cli.main(["replay", "--cluster", GOOD, "--lake", lake]) == 0
    capsys.readouterr()
    assert cli.main(["audit", "--cluster", GOOD, "--lake", lake, "--json"]) == 1  # the scenario's ERROR findings
    from_lake = json.loads(capsys.readouterr().out)
    assert cli.main(["audit", "--log-dir", str(DATA), "--json"]) == 1
    from_log = json.loads(capsys.readouterr().out)
    assert from_lake["counts"] == from_log["counts"] and from_lake["findingsTotal"] > 0
    truth = json.loads((DATA / "ground_truth.json").read_text())
    want = {f["code"] for inc in truth["incidents"] for f in inc["expectedFindings"]}
    assert want <= {c["code"] for c in from_lake["counts"]}
    assert cli.main(["describe", "--cluster", GOOD, "--lake", lake, "--topic", "payments"]) == 0
    assert "payments" in capsys.readouterr().out
    # an unknown but well-formed name is the lake's answer, not the rule's
    assert cli.main(["audit", "--cluster", "other", "--lake", lake]) == 2
    _one_line(capsys.readouterr().err, "audit", "unknown cluster 'other'", GOOD)
