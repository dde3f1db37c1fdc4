"""health's readable table, for a person at a terminal (the JSON line still follows it)."""

from __future__ import annotations

from collections.abc import Sequence

from tablekeeper.jobs.health.model import Recommendation, TableHealth

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _row(h: TableHealth) -> list[str]:
    m = h.metrics
    if h.error:
        return [h.table, h.format, "", "", "", "", "unreadable: " + h.error[:80], "", ""]
    files = str(m.get("data_files", ""))
    small = str(m.get("small_files", ""))
    deletes = sum(
        int(m.get(k) or 0) for k in ("position_delete_files", "deletion_vectors", "equality_delete_files")
    )
    manifests = str(m.get("data_manifests", m.get("commits_since_checkpoint", "")))
    jobs = ", ".join(r.job for r in h.recommendations) or "-"
    return [
        h.table,
        h.format,
        files,
        small,
        str(deletes or m.get("files_with_deletion_vectors", 0)),
        manifests,
        jobs,
        human_bytes(h.bytes_freed) if h.bytes_freed else "-",
        str(h.files_removed) if h.files_removed else "-",
    ]


HEADER = ["table", "format", "files", "small", "deletes", "manifests", "recommended", "frees", "files -"]


def render(tables: Sequence[TableHealth]) -> str:
    rows = [HEADER, *(_row(h) for h in tables)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for h in tables:
        for r in h.recommendations:
            effect = ", ".join(f"{k} {v}" for k, v in r.effect.items())
            lines.append(f"{h.table}: {r.job}: {r.reason} [{r.threshold}] -> {effect}{estimates(r)}")
    return "\n".join(lines)


def estimates(r: Recommendation) -> str:
    """The expected duration and, beside the estimates, their median error over past runs."""
    out = ""
    if r.expected_duration_ms is not None:
        out += f"; takes ~{r.expected_duration_ms / 1000:.1f}s ({r.duration_basis})"
    if r.error:
        names = {"bytes_freed": "bytes", "files_removed": "files", "duration_ms": "time"}
        shares = [f"{n} {r.error[m] * 100:.0f}%" for m, n in names.items() if r.error.get(m) is not None]
        out += f"; past error over {r.error.get('runs')} runs: {', '.join(shares) or 'none comparable'}"
    return out
