"""``audit.severities`` comes from the code registry: the defaults are the registry's finding codes at their
default severities, a user file can re-grade a declared code, and a code the registry lacks is refused
(a misspelt code must not leave the real one at a default the user meant to change)."""
from __future__ import annotations

import pytest
import yaml

from controller_core import codes
from lake import config as lake_config
from lake.config import ConfigError, load_config


def test_default_severities_are_the_registrys_finding_defaults():
    assert load_config()["audit"]["severities"] == codes.default_severities(codes.FINDING)
    assert set(load_config()["audit"]["severities"]) == {c.code for c in codes.of_kind(codes.FINDING)}


def test_defaults_yaml_lists_no_codes_of_its_own():
    raw = yaml.safe_load(lake_config.resources.files("conf").joinpath("defaults.yaml").read_text(encoding="utf-8"))
    assert raw["audit"]["severities"] == {}
    with pytest.raises(ConfigError, match="controller_core/codes.py"):
        lake_config._registry_defaults({"audit": {"severities": {"UNDER_MIN_ISR": "WARN"}}})


def test_a_user_file_regrades_a_declared_code(tmp_path):
    f = tmp_path / "conf.yaml"
    f.write_text("audit:\n  severities:\n    AT_MIN_ISR: WARN\n")
    got = load_config(f)["audit"]["severities"]
    assert got == {**codes.default_severities(codes.FINDING), "AT_MIN_ISR": "WARN"}


def test_a_code_the_registry_lacks_is_an_unknown_key(tmp_path):
    f = tmp_path / "conf.yaml"
    f.write_text("audit:\n  severities:\n    DATA_LOSS_LIKELEY: INFO\n")
    with pytest.raises(ConfigError, match="audit.severities.DATA_LOSS_LIKELEY"):
        load_config(f)
