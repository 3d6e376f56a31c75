"""lake/config.py: values are validated on load, and every message names the dotted key and the file
(or the environment / the caller's overrides) the bad value came from."""
from __future__ import annotations

import pytest

from lake.config import ConfigError, defaults_source, load_config


def _load(tmp_path, text: str):
    f = tmp_path / "site.yaml"
    f.write_text(text)
    return f, lambda: load_config(f)


def test_the_shipped_defaults_pass_their_own_validation():
    config = load_config()
    assert config["audit"]["fail_on"] == "ERROR" and config["spark"]["conf"] == {}
    assert defaults_source().endswith("defaults.yaml")


@pytest.mark.parametrize("text, key, what", [
    ("audit:\n  fail_on: FATAL\n", "audit.fail_on", "must be one of ERROR, WARN, INFO, got 'FATAL'"),
    ("audit:\n  severities:\n    UNDER_MIN_ISR: warn\n", "audit.severities.UNDER_MIN_ISR", "got 'warn'"),
    ("audit:\n  recovery_strategy: greedy\n", "audit.recovery_strategy", "balanced, aggressive, none"),
    ("audit:\n  leader_epoch_check: loose\n", "audit.leader_epoch_check", "strict, log"),
    ("delta:\n  backend: parquet\n", "delta.backend", "auto, delta-spark, delta-rs"),
    ("ingest:\n  split_bytes: 0\n", "ingest.split_bytes", "must be a positive integer, got 0"),
    ("spark:\n  shuffle_partitions: -2\n", "spark.shuffle_partitions", "must be a positive integer"),
    ("replay:\n  buckets: 0\n", "replay.buckets", "must be a positive integer"),
    ("audit:\n  long_window_ms: -1\n", "audit.long_window_ms", "must be >= 0"),
    ("audit:\n  chunk_rows: -10\n", "audit.chunk_rows", "must be >= 0"),
    # the type of each value is the type of its default
    ("ingest:\n  split_bytes: yes\n", "ingest.split_bytes", "must be an integer, got True (a boolean)"),
    ("replay:\n  buckets: 8.5\n", "replay.buckets", "must be an integer or null, got 8.5"),
    ("replay:\n  invariants: 1\n", "replay.invariants", "must be a boolean, got 1"),
    ("spark:\n  driver_memory: 2048\n", "spark.driver_memory", "must be a string, got 2048"),
    ("audit:\n  long_window_ms: 10m\n", "audit.long_window_ms", "must be an integer, got '10m'"),
    ("lake:\n", "lake", "must be a non-empty path"),
    ("spark:\n  conf: [a, b]\n", "spark.conf", "must be a mapping"),
    # unknown keys, at any depth (severities included: a misspelt code must not be ignored)
    ("spak:\n  master: local\n", "spak", "unknown config key"),
    ("audit:\n  severities:\n    UNDER_MIN_ISRR: WARN\n", "audit.severities.UNDER_MIN_ISRR", "unknown config key"),
])
def test_a_bad_value_names_the_key_and_the_file(tmp_path, text, key, what):
    f, load = _load(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load()
    msg = str(exc.value)
    assert msg.startswith(f"{key}: ") and what in msg and msg.endswith(f"({f})"), msg


@pytest.mark.parametrize("text, what", [
    ("audit: [\n", "not valid YAML"),
    ("- just\n- a list\n", "top level must be a mapping, got list"),
])
def test_a_file_that_is_not_a_settings_mapping_is_named(tmp_path, text, what):
    f, load = _load(tmp_path, text)
    with pytest.raises(ConfigError, match=what) as exc:
        load()
    assert str(exc.value).endswith(f"({f})") and "\n" not in str(exc.value)


def test_missing_file_and_folder_are_named(tmp_path):
    with pytest.raises(ConfigError, match=f"config file not found \\({tmp_path / 'nope.yaml'}\\)"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=f"config file is a directory \\({tmp_path}\\)"):
        load_config(tmp_path)


def test_good_values_of_every_kind_load(tmp_path):
    _, load = _load(tmp_path, "audit:\n  fail_on: WARN\n  severities:\n    OFFLINE: ERROR\n  chunk_rows: 0\n"
                              "  recovery_strategy: none\n  leader_epoch_check: log\n"
                              "spark:\n  warehouse_dir: /tmp/wh\n  conf:\n    spark.ui.enabled: false\n"
                              "replay:\n  invariants: false\n")
    c = load()
    assert (c["audit"]["fail_on"], c["audit"]["severities"]["OFFLINE"], c["audit"]["chunk_rows"]) == ("WARN", "ERROR", 0)
    assert c["spark"]["conf"] == {"spark.ui.enabled": "false"} and c["replay"]["invariants"] is False


def test_environment_and_overrides_are_named_as_the_source(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match=r"^replay\.buckets: must be a positive integer, got 0 \(overrides\)$"):
        load_config(overrides={"replay": {"buckets": 0}})
    monkeypatch.setenv("KRAFT_AUDIT_LAKE", str(tmp_path / "env-lake"))
    assert load_config()["lake"] == str(tmp_path / "env-lake")
    assert load_config(overrides={"lake": tmp_path / "mine"})["lake"] == str(tmp_path / "mine")  # a Path is fine
