"""Jobs: one module (or package, with its private helpers) per job, each options -> plan ->
execute -> result; what several share lives in ``jobs.common``, which no job owns.

The registry below is the one list of jobs: the command line's subcommands, the spark-submit
scripts (``jobs/<name>.py`` at the top of the project, one per job, checked by a test) and the
Airflow tasks come from it. A job module follows ``jobs.common.context``'s contract; adding a job
is its module and one ``register_job``. Importing this module imports no job (the command line
stays JVM-free until a job runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class JobEntry:
    name: str  # the subcommand, e.g. "expire-snapshots"
    module: str  # the job module, imported when the job runs or its options are parsed
    help: str

    @property
    def script(self) -> str:
        """The spark-submit script, relative to the project root."""
        return f"jobs/{self.name.replace('-', '_')}.py"


_JOBS: dict[str, JobEntry] = {}
# Subcommand -> its entry, in the order the command line lists them.
JOBS = MappingProxyType(_JOBS)


def register_job(name: str, module: str, help: str) -> JobEntry:
    """Add a job; a name registered twice is a programming error, not a replacement."""
    if name in _JOBS:
        raise ValueError(f"job {name!r} is registered already (by {_JOBS[name].module})")
    entry = JobEntry(name, module, help)
    _JOBS[name] = entry
    return entry


register_job(
    "convert-delta",
    "tablekeeper.jobs.convert_delta",
    "convert a Delta table to Iceberg by replaying its log",
)
register_job(
    "expire-snapshots",
    "tablekeeper.jobs.expire_snapshots",
    "drop old snapshots, then delete the files only they reached",
)
register_job(
    "remove-orphans",
    "tablekeeper.jobs.remove_orphans",
    "delete files under a table location no metadata references",
)
register_job(
    "restore",
    "tablekeeper.jobs.restore",
    "put back the files a quarantined run moved aside (expire-snapshots, remove-orphans --quarantine)",
)
register_job(
    "purge",
    "tablekeeper.jobs.purge",
    "delete a table's quarantined runs past their time",
)
register_job(
    "compact",
    "tablekeeper.jobs.compact",
    "rewrite small data files into target-size files, deletes applied, lineage kept",
)
register_job(
    "backfill-row-lineage",
    "tablekeeper.jobs.backfill_row_lineage",
    "upgrade to Iceberg v3 and give existing rows row ids (metadata only)",
)
register_job(
    "compute-stats",
    "tablekeeper.jobs.compute_stats",
    "number-of-distinct-values sketches of columns (Puffin); partition statistics files",
)
register_job(
    "rewrite-position-deletes",
    "tablekeeper.jobs.rewrite_position_deletes",
    "merge small position delete files; on v3, one deletion vector per data file",
)
register_job(
    "rewrite-equality-deletes",
    "tablekeeper.jobs.rewrite_equality_deletes",
    "resolve equality deletes into deletion vectors (v3) or position deletes (v2); no data rewritten",
)
register_job(
    "rewrite-manifests",
    "tablekeeper.jobs.rewrite_manifests",
    "regroup manifests by partition into target-size manifests; row ids and sequence numbers kept",
)
register_job(
    "health",
    "tablekeeper.jobs.health",
    "which tables need which maintenance, and what each job would save (metadata only)",
)
register_job(
    "validate-conversion",
    "tablekeeper.jobs.validate_conversion",
    "compare a converted table's rows with its Delta source's at the converted version",
)
