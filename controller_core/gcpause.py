"""Pausing Python's cyclic garbage collector while a command builds many Python objects at once.

Turning a 100 k-partition state into ``Partition`` objects allocates about a million lists; every so many
allocations the collector runs, and its full collections walk every object alive, the ones just made
included -- a quarter of a second of one 0.25 s column conversion was collection, none of it finding garbage
(these objects hold no cycles).  Reference counting still frees everything; the collector resumes, where it
was, at the end of the block.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
