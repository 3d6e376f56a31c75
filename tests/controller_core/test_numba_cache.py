"""controller_core/numba_cache.py: a kernel imported from the shipped zip (``kraft_audit.zip``, which Spark puts
under a new folder for every application) is compiled once and loaded from numba's cache by the next job,
wherever its zip lies; a changed kernel is compiled again.  Each run is a fresh interpreter, as an executor's
Python worker is."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "from numba import njit\n\n\n@njit(cache=True)\ndef bump(x):\n    return x + {n}\n"
PROBE = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
         "import controller_core.numba_cache; import shipped_kernel as k; r = k.bump(1); "
         "print(json.dumps([r, sum(k.bump.stats.cache_hits.values()), sum(k.bump.stats.cache_misses.values())]))")


def _zip(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / "kraft_audit.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("shipped_kernel.py", KERNEL.format(n=n))
    return archive


def _run(archive: Path, cache_home: Path) -> list:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["XDG_CACHE_HOME"] = str(cache_home)
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), str(archive)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_shipped_kernel_compiles_once_across_applications(tmp_path):
    cache = tmp_path / "cache"
    first = _run(_zip(tmp_path / "app-1" / "userFiles-a", 1), cache)
    second = _run(_zip(tmp_path / "app-2" / "userFiles-b", 1), cache)  # the same code, another folder
    assert first == [2, 0, 1]  # compiled (a miss), then written to the cache
    assert second == [2, 1, 0]  # loaded from it
    changed = _run(_zip(tmp_path / "app-3" / "userFiles-c", 5), cache)  # another version of the kernel
    assert changed == [6, 0, 1]
