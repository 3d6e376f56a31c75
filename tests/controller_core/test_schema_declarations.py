"""The project's record declarations (controller_core.records) say exactly what Kafka's JSON message
definitions say: names, apiKeys / control types, version ranges and every field, recursively.

Kafka's files (../shared/kafka-schemas) are the authority.  One test per file, so a failure names the
record; and the reverse direction: nothing is declared that Kafka's files do not have.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controller_core.records import (
    BY_API_KEY, BY_CONTROL_TYPE, BY_TYPE_NAME, CONTROL_RECORDS, METADATA_RECORDS, NEWER_THAN_KAFKA_FILES,
)
from controller_core.schema import PRIMITIVES

SCHEMAS_DIR = Path(__file__).resolve().parents[3] / "shared" / "kafka-schemas"
if not SCHEMAS_DIR.is_dir():
    raise FileNotFoundError(f"Kafka's schema files are missing: {SCHEMAS_DIR} (need ../shared beside the checkout)")

# newer/: records of Kafka versions after the reference set (UnregisterControllerRecord, 4.4), declared too
SCHEMA_FILES = sorted(SCHEMAS_DIR.glob("*.json")) + sorted((SCHEMAS_DIR / "newer").glob("*.json"))
if not SCHEMA_FILES:
    raise FileNotFoundError(f"no *.json in {SCHEMAS_DIR}")

# Kafka's ControlRecordType (clients/.../record/ControlRecordType.java): the id in the control record key
# and the name kafka-dump-log prints.
KAFKA_CONTROL_TYPES = {
    "LeaderChangeMessage": ("LEADER_CHANGE", 2),
    "SnapshotHeaderRecord": ("SNAPSHOT_HEADER", 3),
    "SnapshotFooterRecord": ("SNAPSHOT_FOOTER", 4),
    "KRaftVersionRecord": ("KRAFT_VERSION", 5),
    "VotersRecord": ("KRAFT_VOTERS", 6),
}

# Keys of a field in Kafka's files that carry no wire-format meaning for a reader.
IRRELEVANT_FIELD_KEYS = {"about", "entityType", "mapKey"}
CHECKED_FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "fields"}


def load_kafka_schema(path: Path) -> dict:
    """Kafka's JSON with its ``//`` comment lines removed."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def kafka_snake_case(name: str) -> str:
    """MessageGenerator.toSnakeCase(name).toUpperCase(), as Kafka derives MetadataRecordType names:
    an underscore before every capital that follows a non-capital."""
    out, prev_capital = [], True
    for c in name:
        if c.isupper():
            if not prev_capital:
                out.append("_")
            out.append(c)
            prev_capital = True
        else:
            out.append(c.upper())
            prev_capital = False
    return "".join(out)


def kafka_versions(spec):
    """Kafka's version spec as (lo, hi) with hi None for open-ended, or None for "none"/absent."""
    if spec is None or spec == "none":
        return None
    m = re.fullmatch(r"(\d+)\+", spec)
    if m:
        return (int(m.group(1)), None)
    m = re.fullmatch(r"(\d+)-(\d+)", spec)
    if m:
        return (int(m.group(1)), int(m.group(2)))
    m = re.fullmatch(r"\d+", spec)
    assert m, f"unparseable version spec {spec!r}"
    return (int(spec), int(spec))


def project_versions(v):
    return None if v.lo < 0 else (v.lo, v.hi)


def element_type(type_name: str) -> str:
    return type_name[2:] if type_name.startswith("[]") else type_name


def kafka_struct_fields(field: dict, common: dict[str, dict]) -> list[dict]:
    """The sub-fields of a struct field: inline ``fields`` or the referenced ``commonStructs`` entry."""
    et = element_type(field["type"])
    if et in PRIMITIVES:
        assert "fields" not in field, f"primitive field {field['name']} has sub-fields"
        return []
    if "fields" in field:
        return field["fields"]
    assert et in common, f"struct type {et} of {field['name']} is neither inline nor a commonStruct"
    return common[et]["fields"]


def compare_fields(kafka_fields: list[dict], project_fields, common: dict[str, dict], path: str) -> list[str]:
    """Every difference between Kafka's field list and the project's, as readable strings."""
    problems = []
    k_names = [f["name"] for f in kafka_fields]
    p_names = [f.name for f in project_fields]
    if k_names != p_names:
        # Field order is wire order, so an order difference is a real difference.
        return [f"{path}: fields {p_names} declared, Kafka has {k_names}"]
    for kf, pf in zip(kafka_fields, project_fields):
        where = f"{path}.{kf['name']}"
        unknown = set(kf) - CHECKED_FIELD_KEYS - IRRELEVANT_FIELD_KEYS
        assert not unknown, f"{where}: Kafka field keys this test does not understand: {unknown}"
        if pf.type != kf["type"]:
            problems.append(f"{where}: type {pf.type!r}, Kafka {kf['type']!r}")
        for key, attr in (("versions", "versions"), ("nullableVersions", "nullable"), ("taggedVersions", "tagged")):
            if project_versions(getattr(pf, attr)) != kafka_versions(kf.get(key)):
                problems.append(f"{where}: {key} {getattr(pf, attr)}, Kafka {kf.get(key, 'absent')}")
        ktag = int(kf["tag"]) if "tag" in kf else None  # Kafka writes some tags as strings ("tag": "2")
        if pf.tag != ktag:
            problems.append(f"{where}: tag {pf.tag!r}, Kafka {ktag!r}")
        if pf.default != kf.get("default"):
            problems.append(f"{where}: default {pf.default!r}, Kafka {kf.get('default')!r}")
        problems += compare_fields(kafka_struct_fields(kf, common), pf.fields, common, where)
    return problems


