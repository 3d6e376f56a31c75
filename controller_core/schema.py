"""Declarations of Kafka's versioned message schemas, as data.

A record layout is declared once (fields, versions, tags, defaults) and every
codec in this package -- the scalar reference reader/writer, the vectorized
Arrow decoder and the JSON writer -- is derived from the declaration.  The
vocabulary is Kafka's own (``versions``, ``nullableVersions``,
``taggedVersions``, ``tag``, ``default``) so the declarations in
:mod:`controller_core.records` can be checked field by field against Kafka's
JSON message definitions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "int64", "float64", "string", "bytes", "uuid"}
)


@dataclass(frozen=True)
class Versions:
    """An inclusive version range such as Kafka's ``"0+"``, ``"1-2"`` or ``"none"``."""

    lo: int
    hi: Optional[int]  # None = open ended

    @staticmethod
    def parse(spec: Optional[str]) -> "Versions":
        if spec is None or spec == "none":
            return NO_VERSIONS
        if spec.endswith("+"):
            return Versions(int(spec[:-1]), None)
        if "-" in spec:
            lo, hi = spec.split("-")
            return Versions(int(lo), int(hi))
        return Versions(int(spec), int(spec))

    def __contains__(self, version: int) -> bool:
        if self.lo < 0:
            return False
        return version >= self.lo and (self.hi is None or version <= self.hi)

    def __str__(self) -> str:
        if self.lo < 0:
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        return f"{self.lo}" if self.lo == self.hi else f"{self.lo}-{self.hi}"


NO_VERSIONS = Versions(-1, -1)


@dataclass(frozen=True)
class Field:
    """One field of a message or struct, in Kafka's schema vocabulary."""

    name: str  # Kafka's PascalCase name, e.g. "EligibleLeaderReplicas"
    type: str  # "int32", "[]int32", "uuid", "[]BrokerEndpoint", "KRaftVersionFeature", ...
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tagged: Versions = NO_VERSIONS
    tag: Optional[int] = None
    default: Optional[str] = None  # Kafka's default literal; None = the type's natural default
    fields: tuple["Field", ...] = ()

    @property
    def json_name(self) -> str:
        """Kafka's JSON key: the name with its first letter lower-cased ("kRaftVersionFeature")."""
        return self.name[:1].lower() + self.name[1:]

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """A struct, or an array of structs (the element type is not a primitive)."""
        return self.element_type not in PRIMITIVES

    def present_in(self, version: int) -> bool:
        return version in self.versions

    def is_tagged_in(self, version: int) -> bool:
        return version in self.tagged

    def is_nullable_in(self, version: int) -> bool:
        return version in self.nullable

    def default_value(self):
        """The field's default in Kafka's JSON form (what a reader sees when it is absent)."""
        d = self.default
        if d == "null":
            return None
        if self.is_array:
            return []
        t = self.type
        if t == "bool":
            return d == "true"
        if t in ("int8", "int16", "uint16", "int32", "int64"):
            return int(d, 0) if d else 0
        if t == "float64":
            return float(d) if d else 0.0
        if t == "string":
            return d or ""
        if t == "bytes":
            return ""
        if t == "uuid":
            return "AAAAAAAAAAAAAAAAAAAAAA"
        # a plain struct: every member at its default
        return {f.json_name: f.default_value() for f in self.fields}


@dataclass(frozen=True)
class RecordDef:
    """A metadata record (framed with an apiKey) or a KRaft control record (keyed by a control type)."""

    name: str  # Kafka's class name, e.g. "PartitionChangeRecord"
    type_name: str  # what kafka-dump-log prints as "type", e.g. "PARTITION_CHANGE_RECORD"
    valid_versions: Versions
    fields: tuple[Field, ...]
    api_key: Optional[int] = None  # metadata records
    control_type: Optional[int] = None  # control records (ControlRecordType id)
    flexible_versions: Versions = field(default_factory=lambda: Versions(0, None))

    @property
    def is_control(self) -> bool:
        return self.control_type is not None

    def fields_in(self, version: int) -> list[Field]:
        return [f for f in self.fields if f.present_in(version)]


def F(name, type, versions, nullable=None, tagged=None, tag=None, default=None, fields=()):
    """Compact constructor used by the declarations (mirrors the JSON keys)."""
    return Field(
        name=name,
        type=type,
        versions=Versions.parse(versions),
        nullable=Versions.parse(nullable),
        tagged=Versions.parse(tagged),
        tag=tag,
        default=default,
        fields=tuple(fields),
    )


def upper_snake(name: str) -> str:
    """"PartitionChangeRecord" -> "PARTITION_CHANGE_RECORD" (how Kafka names MetadataRecordType)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()
