"""codec/placed.py (fields decoded straight into file order) against the way it replaces: each group's column
made by the compiled decoder (flat._column), then placed (bronze._Placement) -- on every real log, a simulated
one, generated bodies of every partition-record version (tagged ELR lists, directories, nulls) and with the
JIT off."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from controller_core.codec import bronze, flat, logfile, placed
from controller_core.codec.logfile import iter_chunks
from controller_core.codec.message import encode_body
from controller_core.records import BY_TYPE_NAME
from controller_core.replay import TYPED_ONLY
from realdata_facts import REALDATA, readme_table

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_flat as flat_tests  # noqa: E402  (its generated partition records of every version)
import test_scatter as scatter_tests  # noqa: E402  (the Arrow placement: concatenate, then take)
REAL_FILES = sorted(REALDATA / rel for rel in readme_table())
SMALL = REALDATA / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log"


def _every_group_compiled(monkeypatch) -> None:
    monkeypatch.setattr(logfile, "COMPILED_MIN_RECORDS", 1)
    monkeypatch.setattr(logfile, "_use_compiled", lambda size: True)


def _tables(path, monkeypatch, without) -> list[tuple[pa.Table, pa.Table]]:
    """(placed straight, placed from the groups' columns) bronze rows of each chunk of ``path``."""
    _every_group_compiled(monkeypatch)
    out = []
    for chunk in iter_chunks(str(path)):
        if not len(chunk):
            continue
        got = bronze.records_table(chunk, "c", "f", "segment", without)
        with monkeypatch.context() as m:
            m.setattr(bronze, "_located", lambda cols: False)
            want = bronze.records_table(chunk, "c", "f", "segment", without)
        out.append((got, want))
    return out


def _assert_equal(pairs, where) -> int:
    n = 0
    for got, want in pairs:
        assert got.schema == want.schema
        for name in want.column_names:
            assert got.column(name).equals(want.column(name)), (where, name)
        n += got.num_rows
    return n


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: str(p.relative_to(REALDATA)))
def test_placed_columns_equal_the_group_columns_placed_on_every_real_file(path, monkeypatch):
    placed_calls = []
    place = placed.place

    def counting(held, n, typ):
        out = place(held, n, typ)
        placed_calls.append(out is not None)
        return out

    monkeypatch.setattr(placed, "place", counting)
    assert _assert_equal(_tables(path, monkeypatch, TYPED_ONLY), path) > 0
    assert _assert_equal(_tables(path, monkeypatch, frozenset()), path) > 0
    assert any(placed_calls)  # every real log has partition records: their fields were placed here


def test_placed_columns_equal_the_group_columns_placed_on_a_simulated_log(tmp_path, monkeypatch):
    from controller_core.logdir import discover
    from simulator.fleet import simulate_fleet

    simulate_fleet(tmp_path, 1000, 6, seed=11)
    files = [lf.path for lf in discover(tmp_path) if lf.kind in ("segment", "snapshot")]
    assert sum(_assert_equal(_tables(p, monkeypatch, TYPED_ONLY), p) for p in files) > 5_000


# ------------------------------------------------------------------------------------ generated bodies
def _group(name, version, records):
    rdef = BY_TYPE_NAME[name]
    loc = flat.decode(*flat_tests._bodies([encode_body(rdef.fields, version, d) for d in records]),
                      flat.plan(rdef, version))
    assert loc is not None
    return loc


@settings(max_examples=60, deadline=None)
@given(data=st.data(), v_rec=st.sampled_from((0, 1, 2)), v_change=st.sampled_from((0, 1, 2)),
       spare=st.integers(0, 4))
def test_place_equals_the_group_columns_placed_on_generated_bodies(data, v_rec, v_change, spare):
    """A PartitionRecord group and a PartitionChangeRecord group (each version), rows interleaved with rows no
    group holds: every bronze column the two share or hold alone, placed straight, equals their columns placed."""
    recs = data.draw(st.lists(flat_tests.partition_record(v_rec), min_size=1, max_size=12))
    changes = data.draw(st.lists(flat_tests.partition_change(v_change), min_size=1, max_size=12))
    n = len(recs) + len(changes) + spare
    order = np.array(data.draw(st.permutations(range(n))), np.int64)
    rows_r, rows_c = np.sort(order[:len(recs)]), np.sort(order[len(recs):len(recs) + len(changes)])
    groups = [(rows_r, _group("PARTITION_RECORD", v_rec, recs), bronze.COLUMN_MAP["PARTITION_RECORD"]),
              (rows_c, _group("PARTITION_CHANGE_RECORD", v_change, changes), bronze.COLUMN_MAP["PARTITION_CHANGE_RECORD"])]
    checked = 0
    for f in bronze.TYPED:
        held = [(rows, loc, mapping[f.name].key) for rows, loc, mapping in groups
                if f.name in mapping and mapping[f.name].key in loc]
        if not held:
            continue
        got = placed.place(held, n, f.type)
        assert got is not None, f.name  # every partition field is one placed straight
        want = scatter_tests._arrow_way([(rows, loc[key].cast(f.type)) for rows, loc, key in held], n, f.type)
        assert got.type == want.type and got.equals(want), (f.name, got.to_pylist(), want.to_pylist())
        checked += 1
    assert checked >= 10


def test_fields_it_does_not_place_are_left_to_the_group_columns():
    loc = _group("CONFIG_RECORD", 0, [{"resourceType": 2, "resourceName": "t", "name": "k", "value": "v"}])
    assert placed.place([(np.array([0]), loc, "name")], 1, pa.string()) is None  # strings: the group column
    loc = _group("PARTITION_CHANGE_RECORD", 0, [{"partitionId": 1, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}])
    assert placed.place([(np.array([0]), loc, "partitionId")], 1, pa.int64()) is None  # a cast: Arrow's


def test_placement_runs_as_plain_python_without_the_jit(monkeypatch):
    """NUMBA_DISABLE_JIT=1: the placing loops interpreted give the compiled loops' bronze rows."""
    code = ("import json, sys; from controller_core.codec import bronze, logfile; "
            "logfile.COMPILED_MIN_RECORDS = 1; logfile._use_compiled = lambda size: True; "
            "print(json.dumps([bronze.records_table(ch, 'c', 'f', 'segment').drop_columns(['batch_timestamp', "
            "'timestamp']).to_pylist() for ch in logfile.iter_chunks(sys.argv[1]) if len(ch)]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code, str(SMALL)], capture_output=True, text=True, env=env,
                         check=True, timeout=300)
    _every_group_compiled(monkeypatch)
    compiled = [bronze.records_table(ch, "c", "f", "segment").drop_columns(["batch_timestamp", "timestamp"]).to_pylist()
                for ch in iter_chunks(str(SMALL)) if len(ch)]
    assert json.loads(res.stdout) == json.loads(json.dumps(compiled))
    assert any(r["topic_id"] and r["replicas"] for t in compiled for r in t)
