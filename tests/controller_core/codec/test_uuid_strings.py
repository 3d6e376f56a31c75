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


@pytest.mark.parametrize("rows", [1, 7, 5000])
def test_the_compiled_column_writes_each_rows_kafka_string(rows):
    """flat.uuid_column (what the decoder's compiled path writes): the same text for ids read at any position of a
    buffer, whether a row repeats the one before it (a run of one topic's records) or not."""
    from controller_core.codec.flat import uuid_column

    rng = np.random.default_rng(rows + 1)
    distinct = rng.integers(0, 256, (max(2, rows // 50), 16), dtype=np.uint8)
    distinct[0], distinct[1] = 0, 255
    which = np.repeat(rng.integers(0, len(distinct), rows), rng.integers(1, 4, rows))[:rows]  # runs and changes
    buf = np.zeros(rows * 19 + 16, np.uint8)
    pos = np.arange(rows, dtype=np.int64) * 19 + rng.integers(0, 3, rows)  # unaligned, not packed
    for p, w in zip(pos, which):
        buf[p:p + 16] = distinct[w]
    got = uuid_column(buf, pos)
    assert got.to_pylist() == _kafka(distinct[which])
    assert got.equals(V.uuid_strings(distinct[which]))
