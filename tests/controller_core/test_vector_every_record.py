"""The vectorized decoder and the Kafka-JSON writer on every record type and version: generated
records (many per batch, so the columnar paths see varied rows together) decode to the canonical
JSON a reader must return."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller_core.codec.bronze import records_table
from controller_core.codec.logfile import iter_chunks
from controller_core.records import BY_TYPE_NAME
from record_strategies import ALL_VERSIONS, canonical, write_generated_batch


def _typed(value):
    """JSON values with their types: 1 and 1.0 and True must not compare equal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


@pytest.mark.parametrize("type_name, version", ALL_VERSIONS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_vectorized_decode_of_every_record_version(tmp_path, type_name, version, data):
    rdef = BY_TYPE_NAME[type_name]
    path = tmp_path / "00000000000000000000.log"
    values = write_generated_batch(data, path, type_name, version, max_size=25)
    chunks = list(iter_chunks(str(path), first_offset=0))
    assert [q for c in chunks for q in c.quarantine] == []
    table = records_table(chunks[0], "c", "f", "segment")
    assert table.column("record_type").to_pylist() == [type_name] * len(values)
    assert table.column("record_version").to_pylist() == [version] * len(values)
    got = [_typed(json.loads(d)) for d in table.column("data_json").to_pylist()]
    want = [_typed(canonical(rdef.fields, version, v)) for v in values]
    assert got == want
