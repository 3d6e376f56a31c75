"""The compiled record framing (codec/framing.py) against the NumPy framing of codec/logfile.py.

Both must give the same arrays for every record -- also for damaged records, whose offsetDelta and lengths
the quarantine messages quote: checked on every real log, on a simulated log, on records whose bytes are
overwritten at random (a valid CRC does not make a record sane), and with the JIT off.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller_core.codec import batch as B
from controller_core.codec import framing, logfile, walk
from controller_core.codec import vector as V
from realdata_facts import REALDATA, readme_table

ROOT = Path(__file__).resolve().parents[3]
REAL_FILES = sorted(REALDATA / rel for rel in readme_table())
SMALL = REALDATA / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log"


def _records(raw: bytes):
    """(padded bytes, record body starts, ends, batch index, batch positions, control flags) of an intact log."""
    a = V.padded(raw)
    w = walk.walk(raw, records=True)
    bpos = np.asarray(w.batch_rows[:, walk.B_POS], np.int64)
    bad: list = []
    rpos, body, rend, rbatch, kept = logfile._record_positions(raw, a, bpos.tolist(), "f", 0, bad, True)
    assert bad == []
    _, _, _, b_ctl = logfile._batch_headers(a, kept)
    return a, body, rend, rbatch, kept, b_ctl[rbatch]


def _both(a, body, rend, rbatch, bpos, ctl):
    r = logfile._record_framing(a, body, rend)
    code, version, bstart, unframed = logfile._message_framing(a, ctl, r)
    outside = logfile._outside_batch(a, bpos, rbatch, r)
    want = [r.ts_delta, r.off_delta, r.kpos, r.klen, r.vpos, r.vlen, r.scalar, code, version, bstart, unframed,
            outside]
    g, gcode, gversion, gbstart, gunframed, goutside = logfile._compiled_framing(a, body, rend, rbatch, bpos, ctl)
    got = [g.ts_delta, g.off_delta, g.kpos, g.klen, g.vpos, g.vlen, g.scalar, gcode, gversion, gbstart, gunframed,
           goutside]
    names = ["ts_delta", "off_delta", "kpos", "klen", "vpos", "vlen", "scalar", "code", "version", "bstart",
             "unframed", "outside"]
    for name, x, y in zip(names, got, want):
        assert np.array_equal(np.asarray(x, np.int64), np.asarray(y, np.int64)), name
    return got


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: str(p.relative_to(REALDATA)))
def test_compiled_framing_equals_the_numpy_framing_on_every_real_file(path):
    got = _both(*_records(path.read_bytes()))
    assert len(got[0]) > 0 and not np.asarray(got[6]).any()  # real records: all framed plainly


def test_compiled_framing_equals_the_numpy_framing_on_a_simulated_log(tmp_path):
    from controller_core.logdir import discover
    from simulator.fleet import simulate_fleet

    simulate_fleet(tmp_path, 1000, 6, seed=5)
    for lf in discover(tmp_path):
        if lf.kind in ("segment", "snapshot"):
            _both(*_records(lf.path.read_bytes()))


@pytest.mark.parametrize("seed", range(12))
def test_compiled_framing_equals_the_numpy_framing_on_overwritten_records(seed):
    """Random bytes written over records (after the CRC was checked, as a crafted batch would carry them):
    varints running long, lengths past the record, negative deltas, headers, wrong frame versions."""
    rng = random.Random(seed)
    raw = REAL_FILES[seed % len(REAL_FILES)].read_bytes()
    a, body, rend, rbatch, bpos, ctl = _records(raw)
    a = a.copy()
    for _ in range(max(8, len(body) // 4)):
        i = rng.randrange(len(body))
        start = int(body[i])
        for k in range(rng.randint(1, 12)):
            if start + k < int(rend[i]):
                a[start + k] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, rng.randrange(256)])
    got = _both(a, body, rend, rbatch, bpos, ctl)
    assert np.asarray(got[6]).any() or np.asarray(got[10]).any() or np.asarray(got[11]).any()


def test_frame_version_is_the_codecs():
    assert framing.METADATA_FRAME_VERSION == B.METADATA_FRAME_VERSION == 1


def test_compiled_framing_runs_as_plain_python_without_the_jit():
    code = ("import json, sys; from controller_core.codec import logfile; "
            "logfile._use_compiled = lambda size: True; logfile.COMPILED_MIN_RECORDS = 1; "
            "chunks = list(logfile.iter_chunks(sys.argv[1])); "
            "print(json.dumps([[c.offset.tolist(), c.timestamp.tolist(), c.type_code.tolist(), c.version.tolist()] "
            "for c in chunks]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code, str(SMALL)], capture_output=True, text=True, env=env,
                         check=True, timeout=300)
    want = [[c.offset.tolist(), c.timestamp.tolist(), c.type_code.tolist(), c.version.tolist()]
            for c in logfile.iter_chunks(str(SMALL))]
    assert json.loads(res.stdout) == want
