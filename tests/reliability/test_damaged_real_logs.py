"""Every ``--log-dir`` command on real logs with part of them damaged: it runs on what could be read.

Each real cluster's metadata log (``realdata_facts.CLUSTERS``) is copied three times and damaged as a failing disk or
a crash damages it: one byte flipped in a batch half-way through the first segment (that batch no longer verifies
and is quarantined), one in the batch holding the first TopicRecord (its topic is then known by its id only), and
the last segment cut half-way through a batch (a torn tail).  On each copy ``verify``, ``describe`` (at the end and at
an offset in the middle), ``audit``, ``plan``, ``report`` and ``timeline`` keep the exit-code contract: 0 or 1 with
the damage named on stderr (file and byte), the report and the plan written, and never a traceback; ``timeline`` of
a broker the history lacks is exit 2 with one line.  (Random damage of the same logs found ``report`` exiting 2 where
an incident named a topic whose TopicRecord was quarantined -- the "topic" copies of four of the five logs fail on
that code; this keeps the deterministic half of that search in the suite.)
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from jobs import cli
from realdata_facts import CLUSTERS, REALDATA

BATCH_HEADER = 61  # bytes of a v2 record batch's header before its first record


def _batch_starts(seg) -> tuple[list[int], int | None]:
    """The byte position of every batch of a segment, from ``decode``'s record positions, and that of the first
    batch holding a TopicRecord (None: none)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["decode", str(seg)]) == 0
    starts, topic = {}, None
    for line in out.getvalue().splitlines():
        r = json.loads(line)
        at = starts.setdefault(r["batchBaseOffset"], r["position"] - BATCH_HEADER)
        if topic is None and r["type"] == "TOPIC_RECORD":
            topic = at
    return sorted(starts.values()), topic


def _damaged(tmp_path, name: str, how: str):
    src = REALDATA / CLUSTERS[name] / "__cluster_metadata-0"
    log = tmp_path / name / how / "__cluster_metadata-0"
    shutil.copytree(src, log, copy_function=shutil.copyfile)
    for p in (log.parent, log):
        p.chmod(0o755)  # the shared copy is read-only
    segs = sorted(log.glob("*.log"))
    seg = segs[-1] if how == "torn" else segs[0]
    starts, topic = _batch_starts(seg)
    assert len(starts) > 4 and (topic is not None or how != "topic")
    raw = bytearray(seg.read_bytes())
    mid = starts[len(starts) // 2]
    if how != "torn":  # inside the batch's first record: its CRC32C no longer matches
        raw[(mid if how == "flipped" else topic) + BATCH_HEADER + 3] ^= 0x40
    else:
        raw = raw[:mid + BATCH_HEADER + 5]  # the batch's header whole, its records cut
    seg.chmod(0o644)
    seg.write_bytes(bytes(raw))
    return log


@pytest.fixture(scope="module", params=[(n, h) for n in sorted(CLUSTERS) for h in ("flipped", "topic", "torn")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def damaged(request, tmp_path_factory):
    return _damaged(tmp_path_factory.mktemp("damaged"), *request.param)


def _run(capsys, *argv) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    said = capsys.readouterr()
    return code, [x for x in said.err.splitlines() if x.strip()], said.out


def test_every_command_runs_on_what_could_be_read(damaged, capsys, tmp_path):
    d = str(damaged)
    code, err, out = _run(capsys, "verify", "--log-dir", d, "--json")
    assert code == 1, err  # a quarantined byte is a finding (README's exit codes)
    records = json.loads(out)["records"]
    assert records > 0
    report, plan = tmp_path / "report.html", tmp_path / "plan"
    for argv in (["describe"], ["describe", "--at-offset", str(records // 2)], ["audit"], ["audit", "--json"],
                 ["plan", "--election-type", "preferred", "-o", str(plan)], ["report", "-o", str(report)]):
        code, err, out = _run(capsys, argv[0], "--log-dir", d, *argv[1:])
        assert code in (0, 1), (argv, err)
        assert not any("Traceback" in x for x in err), (argv, err)
        assert any("the log is damaged" in x and "__cluster_metadata-0/" in x and "at byte" in x for x in err), \
            (argv, err)
    assert report.stat().st_size > 0 and (plan / "plan-manifest.json").is_file()
    code, err, _ = _run(capsys, "timeline", "--log-dir", d, "--broker", "987654")
    assert code == 2 and [x for x in err if "warning:" not in x] == [
        "kraft-audit timeline: broker 987654 is not in the history read (--broker)"]
