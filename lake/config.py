"""Settings for kraft-audit jobs.

`load_config()` returns a plain nested dict built from, lowest to highest precedence:

1. ``conf/defaults.yaml`` (ships with the checkout; it also documents every key),
2. an optional user YAML file,
3. the environment (``KRAFT_AUDIT_LAKE`` overrides ``lake``),
4. explicit ``overrides`` from the caller (e.g. CLI flags).

A plain dict (not a dataclass) keeps the YAML, the overrides and what jobs read the
same shape, and lets ``spark.conf`` stay free-form. Keys that do not exist in
defaults.yaml are rejected: a misspelt key silently falling back to its default is
exactly the kind of bug an auditor must not have.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from controller_core import codes

# Located relative to the checkout: we run from a checkout or an editable install.
DEFAULTS_PATH = Path(__file__).resolve().parent.parent / "conf" / "defaults.yaml"

LAKE_ENV = "KRAFT_AUDIT_LAKE"
BACKENDS = ("auto", "delta-spark", "delta-rs")

# Mappings whose keys are not validated against defaults.yaml (dotted paths).
_FREE_FORM = {"spark.conf"}


class ConfigError(ValueError):
    """Invalid configuration (unknown key, wrong type, bad value)."""


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict:
    """Return the effective configuration as a nested dict (a fresh copy each call)."""
    config = _read_yaml(DEFAULTS_PATH)
    _registry_defaults(config)
    if path is not None:
        _deep_merge(config, _read_yaml(Path(path)), source=str(path))
    env_lake = os.environ.get(LAKE_ENV)
    if env_lake:
        config["lake"] = env_lake
    if overrides:
        _deep_merge(config, copy.deepcopy(dict(overrides)), source="overrides")
    _validate(config)
    return config


def _registry_defaults(config: dict) -> None:
    """``audit.severities``: every finding code of the registry at its default severity.  Filled before a
    user file is merged, so the merge rejects a code the registry lacks like any unknown key, and a new
    code needs only its declaration in controller_core/codes.py."""
    if config["audit"].get("severities"):
        raise ConfigError(f"{DEFAULTS_PATH}: audit.severities must be empty: the finding codes and their "
                          "defaults come from controller_core/codes.py")
    config["audit"]["severities"] = codes.default_severities(codes.FINDING)


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    data = yaml.safe_load(text)
    if data is None:  # an empty file is a valid "change nothing"
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _deep_merge(base: dict, update: Mapping[str, Any], source: str, prefix: str = "") -> None:
    """Merge ``update`` into ``base`` in place; nested mappings merge, anything else replaces."""
    for key, value in update.items():
        dotted = f"{prefix}{key}"
        if key not in base:
            known = ", ".join(sorted(map(str, base))) or "(none)"
            raise ConfigError(f"{source}: unknown config key {dotted!r} (known here: {known})")
        if isinstance(base.get(key), dict) and dotted not in _FREE_FORM:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: {dotted!r} must be a mapping, got {value!r}")
            _deep_merge(base[key], value, source, prefix=f"{dotted}.")
        elif isinstance(base.get(key), dict):  # free-form map: merge keys, no validation
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: {dotted!r} must be a mapping, got {value!r}")
            base[key].update(value)
        else:
            base[key] = value


def _validate(config: dict) -> None:
    if not config.get("lake") or not isinstance(config["lake"], (str, os.PathLike)):
        raise ConfigError(f"'lake' must be a non-empty path, got {config.get('lake')!r}")
    config["lake"] = os.fspath(config["lake"])
    backend = config["delta"]["backend"]
    if backend not in BACKENDS:
        raise ConfigError(f"delta.backend must be one of {BACKENDS}, got {backend!r}")
    for section, key in (("ingest", "split_bytes"), ("spark", "shuffle_partitions"), ("replay", "buckets")):
        value = config[section][key]
        # bool is an int subclass: reject `split_bytes: yes`.
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{section}.{key} must be a positive integer, got {value!r}")
    # Spark confs are strings on the JVM side; YAML gives bools/ints. Normalise once here
    # (YAML `true` -> "true", not Python's "True").
    config["spark"]["conf"] = {
        str(k): (str(v).lower() if isinstance(v, bool) else str(v))
        for k, v in (config["spark"]["conf"] or {}).items()
    }
