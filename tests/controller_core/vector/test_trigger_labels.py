"""Trigger labels of partition changes (the ``trigger`` column of partition_state_history and of
``Replay.explained``): a controlled shutdown, a fence and an unclean shutdown are decided by the same
recompute (§2.2 rows "fence" / "controlled shutdown" / "unclean shutdown") but each change is labelled
with the event that caused it, as the scalar reference (rules/verify.py) names them."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from controller_core import pipeline
from jobs import cli

ROOT = Path(__file__).resolve().parents[3]


def test_rolling_restart_changes_are_controlled_shutdowns_not_fences(tmp_path, capsys):
    assert cli.main(["simulate", "rolling-restart", "-o", str(tmp_path / "rr")]) == 0
    capsys.readouterr()
    rep, _ = pipeline.from_log_dir(str(tmp_path / "rr"))
    labels = Counter(rep.explained.column("trigger").to_pylist())
    # each broker leaves the 6 ISRs of orders in controlled shutdown (RF 3: every partition has every broker)
    assert {b: labels[f"controlled_shutdown({b})"] for b in (1, 2, 3)} == {1: 6, 2: 6, 3: 6}
    assert not any(t.startswith(("fence", "unclean_shutdown")) for t in labels)


def _by_label(log_dir) -> dict[str, list[int]]:
    rep, _ = pipeline.from_log_dir(str(log_dir))
    assert rep.divergences.num_rows == 0
    out: dict[str, list[int]] = {}
    for o, t in zip(rep.explained.column("offset").to_pylist(), rep.explained.column("trigger").to_pylist()):
        out.setdefault(t, []).append(o)
    return out


def test_fence_controlled_shutdown_and_unclean_shutdown_are_told_apart(tmp_path, capsys):
    # a clean shutdown of 1, a session timeout of 2, a crash of 3 (fenced at session timeout)
    sc = yaml.safe_load((ROOT / "conf/scenarios/rolling-restart.yaml").read_text())
    sc["timeline"] = [
        {"at": 20, "event": "produce", "records": 100},
        {"at": 40, "event": "controlled_shutdown", "broker": 1},
        {"at": 60, "event": "restart", "broker": 1},
        {"at": 100, "event": "broker_session_timeout", "broker": 2, "duration_s": 20},
        {"at": 160, "event": "unclean_shutdown", "broker": 3},
        {"at": 200, "event": "restart", "broker": 3},
    ]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(sc))
    assert cli.main(["simulate", str(path), "-o", str(tmp_path / "mixed")]) == 0
    capsys.readouterr()
    got = _by_label(tmp_path / "mixed")
    assert len(got["controlled_shutdown(1)"]) == len(got["fence(2)"]) == len(got["fence(3)"]) == 6
    assert not any(t.startswith(("fence(1)", "controlled_shutdown(2)", "controlled_shutdown(3)")) for t in got)
    assert (max(got["controlled_shutdown(1)"]) < min(got["fence(2)"])
            <= max(got["fence(2)"]) < min(got["fence(3)"]))
    # the unclean-shutdown handling at re-registration (§1.6, MV 4.0-IV1, ELR on): broker 3 leaves the ELR
    assert cli.main(["simulate", "last-replica-standing-elr-on", "-o", str(tmp_path / "lrs")]) == 0
    capsys.readouterr()
    got = _by_label(tmp_path / "lrs")
    assert len(got["unclean_shutdown(3)"]) == 1 and got["fence(3)"][0] < got["unclean_shutdown(3)"][0]


def test_history_triggers_placed_by_offset_equal_the_key_join(tmp_path, capsys):
    """date_history places each change record's trigger on its history row by a sorted search on the offset
    (then checks the partition); the three-key hash join it replaced gives the same column, and is what runs
    when two triggers share an offset."""
    import pyarrow as pa
    import pyarrow.compute as pc

    assert cli.main(["simulate", "rolling-restart", "-o", str(tmp_path / "rr")]) == 0
    capsys.readouterr()
    rep, _ = pipeline.from_log_dir(str(tmp_path / "rr"))
    history = rep.history.drop_columns(["valid_from_timestamp", "valid_to_timestamp", "trigger"])
    triggers = pipeline._triggers(rep.explained, {})
    placed = pa.chunked_array([pipeline._place_triggers(history, triggers)]).combine_chunks()
    assert placed.type == pipeline.LABEL_TYPE  # the few distinct labels dictionary-encoded, as the history holds them
    placed = placed.cast(pa.string())
    joined = pa.chunked_array([pipeline._join_triggers(history, triggers)]).combine_chunks()
    assert placed.equals(joined)
    assert placed.null_count < len(placed) and pc.count(placed).as_py() == triggers.num_rows
    assert rep.history.column("trigger").combine_chunks().cast(pa.string()).equals(placed)
    # a trigger naming another partition at a row's offset is not that row's
    moved = triggers.set_column(2, "partition_id", pc.add(triggers.column("partition_id"), 1000).cast(pa.int32()))
    assert pipeline._place_triggers(history, moved).null_count == history.num_rows
    # duplicated offsets: the join decides
    twice = pa.concat_tables([triggers, moved])
    assert pa.chunked_array([pipeline._place_triggers(history, twice)]).combine_chunks().cast(pa.string()).equals(
        joined)
