"""Fixtures shared by the controller_core tests.

The reference data (../shared: Kafka's schema files, real metadata logs) is located by each test module
at import time, because the modules parametrize over its files; a module raises at collection when it
is missing, so a checkout without ../shared fails instead of skipping.
"""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def assert_same_json():
    """Compare two values in Kafka's JSON form strictly: key order, bool vs int and int vs float all count
    (plain ``==`` would accept ``True == 1``, ``1 == 1.0`` and any key order)."""

    def check(actual, expected, context: str = ""):
        a = json.dumps(actual)
        e = json.dumps(expected)
        assert a == e, f"{context}\n  actual:   {a}\n  expected: {e}"

    return check
