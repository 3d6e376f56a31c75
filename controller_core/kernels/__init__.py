"""The compiled passes (numba, cached on disk): see ARCHITECTURE.md."""
from __future__ import annotations


def warm() -> None:
    """Compile every kernel (or load it from numba's cache) on a tiny input, so that the first command a user
    runs does not pay the compilation (``scripts/bootstrap.sh`` calls this after installing).  The inputs
    have the types of a real run: the signatures compiled here are the ones used later."""
    import numpy as np

    from controller_core.codec import walk
    from controller_core.codec.batch import encode_batch
    from controller_core.kernels import fold_pass, invariants, recompute_pass

    invariants.warm()
    fold_pass.warm()
    recompute_pass.warm()
    segment = encode_batch(0, [("NO_OP_RECORD", 0, {})])
    walk.walk(segment, records=True)
    walk.SummaryWalk()(np.frombuffer(segment, np.uint8), True, None)
