"""Delta log actions as frozen models (the non-file actions; file actions stay columnar)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.delta.schema import DeltaStruct, parse_schema_string
from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError

log = logging.getLogger(__name__)

# Legacy protocol versions imply these features (PROTOCOL.md "Table Features").
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("appendOnly", "invariants", "checkConstraints"),
    4: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"),
    5: (
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
    ),
    6: (
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    ),
}

# What the log reader does with each known feature. "refuse" means the table's state cannot be
# trusted from the files alone (another party owns recent commits) or the layout is unknown.
FEATURE_SUPPORT: Mapping[str, str] = {
    "appendOnly": "read",
    "invariants": "read",
    "checkConstraints": "read",
    "changeDataFeed": "read",
    "generatedColumns": "read",
    "identityColumns": "read",
    "allowColumnDefaults": "read",
    "columnMapping": "read",
    "deletionVectors": "read",
    "timestampNtz": "read",
    "v2Checkpoint": "read",
    "vacuumProtocolCheck": "read",
    "typeWidening": "read",
    "typeWidening-preview": "read",
    "variantType": "read",
    "variantType-preview": "read",
    "variantShredding": "read",
    "variantShredding-preview": "read",
    "domainMetadata": "read",
    "rowTracking": "read",
    "clustering": "read",
    "liquid": "read",
    "inCommitTimestamp": "read",
    "inCommitTimestamp-preview": "read",
    "icebergCompatV1": "read",
    "icebergCompatV2": "read",
    "icebergCompatV3": "read",
    "icebergWriterCompatV1": "read",
    "icebergWriterCompatV3": "read",
    "checkpointProtection": "read",
    "materializePartitionColumns": "read",
    "collations": "read",
    "collations-preview": "read",
    "columnMappingUsageTracking": "read",
    "catalogManaged": "refuse",
    "catalogOwned-preview": "refuse",
    "coordinatedCommits-preview": "refuse",
    "adaptiveMetadata-preview": "refuse",
    "redirectReaderWriter-preview": "refuse",
    "redirectWriterOnly-preview": "refuse",
    "geospatial": "read",
    "geospatial-dev": "read",
    # Nanosecond timestamps: a proposal whose type Iceberg's v3 _ns types may one day carry; no
    # mapping is specified, so a table using it is refused by name rather than misread.
    "timestampNanos": "refuse",
}
MAX_READER_VERSION = 3


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Protocol:
        try:
            rf = obj.get("readerFeatures")
            wf = obj.get("writerFeatures")
            return cls(
                int(obj["minReaderVersion"]),
                int(obj["minWriterVersion"]),
                None if rf is None else tuple(sorted(str(f) for f in rf)),
                None if wf is None else tuple(sorted(str(f) for f in wf)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptMetadataError(f"malformed protocol action ({err})") from err

    @property
    def effective_reader_features(self) -> frozenset[str]:
        if self.min_reader_version >= 3:
            return frozenset(self.reader_features or ())
        return frozenset({"columnMapping"}) if self.min_reader_version == 2 else frozenset()

    @property
    def effective_writer_features(self) -> frozenset[str]:
        if self.min_writer_version >= 7:
            return frozenset(self.writer_features or ())
        return frozenset(_LEGACY_WRITER.get(min(self.min_writer_version, 6), ()))

    def supports(self, feature: str) -> bool:
        return feature in self.effective_reader_features or feature in self.effective_writer_features

    def check_readable(self) -> None:
        """The protocol gate: refuse what the log reader cannot read correctly, naming the feature."""
        if self.min_reader_version > MAX_READER_VERSION:
            raise UnsupportedFeatureError(
                f"Delta reader version {self.min_reader_version} is not supported (tablekeeper reads "
                "versions 1-3): the table needs a newer Delta reader; upgrade tablekeeper, or have "
                "delta-spark downgrade the table's protocol"
            )
        for feature in sorted(self.effective_reader_features):
            if FEATURE_SUPPORT.get(feature) != "read":
                raise UnsupportedFeatureError(
                    f"Delta reader feature {feature!r} is not supported by tablekeeper, and the table "
                    f"cannot be read correctly without it: drop it with delta-spark (ALTER TABLE ... "
                    f"DROP FEATURE {feature}) where Delta allows, or upgrade tablekeeper"
                )
        for feature in sorted(self.effective_writer_features):
            verdict = FEATURE_SUPPORT.get(feature)
            if verdict == "refuse":
                raise UnsupportedFeatureError(
                    f"Delta writer feature {feature!r} is not supported by tablekeeper: "
                    "the table's latest commits are owned by a catalog or coordinator"
                )
            if verdict is None:
                log.warning(
                    "unknown Delta writer feature %r: reading anyway (readers may ignore it)", feature
                )


@dataclass(frozen=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str] = field(default_factory=dict, hash=False)
    name: str | None = None
    description: str | None = None
    created_time: int | None = None
    format_provider: str = "parquet"

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Metadata:
        try:
            fmt = obj.get("format") or {}
            return cls(
                id=str(obj.get("id", "")),
                # Some writers (Delta Live Tables) commit a first metaData without a schema.
                schema_string=str(obj.get("schemaString") or ""),
                partition_columns=tuple(str(c) for c in obj.get("partitionColumns") or ()),
                configuration={str(k): str(v) for k, v in (obj.get("configuration") or {}).items()},
                name=obj.get("name"),
                description=obj.get("description"),
                created_time=obj.get("createdTime"),
                format_provider=str(fmt.get("provider") or "parquet"),
            )
        except (KeyError, TypeError) as err:
            raise CorruptMetadataError(f"malformed metaData action ({err})") from err

    @functools.cached_property
    def schema(self) -> DeltaStruct:
        # Parsed once: converting a million files asks for it once per file.
        if not self.schema_string:
            raise CorruptMetadataError(
                "the table's metaData has no schemaString: the table has no schema yet"
            )
        return parse_schema_string(self.schema_string)


@dataclass(frozen=True)
class Txn:
    app_id: str
    version: int
    last_updated: int | None = None


@dataclass(frozen=True)
class DomainMetadata:
    domain: str
    configuration: str
    removed: bool = False


@dataclass(frozen=True)
class CommitInfo:
    version: int
    timestamp: int | None
    in_commit_timestamp: int | None
    operation: str | None
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_json(cls, version: int, obj: Mapping[str, Any]) -> CommitInfo:
        ict = obj.get("inCommitTimestamp")
        ts = obj.get("timestamp")
        return cls(
            version=version,
            timestamp=None if ts is None else int(ts),
            in_commit_timestamp=None if ict is None else int(ict),
            operation=obj.get("operation"),
            raw=dict(obj),
        )


@dataclass(frozen=True)
class DeletionVector:
    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @property
    def unique_id(self) -> str:
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"


@dataclass(frozen=True)
class AddFile:
    """One live file of a snapshot, materialised from the columnar state on demand."""

    path: str  # as in the log (maybe relative, percent-encoded)
    absolute_path: str  # fully qualified and decoded once: the file to open
    partition_values: Mapping[str, str | None] = field(hash=False)
    size: int
    modification_time: int
    data_change: bool
    stats: str | None = None
    tags: Mapping[str, str] | None = field(default=None, hash=False)
    deletion_vector: DeletionVector | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    @property
    def key(self) -> tuple[str, str | None]:
        return self.absolute_path, None if self.deletion_vector is None else self.deletion_vector.unique_id
