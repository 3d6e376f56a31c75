"""The layout's record kinds (kernels/layout.py): read from the type numbers bronze carries (record_type_id,
is_control), equal to reading them from the type names -- which a lake written before record_type_id existed
still takes -- on every real cluster's log and a simulated one."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from controller_core.kernels import layout
from controller_core.replay import read_log_dir
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load


def _by_name(records: pa.Table) -> np.ndarray:
    return np.array([layout.KINDS.get(t, layout.OTHER) for t in records.column("record_type").to_pylist()], np.int8)


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_kinds_from_type_numbers_equal_the_names_on_real_logs(folder):
    records, _ = read_log_dir(REALDATA / folder)
    kinds = layout._kinds(records)
    assert (kinds == _by_name(records)).all()
    assert (kinds == layout.CHANGE).any() or (kinds == layout.PARTITION).any()


def test_a_lake_without_type_numbers_and_numbers_no_kind_has(tmp_path):
    simulate(load("fleet-large", params={"partitions": 200, "events": 4}), tmp_path, seed=2)
    records, _ = read_log_dir(tmp_path)
    want = _by_name(records)
    assert len(set(want.tolist())) >= 6  # topics, partitions, changes, brokers, features, LeaderChange
    assert (layout._kinds(records) == want).all()
    # a lake written before bronze had record_type_id: the column is null, the names decide
    at = records.schema.get_field_index("record_type_id")
    older = records.set_column(at, "record_type_id", pa.nulls(records.num_rows, pa.int32()))
    assert (layout._kinds(older) == want).all()
    # an apiKey or control type this build does not declare (UNKNOWN_RECORD), however large or negative: OTHER
    odd = np.asarray(records.column("record_type_id").to_numpy(zero_copy_only=False), np.int32).copy()
    odd[:3] = (-7, 30_000, 2 ** 31 - 1)
    names = records.column("record_type").to_pylist()
    names[:3] = ["UNKNOWN_RECORD"] * 3
    unknown = (records.set_column(at, "record_type_id", pa.array(odd, pa.int32()))
               .set_column(records.schema.get_field_index("record_type"), "record_type", pa.array(names)))
    got = layout._kinds(unknown)
    assert (got[:3] == layout.OTHER).all() and (got[3:] == want[3:]).all()
