"""The window findings' explanations and brokers, built a column at a time (``violations._window_texts``), are
exactly what the readable reference says one window at a time (``_window_texts_reference`` through
``_window_text``): on simulated clusters with every partition window code, open and closed windows, windows
across metadata gaps and cluster outages (the duration texts' clauses), leaderless partitions with and without
a previous leader, and partitions whose lists are null."""
from __future__ import annotations

import pyarrow as pa
import pytest

from audit import frames as F
from audit import local
from audit import violations as V
from jobs import cli
from lake import catalog
from lake.config import load_config
from tests.log_builder import Log

SCENARIOS = ["unclean-election", "last-replica-standing-elr-on", "long-under-min-isr", "metadata-gap",
             "cluster-restart", "az-outage", "no-candidate"]

def _no_candidate_log(path):
    """A partition left with no leader, no ISR and no ELR (OFFLINE_NO_CANDIDATE), later led again."""
    log = Log(25, elr=True, brokers=(0, 1))
    log.add(log.config("min.insync.replicas", "1"))
    log.create("solo", [0])
    log.create("duo", [0, 1])
    log.add(log.change("solo", 0, leader=-1, isr=[], elr=[0], lke=[0]), log.fence(0))
    log.add(log.change("solo", 0, elr=[]), log.change("duo", 0, leader=1, isr=[1]), log.register(0))
    log.add(log.change("solo", 0, leader=0, isr=[0], lrs=1))
    return log.write(path)


def _windows(ctx, code, pred):
    starts, ends = F.runs(pred, ctx.h.new_group)
    close = ctx.h.next[ends]
    cols = V._window_times(ctx, starts, close, code in V.LONG_WINDOW_CODES, ctx.severities[code], code=code)
    return starts, close, ctx.h.prev[starts], cols


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    out = {}
    for scenario in SCENARIOS:
        d = tmp_path_factory.mktemp(scenario)
        if scenario == "no-candidate":
            _no_candidate_log(d / "d")
        else:
            assert cli.main(["simulate", scenario, "-o", str(d / "d")]) == 0
        tables = local.silver_tables(d / "d")
        end = tables["log_end"].to_pylist()[0]
        out[scenario] = (tables, end)
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_window_texts_equal_the_reference(contexts, scenario):
    tables, end = contexts[scenario]
    ctx = V._context(tables, load_config(), end["end_offset"], end["end_timestamp"])
    seen = set()
    for code, pred in V.window_predicates(ctx).items():
        starts, close, prev, cols = _windows(ctx, code, pred)
        if not len(starts):
            continue
        seen.add(code)
        brokers, texts = V._window_texts(ctx, code, starts, close, prev, cols)
        want_brokers, want_texts = V._window_texts_reference(ctx, code, starts, close, prev, cols)
        assert texts.to_pylist() == want_texts, code
        assert brokers.to_pylist() == want_brokers, code
    assert seen  # every scenario here has windows


def test_every_code_and_clause_is_reached(contexts):
    """The scenarios above reach each window code, open and closed windows, and the duration clauses."""
    codes, text = set(), []
    for tables, end in contexts.values():
        ctx = V._context(tables, load_config(), end["end_offset"], end["end_timestamp"])
        for code, pred in V.window_predicates(ctx).items():
            starts, close, prev, cols = _windows(ctx, code, pred)
            if len(starts):
                codes.add(code)
                text += V._window_texts(ctx, code, starts, close, prev, cols)[1].to_pylist()
    assert {V.UNDER_MIN_ISR, V.AT_MIN_ISR, V.OFFLINE, V.OFFLINE_NO_CANDIDATE} <= codes
    assert any("still open at the end of the log" in t for t in text)
    assert any("until offset" in t for t in text)
    assert any("in which no controller wrote the log" in t for t in text)
    assert any("across a cluster-wide outage" in t for t in text)
    assert any("stopped leading it" in t for t in text)


def test_null_lists_read_as_empty(contexts):
    """A history whose ELR and LastKnownElr are null (a log before ELR existed) says [] like the reference."""
    tables, end = contexts["unclean-election"]
    tables = dict(tables)
    name = catalog.PARTITION_STATE_HISTORY.name
    hist = tables[name]
    for col in ("eligible_leader_replicas", "last_known_elr"):
        i = hist.schema.get_field_index(col)
        hist = hist.set_column(i, col, pa.nulls(hist.num_rows, hist.schema.field(col).type))
    tables[name] = hist
    ctx = V._context(tables, load_config(), end["end_offset"], end["end_timestamp"])
    for code, pred in V.window_predicates(ctx).items():
        starts, close, prev, cols = _windows(ctx, code, pred)
        if len(starts):
            got = V._window_texts(ctx, code, starts, close, prev, cols)
            want = V._window_texts_reference(ctx, code, starts, close, prev, cols)
            assert (got[0].to_pylist(), got[1].to_pylist()) == want
