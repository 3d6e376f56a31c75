"""numba's on-disk cache for the compiled kernels when they are imported from the zip the driver ships.

On a Spark cluster the executors import this project from ``kraft_audit.zip`` (``lake.spark.ship_code``),
which Spark stores under a folder named anew for every application.  numba caches functions of zipped
modules (its ``ZipCacheLocator``) under a path derived from the zip's location, so every job found an empty
cache and compiled every kernel again in every executor: about 50 s per executor for ``replay`` at 20 k
partitions on a two-worker standalone cluster (70 s against 20 s on local[2]).

:class:`ShippedZipLocator` keys that cache on the module's path inside the zip instead; numba still checks
each entry against the source's own hash (its source stamp), so a changed kernel is compiled again and an
unchanged one is loaded, whatever job shipped it.  Every module defining ``cache=True`` functions imports
this module first (``install`` is idempotent).  It relies on numba's cache-locator classes, which the pinned
numba (0.68.1) has; anything else leaves numba's own locators in charge.
"""
from __future__ import annotations

import os
from pathlib import PurePosixPath

SHIPPED_ZIP = "kraft_audit.zip"  # lake.spark.code_zip's file name


def read_only(a):
    """A NumPy array as a read-only view (itself if it is one).  numba compiles, and caches, one machine function
    per combination of its arguments' array flags, and Arrow's buffers arrive read-only while arrays made in
    Python are not: a kernel handed every input read-only keeps one signature, the one its ``warm`` put on disk."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _locator_class():
    from numba.core import caching

    class ShippedZipLocator(caching.ZipCacheLocator):
        """numba's zip locator with a cache folder named after the module's path inside the shipped zip."""

        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            inside = PurePosixPath(self._internal_path).parent.as_posix().replace("/", "-")
            self._cache_path = os.path.join(os.path.dirname(self._cache_path), f"kraft-audit-shipped-{inside}")

        @classmethod
        def from_function(cls, py_func, py_file):
            if SHIPPED_ZIP not in py_file:
                return None
            return cls(py_func, py_file)

    return caching, ShippedZipLocator


def install() -> bool:
    """Put :class:`ShippedZipLocator` first among numba's cache locators (once); False when numba has no such
    classes (another numba version)."""
    try:
        caching, locator = _locator_class()
        classes = caching.CacheImpl._locator_classes
    except (ImportError, AttributeError):
        return False
    if not any(getattr(c, "__name__", "") == locator.__name__ for c in classes):
        classes.insert(0, locator)
    return True


def skip_blas_probe() -> None:
    """Load numba's NumPy typing without its BLAS probe.  ``numba.np.arraymath`` imports
    ``scipy.linalg.cython_blas`` when it is first loaded (to know whether ``np.dot`` can compile), which
    brings in SciPy: about 0.19 s of every command's start-up on a 2.5 GHz core, for functions no kernel
    here uses.  SciPy is made unimportable for that one import only; later imports of SciPy (Great
    Expectations') are untouched."""
    import sys
    if "numba.np.arraymath" in sys.modules or "scipy.linalg.cython_blas" in sys.modules:
        return
    sentinel = "scipy.linalg.cython_blas"
    sys.modules[sentinel] = None  # an import of a None entry raises ImportError: numba's probe says "no BLAS"
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if sys.modules.get(sentinel, 0) is None:
            del sys.modules[sentinel]


skip_blas_probe()
install()
