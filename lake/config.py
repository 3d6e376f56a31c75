"""Settings for kraft-audit jobs.

`load_config()` returns a plain nested dict built from, lowest to highest precedence:

1. ``conf/defaults.yaml`` (package data of the ``conf`` package; it also documents every key),
2. an optional user YAML file,
3. the environment (``KRAFT_AUDIT_LAKE`` overrides ``lake``),
4. explicit ``overrides`` from the caller (e.g. CLI flags).

A plain dict (not a dataclass) keeps the YAML, the overrides and what jobs read the
same shape, and lets ``spark.conf`` stay free-form. Keys that do not exist in
defaults.yaml are rejected: a misspelt key silently falling back to its default is
exactly the kind of bug an auditor must not have.  Values are checked on load too (type
of the default, enums, positive sizes), and every message names the dotted key and the
file (or "environment" / "overrides") the value came from, as ``<key>: <what> (<source>)``.
"""

from __future__ import annotations

import copy
import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from controller_core import codes

LAKE_ENV = "KRAFT_AUDIT_LAKE"
BACKENDS = ("auto", "delta-spark", "delta-rs")
SEVERITIES = codes.SEVERITIES

# Mappings whose keys are not validated against defaults.yaml (dotted paths).
_FREE_FORM = {"spark.conf"}
# Values that must be one of a fixed set; a key ending in ".*" covers every key of that mapping.
_ENUMS: dict[str, tuple[str, ...]] = {
    "delta.backend": BACKENDS,
    "delta.spark_writes": ("executors", "driver"),
    "audit.fail_on": SEVERITIES,
    "audit.severities.*": SEVERITIES,
    "audit.recovery_strategy": ("balanced", "aggressive", "none"),
    "audit.leader_epoch_check": ("strict", "log"),
}
_POSITIVE = ("ingest.split_bytes", "spark.shuffle_partitions", "replay.buckets")
# Integers whose default is null ("derived at run time"): null or an integer.
_OPTIONAL_INTS = {"replay.buckets"}
_NON_NEGATIVE = ("audit.long_window_ms", "audit.metadata_gap_ms", "audit.min_window_ms", "audit.incident_merge_ms",
                 "audit.chunk_rows")
# Paths: a str or an os.PathLike is accepted (callers pass pathlib paths as overrides).
_PATHS = {"lake", "spark.warehouse_dir"}


class ConfigError(ValueError):
    """Invalid configuration (unknown key, wrong type, bad value, unreadable file)."""


def defaults_source() -> str:
    """Where the built-in defaults are read from (a path inside the installed ``conf`` package)."""
    return str(resources.files("conf") / "defaults.yaml")


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict:
    """Return the effective configuration as a nested dict (a fresh copy each call)."""
    defaults = _defaults()
    _registry_defaults(defaults)
    config = copy.deepcopy(defaults)
    # dotted key -> where its value came from, for messages (absent: the defaults file)
    sources: dict[str, str] = {}
    if path is not None:
        _deep_merge(config, _read_yaml(Path(path)), str(path), sources)
    env_lake = os.environ.get(LAKE_ENV)
    if env_lake:
        config["lake"] = env_lake
        sources["lake"] = f"environment {LAKE_ENV}"
    if overrides:
        _deep_merge(config, copy.deepcopy(dict(overrides)), "overrides", sources)
    _validate(config, defaults, lambda key: sources.get(key, defaults_source()))
    return config


def _registry_defaults(config: dict) -> None:
    """``audit.severities``: every finding code of the registry at its default severity.  Filled before a
    user file is merged, so the merge rejects a code the registry lacks like any unknown key, and a new
    code needs only its declaration in controller_core/codes.py."""
    if config["audit"].get("severities"):
        raise ConfigError("audit.severities must be empty: the finding codes and their defaults come from "
                          f"controller_core/codes.py ({defaults_source()})")
    config["audit"]["severities"] = codes.default_severities(codes.FINDING)


