"""Every input a fuzz run ever flagged (tests/reliability/corpus/, named ``s<seed>-<input>-<what>``: the
run's seed and input number; ``fuzz.mutate.make_input(load_corpus(), S, I)`` regenerates it) goes
through every decode path (``.bin``) or ``read_log_info`` (``.json``) without an exception, within a
bounded CPU time.  See README "Bad input" for the fuzz run itself."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from fuzz import targets

CORPUS = Path(__file__).resolve().parent / "corpus"
FILES = sorted(p for p in CORPUS.iterdir() if p.suffix in (".bin", ".json"))
# inputs whose records once depended on the size of the read window: every path must now agree
SAME_ON_EVERY_PATH = {"s99-367-window-size-offsets.bin", "s99-1475-window-size-offsets.bin",
                      # a value shorter than its own framing varints (an undeclared apiKey's group once read a
                      # negative length): the records around it survive on every path alike
                      "s21-287-framing-past-value.bin", "s21-2555-framing-past-value.bin",
                      "s22-30316-framing-past-value.bin"}


def test_the_corpus_is_there():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_input_decodes(tmp_path, path):
    data = path.read_bytes()
    t0 = time.process_time()
    if path.suffix == ".json":
        assert targets.read_log_info_bytes(data, tmp_path) >= 1  # a row or a quarantine row, never a raise
    else:
        found = targets.decode_bytes(data, tmp_path)
        if path.name in SAME_ON_EVERY_PATH:
            assert len({v for k, v in found.items() if k != "walk_regular"}) == 1, found
    assert time.process_time() - t0 < 5.0


def test_the_mutator_makes_every_input_it_ever_failed_on():
    """Input 146082 of seed 32 once stopped a fuzz run in the harness itself: a baseOffset edit past int64."""
    from fuzz import mutate

    corpus = mutate.load_corpus()
    for seed, i in ((32, 146082),):
        data = mutate.make_input(corpus, seed, i)
        assert isinstance(data, bytes) and data == mutate.make_input(corpus, seed, i)  # reproducible
