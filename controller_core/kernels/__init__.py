"""The compiled passes (numba, cached on disk): see ARCHITECTURE.md."""
from __future__ import annotations

from pathlib import Path


def warm(sample: str | Path | None = None) -> None:
    """Compile every kernel (or load it from numba's cache) on a tiny input, so that the first command a user
    runs does not pay the compilation (``scripts/bootstrap.sh`` calls this after installing).  The inputs
    have the types of a real run: the signatures compiled here are the ones used later.  ``sample``: a log
    directory (the repository's embedded default scenario) replayed through every compiled path: see
    :func:`_warm_on`."""
    import numpy as np

    from controller_core.codec import nullfill, walk
    from controller_core.codec.batch import encode_batch
    from controller_core.kernels import (context, dating, fold_pass, invariants, judge_pass, lookup, recompute_pass,
                                        strcodes)

    invariants.warm()
    fold_pass.warm()
    recompute_pass.warm()
    judge_pass.warm()
    context.warm()
    dating.warm()
    lookup.warm()
    nullfill.warm()
    strcodes.warm()
    segment = encode_batch(0, [("NO_OP_RECORD", 0, {})])
    walk.walk(segment, records=True)
    walk.SummaryWalk()(np.frombuffer(segment, np.uint8), True, None)
    if sample is not None:
        _warm_on(Path(sample))


def _warm_on(log_dir: Path) -> None:
    """The loops a large log takes, compiled on a small one: the decoder's framing, flat bodies, column
    placement and JSON writers (bronze's data_json, decode's lines) run from ``logfile.COMPILED_MIN_RECORDS``
    records (lowered to 0 for this call), the copies' header walk, and every kernel a second time with the
    tape's list positions in int64 (``layout.POSITIONS_32`` lowered: the layout of a log past 2^31 list
    entries).  Otherwise the first replay of a huge log, or the first decode of a large one, compiles them
    (about a minute here)."""
    from controller_core import copies, pipeline
    from controller_core.codec import bronze, jsonwrite, logfile
    from controller_core.kernels import layout
    from controller_core.replay import read_log_dir

    saved = (logfile.COMPILED_MIN_RECORDS, bronze.COMPILED_MIN_RECORDS, logfile._use_compiled, layout.POSITIONS_32)
    logfile.COMPILED_MIN_RECORDS = bronze.COMPILED_MIN_RECORDS = 0
    logfile._use_compiled = lambda file_size: True
    try:
        full, _ = read_log_dir(log_dir)  # every record's data_json
        lean, _ = read_log_dir(log_dir, partition_json=False)  # what a replay reads
        jsonwrite.record_lines(full, '"warm"')
        for segment in sorted(log_dir.rglob("*.log"))[:1]:  # decode's lines straight from the decoder
            for chunk in logfile.iter_chunks(str(segment)):
                for _ in jsonwrite.chunk_lines(chunk, '"warm"') or ():
                    pass
        copies.read_copy(log_dir)
        for positions in (saved[3], 0):
            layout.POSITIONS_32 = positions
            pipeline.run(lean)
            pipeline.run(lean, history=False)  # verify's: the fold and the change builder in one pass
            pipeline.run(lean, invariants=False, recompute=False)
    finally:
        logfile.COMPILED_MIN_RECORDS, bronze.COMPILED_MIN_RECORDS, logfile._use_compiled, layout.POSITIONS_32 = saved