def _defaults() -> dict:
    text = resources.files("conf").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return _parse(text, defaults_source())


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found ({path})") from None
    except IsADirectoryError:
        raise ConfigError(f"config file is a directory ({path})") from None
    except (PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file cannot be read: {exc} ({path})") from None
    return _parse(text, str(path))


def _parse(text: str, source: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # the first line of PyYAML's message says what; its mark says the line and column
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"not valid YAML: {what}{at} ({source})") from None
    if data is None:  # an empty file is a valid "change nothing"
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {type(data).__name__} ({source})")
    return data


def _deep_merge(base: dict, update: Mapping[str, Any], source: str, sources: dict[str, str],
                prefix: str = "") -> None:
    """Merge ``update`` into ``base`` in place; nested mappings merge, anything else replaces."""
    for key, value in update.items():
        dotted = f"{prefix}{key}"
        if key not in base:
            known = ", ".join(sorted(map(str, base))) or "(none)"
            raise ConfigError(f"{dotted}: unknown config key; known here: {known} ({source})")
        if isinstance(base.get(key), dict):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{dotted}: must be a mapping, got {value!r} ({source})")
            if dotted in _FREE_FORM:  # free-form map: merge keys, no validation
                base[key].update(value)
                sources.update({f"{dotted}.{k}": source for k in value})
            else:
                _deep_merge(base[key], value, source, sources, prefix=f"{dotted}.")
        else:
            base[key] = value
            sources[dotted] = source


def _validate(config: dict, defaults: dict, source_of) -> None:
    """Check every leaf against the type of its default, then the enums and sizes."""

    def fail(key: str, what: str):
        raise ConfigError(f"{key}: {what} ({source_of(key)})")

    for key, default in _leaves(defaults):
        value = _get(config, key)
        if key in _PATHS:
            if value is None and default is None:
                continue
            if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
                fail(key, f"must be a non-empty path, got {value!r}")
            _set(config, key, os.fspath(value))
        elif key in _OPTIONAL_INTS:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                fail(key, f"must be an integer or null, got {value!r} ({_type_name(value)})")
        elif not _same_type(value, default):
            fail(key, f"must be {_type_name(default)}, got {value!r} ({_type_name(value)})")
    for key, allowed in _ENUMS.items():
        keys = ([f"{key[:-2]}.{k}" for k in _get(config, key[:-2])] if key.endswith(".*") else [key])
        for k in keys:
            if _get(config, k) not in allowed:
                fail(k, f"must be one of {', '.join(allowed)}, got {_get(config, k)!r}")
    for key in _POSITIVE:
        if _get(config, key) is not None and _get(config, key) <= 0:
            fail(key, f"must be a positive integer, got {_get(config, key)!r}")
    for key in _NON_NEGATIVE:
        if _get(config, key) < 0:
            fail(key, f"must be >= 0, got {_get(config, key)!r}")
    # Spark confs are strings on the JVM side; YAML gives bools/ints. Normalise once here
    # (YAML `true` -> "true", not Python's "True").
    config["spark"]["conf"] = {
        str(k): (str(v).lower() if isinstance(v, bool) else str(v))
        for k, v in (config["spark"]["conf"] or {}).items()
    }


def _leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) of every setting; a free-form map counts as one leaf."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in _FREE_FORM:
            yield from _leaves(value, f"{dotted}.")
        else:
            yield dotted, value


def _get(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def _set(config: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[last] = value


def _same_type(value, default) -> bool:
    if default is None:  # "unset" defaults take a string (spark.master, spark.warehouse_dir)
        return value is None or isinstance(value, str)
    if isinstance(default, bool) or isinstance(value, bool):  # bool is an int subclass: `split_bytes: yes`
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, dict):  # a free-form map (spark.conf): null means empty
        return value is None or isinstance(value, dict)
    return isinstance(value, type(default))


def _type_name(value) -> str:
    return {bool: "a boolean", int: "an integer", str: "a string", dict: "a mapping", float: "a number",
            list: "a list", type(None): "null"}.get(type(value), type(value).__name__)
