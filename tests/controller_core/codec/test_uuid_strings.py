"""codec.vector's uuid columns: Kafka's ``Uuid.toString()`` (base64url of the 16 bytes, no padding) of every row,
whether computed row by row (a small group) or once per distinct id and gathered (a large one)."""
import base64

import numpy as np
import pytest

from controller_core.codec import vector as V


def _kafka(raw: np.ndarray) -> list[str]:
    return [base64.urlsafe_b64encode(bytes(r)).decode().rstrip("=") for r in raw]


@pytest.mark.parametrize("rows", [1, 4095, 4096, 50_000])
def test_every_row_is_its_uuids_kafka_string(rows):
    rng = np.random.default_rng(rows)
    distinct = rng.integers(0, 256, (max(1, rows // 40), 16), dtype=np.uint8)
    distinct[0] = 0  # the zero uuid (Kafka's Uuid.ZERO_UUID) and the all-ones bytes are ids like any other
    distinct[-1] = 255
    raw = distinct[rng.integers(0, len(distinct), rows)]
    got = V.uuid_array(raw)
    assert got.to_pylist() == _kafka(raw)
    assert all(len(s) == 22 for s in got.to_pylist())
    assert got.equals(V.uuid_strings(raw))
