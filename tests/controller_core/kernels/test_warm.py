"""``kernels.warm`` (run by scripts/bootstrap.sh on the embedded default scenario) leaves nothing to compile for
the loops of a large log: replaying another log afterwards, with the int64 layout of a log past 2^31 list
entries and the decoder's compiled loops taken from the first record, compiles no new specialization."""
from __future__ import annotations

import sys
from pathlib import Path

from numba.core.registry import CPUDispatcher

from controller_core import pipeline
from controller_core.codec import bronze, logfile
from controller_core.kernels import layout, warm
from controller_core.replay import read_log_dir

DATA = Path(__file__).resolve().parents[3] / "data"


def _compiled() -> dict[str, int]:
    """Every loaded kernel of the project: {qualified name: entry points compiled or loaded from the cache}."""
    out = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("controller_core"):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, CPUDispatcher):
                out[f"{value.py_func.__module__}.{value.py_func.__qualname__}"] = len(value.signatures)
    return out


def test_after_warm_a_wide_replay_of_another_log_compiles_nothing(monkeypatch):
    bounds = (logfile.COMPILED_MIN_RECORDS, bronze.COMPILED_MIN_RECORDS, layout.POSITIONS_32)
    warm(DATA / "default-cluster")
    assert (logfile.COMPILED_MIN_RECORDS, bronze.COMPILED_MIN_RECORDS, layout.POSITIONS_32) == bounds  # restored
    before = _compiled()
    # (helpers called only from other kernels are compiled into them: no entry point of their own)
    assert sum(before.values()) > 0
    monkeypatch.setattr(logfile, "COMPILED_MIN_RECORDS", 0)
    monkeypatch.setattr(bronze, "COMPILED_MIN_RECORDS", 0)
    monkeypatch.setattr(logfile, "_use_compiled", lambda file_size: True)
    monkeypatch.setattr(layout, "POSITIONS_32", 0)
    other = DATA / "last-replica-standing-elr-off"
    records, _ = read_log_dir(other, partition_json=False)
    assert layout.build(records).lists.dtype == "int64"
    replayed = pipeline.run(records)
    assert replayed.history.num_rows > 0
    from controller_core.codec.jsonwrite import chunk_lines  # kraft-audit decode's lines of a large log

    segment = sorted(other.rglob("*.log"))[0]
    assert sum(len(s) for c in logfile.iter_chunks(str(segment)) for s in chunk_lines(c, '"x"')) > 0
    assert _compiled() == before
