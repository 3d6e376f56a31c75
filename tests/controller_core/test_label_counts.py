"""``Replay.trigger_counts`` (pipeline._label_counts): how often each trigger label was given, counted by dictionary
code on the replay's own labels and by value on plain strings -- the same counts as a count of the label strings,
a dictionary naming one label twice summed, labels ending in "?" (two events could explain the record) and nulls
left out; and on a replayed log, the counts of the history's own trigger column."""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from controller_core import pipeline
from controller_core.replay import read_log_dir

DATA = Path(__file__).resolve().parents[2] / "data"


def _expected(names) -> dict:
    return dict(Counter(n for n in names if n is not None and not n.endswith("?")))


@pytest.mark.parametrize("seed", range(4))
def test_counts_by_code_equal_counts_by_string(seed):
    rng = random.Random(seed)
    dictionary = ["alter_partition", "fence(1)", "fence(1)", "unfence(2)", "?", "fence?", "preferred_election"]
    codes = [None if rng.random() < 0.05 else rng.randrange(len(dictionary)) for _ in range(rng.randrange(0, 3000))]
    names = [None if c is None else dictionary[c] for c in codes]
    encoded = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(dictionary))
    expected = _expected(names)
    assert pipeline._label_counts(encoded) == expected
    assert pipeline._label_counts(pa.chunked_array([encoded[:7], encoded[7:]])) == expected
    assert pipeline._label_counts(pa.array(names, pa.string())) == expected


def test_a_replays_counts_are_its_labels():
    records, _ = read_log_dir(DATA / "default-cluster", partition_json=False)
    rep = pipeline.run(records)
    labels = rep.history.column("trigger").cast(pa.string()).to_pylist()
    assert rep.trigger_counts == _expected(labels)
    assert sum(rep.trigger_counts.values()) > 0
