"""What ``health`` decides with and what it reports: thresholds, recommendations, a table's health.

Thresholds have documented defaults (README, "health"). Each can be set, most specific first, by
``--threshold KEY=VALUE``, by the table's property ``tablekeeper.health.KEY``, or by the
``health:`` section of the catalogs file. A table's own property beats the file, unlike job
options, because it is the table owner's word on that one table where the file is the fleet's
default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import ConfigError

PROPERTY_PREFIX = "tablekeeper.health."
# Iceberg merges manifests on commit once a snapshot has this many (commit.manifest.min-count-to-merge).
MIN_COUNT_TO_MERGE = "commit.manifest.min-count-to-merge"
DEFAULT_MIN_COUNT_TO_MERGE = 100


@dataclass(frozen=True)
class Thresholds:
    # compact: the plan rewrites at least this many data files (Iceberg's min-input-files).
    compact_min_files: int = 5
    # compact --strategy sort: a point lookup on the sort key (or --layout-columns) opens at least
    # this many of its partition's data files on average, and a sort rewrite would cut that.
    compact_max_files_per_lookup: float = 2.0
    # expire-snapshots: at least this many snapshots are expirable under the table's own rules,
    # and they alone hold at least this many bytes.
    expire_min_snapshots: int = 1
    expire_min_bytes: int = 0
    # rewrite-manifests: at least this many data manifests (None: the table's
    # commit.manifest.min-count-to-merge, else 100), and the rewrite leaves at most this share.
    rewrite_manifests_min_manifests: int | None = None
    rewrite_manifests_max_share_after: float = 0.5
    # rewrite-position-deletes: the plan rewrites at least this many position delete files.
    rewrite_position_deletes_min_files: int = 5
    # rewrite-equality-deletes: at least this many live equality delete files apply to data files
    # (every scan joins each data file against each of them).
    rewrite_equality_deletes_min_files: int = 1
    # remove-orphans: at least this many files to delete (Iceberg: orphans found by --list-files;
    # Delta: tombstones past delta.deletedFileRetentionDuration).
    remove_orphans_min_files: int = 1
    # expire-snapshots on Delta (a checkpoint and log cleanup): commits since the last checkpoint.
    delta_max_commits_since_checkpoint: int = 100
    # backfill-row-lineage: recommended only when v3 readiness is asked for.
    v3_readiness: bool = False

    @classmethod
    def keys(cls) -> dict[str, str]:
        """KEY (as in --threshold KEY=VALUE) -> field name."""
        return {_key(f.name): f.name for f in dataclasses.fields(cls)}

    def as_keys(self, properties: Mapping[str, str]) -> dict[str, Any]:
        """KEY -> the value in effect for a table with these properties (for the result)."""
        out = {key: getattr(self, name) for key, name in self.keys().items()}
        try:
            out["rewrite-manifests.min-manifests"] = self.min_manifests(properties)
        except ConfigError:
            out["rewrite-manifests.min-manifests"] = None  # the notes name the bad property
        return out

    def override(self, values: Mapping[str, str], where: str) -> Thresholds:
        """These thresholds with ``values`` (KEY -> text) applied; an unknown key is an error."""
        known = self.keys()
        changes: dict[str, Any] = {}
        for key, text in values.items():
            name = known.get(key)
            if name is None:
                raise ConfigError(
                    f"unknown health threshold {key!r} in {where} (known: {', '.join(sorted(known))})"
                )
            changes[name] = _parse(name, str(text), key, where)
        return dataclasses.replace(self, **changes)

    def for_table(self, properties: Mapping[str, str], cli: Mapping[str, str]) -> Thresholds:
        own = {k[len(PROPERTY_PREFIX) :]: v for k, v in properties.items() if k.startswith(PROPERTY_PREFIX)}
        return self.override(own, "table properties").override(cli, "--threshold")

    def min_manifests(self, properties: Mapping[str, str]) -> int:
        if self.rewrite_manifests_min_manifests is not None:
            return self.rewrite_manifests_min_manifests
        raw = properties.get(MIN_COUNT_TO_MERGE)
        if raw is None:
            return DEFAULT_MIN_COUNT_TO_MERGE
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            # Never silently replaced by the default: the table says something Iceberg cannot use.
            raise ConfigError(
                f"table property {MIN_COUNT_TO_MERGE}={raw!r} is not a non-negative integer: "
                f"fix the property, or pass --threshold rewrite-manifests.min-manifests=N"
            )
        return value


def _key(name: str) -> str:
    for job in (
        "compact",
        "expire",
        "rewrite_manifests",
        "rewrite_position_deletes",
        "rewrite_equality_deletes",
        "remove_orphans",
        "delta",
    ):
        if name.startswith(job + "_"):
            rest = name[len(job) + 1 :]
            prefix = "expire-snapshots" if job == "expire" else job.replace("_", "-")
            return f"{prefix}.{rest.replace('_', '-')}"
    return name.replace("_", "-")


def _parse(name: str, text: str, key: str, where: str) -> Any:
    kind = {f.name: f.type for f in dataclasses.fields(Thresholds)}[name]
    try:
        if "bool" in str(kind):
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(text)
            return lowered == "true"
        if name == "compact_max_files_per_lookup":
            files = float(text)
            if not files >= 1:  # also refuses nan
                raise ValueError(text)
            return files
        if "float" in str(kind):
            share = float(text)
            if not 0 <= share <= 1:  # also refuses nan
                raise ValueError(text)
            return share
        value = int(text)
        if value < 0:
            raise ValueError(text)
        return value
    except ValueError:
        raise ConfigError(f"health threshold {key}={text!r} in {where} is not a valid {kind}") from None


def parse_threshold_args(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--threshold {item!r} is not KEY=VALUE: e.g. compact.min-files=10")
        out[key.strip()] = value.strip()
    Thresholds().override(out, "--threshold")  # unknown keys and bad values fail before any work
    return out


@dataclass(frozen=True)
class Recommendation:
    job: str
    reason: str
    threshold: str  # the threshold crossed, KEY=VALUE
    effect: Mapping[str, Any] = field(default_factory=dict, hash=False)
    # For ranking tables: bytes the job frees, and files (data, delete, manifest) it removes.
    bytes_freed: int = 0
    files_removed: int = 0
    # From the ledger's past runs (jobs.health.estimates); None without a ledger or past runs.
    expected_duration_ms: int | None = None
    duration_basis: str | None = None  # "table": its own runs; "fleet": the job's time per file
    # The median relative error of this kind of estimate over the table's last runs of the job:
    # {"runs": N, "bytes_freed": e, "files_removed": e, "duration_ms": e} (e None: not comparable).
    error: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job,
            "reason": self.reason,
            "threshold": self.threshold,
            "expected": dict(self.effect),
            "bytes_freed": self.bytes_freed,
            "files_removed": self.files_removed,
        }
        if self.expected_duration_ms is not None:
            body["expected_duration_ms"] = self.expected_duration_ms
            body["duration_basis"] = self.duration_basis
        if self.error is not None:
            body["error"] = dict(self.error)
        return body


@dataclass(frozen=True)
class TableHealth:
    table: str
    format: str  # iceberg | delta
    metrics: Mapping[str, Any] = field(default_factory=dict, hash=False)
    recommendations: tuple[Recommendation, ...] = ()
    error: str | None = None  # a table of a fleet that could not be read (the others still are)
    thresholds: Mapping[str, Any] = field(default_factory=dict, hash=False)  # KEY -> value in effect

    @property
    def bytes_freed(self) -> int:
        return sum(r.bytes_freed for r in self.recommendations)

    @property
    def files_removed(self) -> int:
        return sum(r.files_removed for r in self.recommendations)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "table": self.table,
            "format": self.format,
            "metrics": dict(self.metrics),
            "recommendations": [r.to_json() for r in self.recommendations],
            "thresholds": dict(self.thresholds),
            "expected_bytes_freed": self.bytes_freed,
            "expected_files_removed": self.files_removed,
        }
        if self.error is not None:
            body["error"] = self.error
        return body
