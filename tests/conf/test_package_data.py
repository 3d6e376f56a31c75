"""conf/ ships with the code: an install made from the project (no checkout on the path) finds the
config defaults and the built-in scenarios as package data of the ``conf`` package.

The install is setuptools' ``build_py`` -- the step of a wheel build that lays out the packages and
their package data, driven by pyproject.toml's ``packages.find`` / ``package-data`` -- into a folder
that then is the only project code on PYTHONPATH.  (A full ``pip wheel`` needs the ``wheel`` package,
which this offline virtualenv does not have.)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controller_core", "audit", "lake", "jobs", "transforms", "simulator", "conf")

PROBE = """
import json, sys
from lake.config import defaults_source, load_config
from simulator.scenario import builtin_names, load
config, scenario = load_config(), load("last-replica-standing-elr-off")
files = {m: sys.modules[m].__file__ for m in ("conf", "lake.config", "simulator.scenario")}
print(json.dumps({"fail_on": config["audit"]["fail_on"], "defaults": defaults_source(), "scenario": scenario["name"],
                  "builtins": builtin_names(), "files": files}))
"""


def test_an_install_without_the_checkout_finds_defaults_and_scenarios(tmp_path):
    src, site, elsewhere = tmp_path / "src", tmp_path / "site", tmp_path / "elsewhere"
    for name in PACKAGES:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                            "--build-lib", str(site)], cwd=src, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed copy only, not the checkout
    env.pop("KRAFT_AUDIT_LAKE", None)

    res = subprocess.run([sys.executable, "-c", PROBE], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert all(Path(f).is_relative_to(site) for f in got["files"].values()), got["files"]
    assert Path(got["defaults"]) == site / "conf" / "defaults.yaml" and got["fail_on"] == "ERROR"
    assert got["scenario"] == "last-replica-standing-elr-off"
    shipped = sorted(p.stem for p in (ROOT / "conf" / "scenarios").glob("*.yaml"))
    assert got["builtins"] == shipped and len(shipped) >= 7

    res = subprocess.run([sys.executable, "-m", "jobs.cli", "simulate", "--list"], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=120)
    assert (res.returncode, [line.split()[0] for line in res.stdout.splitlines()]) == (0, shipped), res.stderr
