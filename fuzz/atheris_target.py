"""Coverage-guided fuzz target (atheris, libFuzzer's engine for Python) over the same decode paths as
``fuzz/run.py``:

    pip install atheris   # not a pinned dependency
    PYTHONPATH=$PWD nice -n 19 .venv/bin/python fuzz/atheris_target.py -runs=100000 -timeout=10 \
        -rss_limit_mb=4096 -artifact_prefix=fuzz-out/

The first byte of an input chooses what the rest is: the raw bytes of a segment (1/4 of the inputs), a
GetReplicaLogInfo JSON document (1/8), or the seed of a structured mutation of a real batch run
(``fuzz/mutate.py``: length and offset edits, CRC-fixed crafted batches), so that coverage feedback
also steers inputs that get past the CRC check.  The compiled (numba) parts are not instrumented:
libFuzzer sees the coverage of the Python around them.  A crash or timeout is written by libFuzzer as
``<artifact_prefix>crash-*`` / ``timeout-*``: copy it to tests/reliability/corpus/ (``.bin``; a JSON one as ``.json``).
"""
from __future__ import annotations

import random
import sys
import tempfile

import atheris

# numba compiles the bytecode of codec/walk.py and the kernels: instrumented bytecode does not compile,
# so they are imported first, uninstrumented
import controller_core.codec.walk  # noqa: E402,F401

with atheris.instrument_imports(include=["controller_core", "audit", "fuzz"], exclude=["controller_core.codec.walk"]):
    from fuzz import mutate, targets

CORPUS = mutate.load_corpus()
WORK = tempfile.mkdtemp(prefix="atheris-")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    kind, rest = data[0], data[1:]
    if kind < 64:
        targets.decode_bytes(rest, WORK)
    elif kind < 96:
        targets.read_log_info_bytes(rest, WORK)
    else:
        rng = random.Random(rest)
        buf = bytearray(mutate.seed_slice(rng, CORPUS))
        for _ in range(1 + (kind & 3)):
            buf = mutate.mutate_once(rng, buf, CORPUS)
        targets.decode_bytes(bytes(buf), WORK)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
