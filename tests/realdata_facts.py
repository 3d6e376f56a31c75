"""Facts about ../shared/realdata that several test modules check against: the per-file table of
its README (record counts per type, batches, records) and where the files are."""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
if not (REALDATA / "README.md").is_file():
    raise FileNotFoundError(f"real metadata is missing: {REALDATA} (need ../shared beside the checkout)")

# the data directories (a cluster each) and their per-file rows
CLUSTERS = {
    "arthurarutunyan04": "arthurarutunyan04-2segments-mv4.0/kafka-data",
    "induswargods": "induswargods-elr-mv4.2/kafka-data",
    "mavila01": "mavila01-3broker-mv3.9/kafka1",
    "ogs59": "ogs59-3broker-mv3.7/kafka-1",
    "vasifvortex": "vasifvortex-pre3.3-fence/kafka1",
}


# README column -> the record type name Kafka prints
COUNT_COLUMNS = {
    "partition": "PARTITION_RECORD",
    "partition change": "PARTITION_CHANGE_RECORD",
    "register broker": "REGISTER_BROKER_RECORD",
    "broker registration change": "BROKER_REGISTRATION_CHANGE_RECORD",
    "fence broker": "FENCE_BROKER_RECORD",
    "unfence broker": "UNFENCE_BROKER_RECORD",
    "topic": "TOPIC_RECORD",
    "remove topic": "REMOVE_TOPIC_RECORD",
    "config": "CONFIG_RECORD",
    "feature level": "FEATURE_LEVEL_RECORD",
    "no op": "NO_OP_RECORD",
    "leader change": "LEADER_CHANGE",
}
VERSION_COLUMN_TYPES = ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "REGISTER_BROKER_RECORD")


@lru_cache(maxsize=1)
def readme_table() -> dict[str, dict[str, str]]:
    """The README's per-file table: {relative path: {column header: cell}}."""
    lines = (REALDATA / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\|\s*file\s*\|\s*bytes\s*\|", line))
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(header), f"README row has {len(cells)} cells, header {len(header)}: {line}"
        row = dict(zip(header, cells))
        rows[row["file"].strip("`")] = row
    return rows


def readme_row(rel: str) -> dict[str, str]:
    table = readme_table()
    assert rel in table, f"{rel} has no row in realdata/README.md"
    return table[rel]


def expected_counts(row: dict[str, str]) -> Counter:
    want = Counter()
    for column, type_name in COUNT_COLUMNS.items():
        want[type_name] += int(row[column])
    other = row["other types"]
    if other != "-":
        for item in other.split(","):
            m = re.fullmatch(r"\s*([A-Z_]+)\s+(\d+)\s*", item)
            assert m, f"unparseable 'other types' item {item!r}"
            assert m.group(1) not in want, f"{m.group(1)} counted twice in README"
            want[m.group(1)] += int(m.group(2))
    return Counter({k: v for k, v in want.items() if v})