PROJECT_BY_NAME = {r.name: r for r in METADATA_RECORDS + CONTROL_RECORDS}


@pytest.mark.parametrize("schema_file", SCHEMA_FILES, ids=[p.stem for p in SCHEMA_FILES])
def test_declaration_matches_kafka_schema_field_by_field(schema_file: Path):
    ks = load_kafka_schema(schema_file)
    name = ks["name"]
    assert name in PROJECT_BY_NAME, f"{name} ({schema_file.name}) is not declared by the project"
    rd = PROJECT_BY_NAME[name]

    if ks["type"] == "metadata":
        assert rd.api_key == ks["apiKey"], f"{name}: apiKey {rd.api_key}, Kafka {ks['apiKey']}"
        assert rd.control_type is None and not rd.is_control
        assert rd.type_name == kafka_snake_case(name), f"{name}: type name {rd.type_name}"
        assert BY_API_KEY[ks["apiKey"]] is rd
    else:
        assert ks["type"] == "data", f"{name}: unexpected schema type {ks['type']}"
        assert name in KAFKA_CONTROL_TYPES, f"{name}: a data schema that is not a known KRaft control record"
        type_name, control_type = KAFKA_CONTROL_TYPES[name]
        assert (rd.type_name, rd.control_type) == (type_name, control_type)
        assert rd.api_key is None and rd.is_control
        assert BY_CONTROL_TYPE[control_type] is rd
    assert BY_TYPE_NAME[rd.type_name] is rd

    fields = rd.fields
    valid = project_versions(rd.valid_versions)
    if name in NEWER_THAN_KAFKA_FILES:  # declared beyond the files (KIP-1066): checked up to the files' newest
        newest = NEWER_THAN_KAFKA_FILES[name]
        assert kafka_versions(ks["validVersions"])[1] == newest, f"{name}: the files' newest version changed"
        later = [f for f in fields if f.versions.lo > newest]
        assert later and all(f.tagged.lo == f.versions.lo and f.tag is not None for f in later), \
            f"{name}: a version beyond the files may only add tagged fields"
        fields = tuple(f for f in fields if f.versions.lo <= newest)
        valid = (valid[0], newest)
    assert valid == kafka_versions(ks["validVersions"]), \
        f"{name}: validVersions {rd.valid_versions}, Kafka {ks['validVersions']}"
    assert project_versions(rd.flexible_versions) == kafka_versions(ks["flexibleVersions"]), \
        f"{name}: flexibleVersions {rd.flexible_versions}, Kafka {ks['flexibleVersions']}"

    common = {s["name"]: s for s in ks.get("commonStructs", [])}
    problems = compare_fields(ks["fields"], fields, common, name)
    assert not problems, "\n".join(problems)


def test_project_declares_no_record_kafka_does_not_have():
    kafka_names = {load_kafka_schema(p)["name"] for p in SCHEMA_FILES}
    extra = set(PROJECT_BY_NAME) - kafka_names
    assert not extra, f"declared but absent from Kafka's schema files: {sorted(extra)}"
    assert len(PROJECT_BY_NAME) == len(METADATA_RECORDS) + len(CONTROL_RECORDS), "a record is declared twice"


def test_api_keys_control_types_and_type_names_are_unique():
    assert len(BY_API_KEY) == len(METADATA_RECORDS)
    assert len(BY_CONTROL_TYPE) == len(CONTROL_RECORDS)
    assert len(BY_TYPE_NAME) == len(METADATA_RECORDS) + len(CONTROL_RECORDS)


def test_metadata_api_keys_are_those_of_kafkas_files():
    kafka_keys = sorted(load_kafka_schema(p)["apiKey"] for p in SCHEMA_FILES if load_kafka_schema(p)["type"] == "metadata")
    assert sorted(BY_API_KEY) == kafka_keys


def test_kafka_snake_case_reproduces_dump_log_names():
    # Names as kafka-dump-log prints them (see ../shared/realdata/expected-decode), so the derivation
    # used above is pinned to Kafka's output rather than to the project's own helper.
    assert kafka_snake_case("ZkMigrationStateRecord") == "ZK_MIGRATION_STATE_RECORD"
    assert kafka_snake_case("BrokerRegistrationChangeRecord") == "BROKER_REGISTRATION_CHANGE_RECORD"
    assert kafka_snake_case("NoOpRecord") == "NO_OP_RECORD"
