"""health's report for people: one self-contained HTML page (inline CSS and SVG, no script, no
request to anywhere), readable on a phone.

Pure: the checked tables, the summary and the ledger's runs in, the page's text out; every value
shown is escaped. The page: a summary, the tables ranked as health sorted them, then each table
with its recommendations (estimates and their past error), its file-size histogram, delete and
manifest pressure, its layout metrics when health measured them, and the last runs of the ledger
with what health predicted beside what they did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from typing import Any

from tablekeeper import __version__
from tablekeeper.jobs.common.accuracy import MEASURES, PastRun, relative_error
from tablekeeper.jobs.common.ledger import micros_to_iso
from tablekeeper.jobs.health.model import Recommendation, TableHealth
from tablekeeper.jobs.health.report import human_bytes
from tablekeeper.jobs.health.svg import bars, columns, pairs

# Runs of the ledger shown (newest first).
RUNS_SHOWN = 20

_CSS = """
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232a;
background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:12px}
h1{font-size:1.45rem;margin:.4rem 0}h2{font-size:1.2rem;margin:1.6rem 0 .5rem}
h3{font-size:1.02rem;margin:.9rem 0 .4rem}
.sub{color:#5b6570;margin:0 0 1rem}
section.card{background:#fff;border:1px solid #dde2e7;border-radius:8px;padding:12px 14px;margin:14px 0}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,150px),1fr));gap:10px}
.tile{background:#f1f4f8;border-radius:6px;padding:8px 10px}
.tile b{display:block;font-size:1.3rem}
.tile span{color:#5b6570;font-size:.85rem}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{text-align:left;padding:5px 7px;border-bottom:1px solid #e6e9ed;vertical-align:top}
th{background:#f1f4f8;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.name{overflow-wrap:anywhere}
td.name{min-width:11em}
a{color:#2f6db5}
.badge{display:inline-block;font-size:.75rem;padding:1px 6px;border-radius:10px;background:#e3ebf6;
color:#234;margin-left:6px;vertical-align:middle}
.err{background:#fbeaea;border:1px solid #e7b8b8;padding:8px;border-radius:6px;overflow-wrap:anywhere}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,320px),1fr));gap:12px}
figure.chart-box{margin:0;background:#fbfcfd;border:1px solid #e6e9ed;border-radius:6px;padding:6px}
figcaption{font-size:.85rem;color:#3b444d;margin-bottom:4px}
svg.chart{width:100%;max-width:560px;height:auto;display:block}
section.card>h2:first-child{margin-top:0}
ul.recs{padding-left:1.1rem;margin:.3rem 0}ul.recs li{margin:.45rem 0}
.est{color:#3b444d;font-size:.88rem}
.muted{color:#6b7580}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:.3rem 0;font-size:.88rem}
dl.kv dt{color:#5b6570}dl.kv dd{margin:0;overflow-wrap:anywhere}
@media (max-width:640px){
main{padding:8px}
table.cards thead{display:none}
table.cards tr{display:block;border:1px solid #dde2e7;border-radius:6px;margin:0 0 8px;padding:4px 6px;
background:#fff}
table.cards td{display:flex;justify-content:space-between;gap:10px;border:0;padding:3px 2px;text-align:right}
table.cards td::before{content:attr(data-label);color:#5b6570;text-align:left;flex:0 0 auto}
table.cards td.name{display:block;text-align:left;font-weight:600;min-width:0}
table.cards td.name::before{content:none}
}
"""


def _t(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _bytes(n: int | float | None) -> str:
    return "-" if n is None else human_bytes(int(n))


def _count(n: int | float | None) -> str:
    return "-" if n is None else f"{int(n):,}"


def duration(ms: int | float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{int(ms)} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(int(ms) // 1000, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.0f}%"


_FORMAT = {"bytes_freed": _bytes, "files_removed": _count, "duration_ms": duration}
_MEASURE_NAMES = {"bytes_freed": "bytes", "files_removed": "files", "duration_ms": "time"}


def _td(value: object, label: str, cls: str = "", key: str | None = None, raw: object = None) -> str:
    attrs = f' data-label="{_t(label)}"'
    if cls:
        attrs += f' class="{cls}"'
    if key is not None:
        attrs += f' data-k="{_t(key)}" data-v="{_t(raw)}"'
    return f"<td{attrs}>{_t(value)}</td>"


def render_report(
    label: str,
    tables: Sequence[TableHealth],
    summary: Mapping[str, Any],
    runs: Sequence[PastRun] | None,
    *,
    generated_at: str,
    version: str = __version__,
) -> str:
    """The page. ``runs``: the ledger's runs with a prediction, newest first; None: no ledger."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>tablekeeper health: {_t(label)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        f"<h1>Table health: <span class='name'>{_t(label)}</span></h1>",
        f'<p class="sub">Generated {_t(generated_at)} by tablekeeper {_t(version)}, '
        "from table metadata only.</p>",
        _summary(summary),
        _ranking(tables),
        *(_table(i, h) for i, h in enumerate(tables, 1)),
        _runs(runs),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary(summary: Mapping[str, Any]) -> str:
    tiles = [
        ("tables checked", _count(summary.get("tables_checked"))),
        ("need work", _count(summary.get("tables_needing_work"))),
        ("unreadable", _count(summary.get("tables_unreadable"))),
        ("expected to free", _bytes(summary.get("expected_bytes_freed"))),
        ("files to remove", _count(summary.get("expected_files_removed"))),
    ]
    out = ['<section class="card" id="summary"><h2>Summary</h2><div class="tiles">']
    out += [f'<div class="tile"><b>{_t(v)}</b><span>{_t(k)}</span></div>' for k, v in tiles]
    out.append("</div>")
    jobs = summary.get("recommendations") or {}
    if isinstance(jobs, Mapping) and jobs:
        ranked = sorted(jobs.items(), key=lambda kv: -kv[1])
        rows = [(str(job), float(n), f"{n} table{'' if n == 1 else 's'}") for job, n in ranked]
        out.append(f'<div class="charts">{bars("Recommended jobs", rows, "blue")}</div>')
    out.append("</section>")
    return "".join(out)


def _deletes(m: Mapping[str, Any]) -> int:
    keys = ("position_delete_files", "deletion_vectors", "equality_delete_files")
    return sum(int(m.get(k) or 0) for k in keys) or int(m.get("files_with_deletion_vectors") or 0)


def _ranking(tables: Sequence[TableHealth]) -> str:
    head = ["#", "table", "format", "data files", "small files", "delete files", "manifests", "recommended",
            "frees", "files removed", "expected time"]  # fmt: skip
    numeric = {0, 3, 4, 5, 6, 8, 9, 10}
    out = ['<section class="card" id="ranking"><h2>Tables, most savings first</h2>', '<table class="cards">']
    out.append("<thead><tr>" + "".join(
        f'<th{" class=n" if i in numeric else ""}>{_t(h)}</th>' for i, h in enumerate(head)
    ) + "</tr></thead><tbody>")  # fmt: skip
    for i, h in enumerate(tables, 1):
        m = h.metrics
        timed = [r.expected_duration_ms for r in h.recommendations if r.expected_duration_ms is not None]
        link = f'<a href="#t-{i}">{_t(h.table)}</a>'
        jobs = ", ".join(r.job for r in h.recommendations) or ("unreadable" if h.error else "nothing")
        out.append(
            "<tr>"
            + _td(i, "rank", "n")
            + f'<td class="name" data-label="table">{link}</td>'
            + _td(h.format, "format")
            + _td(_count(m.get("data_files")), "data files", "n")
            + _td(_count(m.get("small_files")), "small files", "n")
            + _td(_count(_deletes(m)), "delete files", "n")
            + _td(_count(m.get("data_manifests", m.get("commits_since_checkpoint"))), "manifests", "n")
            + _td(jobs, "recommended")
            + _td(_bytes(h.bytes_freed) if h.bytes_freed else "-", "frees", "n")
            + _td(_count(h.files_removed) if h.files_removed else "-", "files removed", "n")
            + _td(duration(sum(timed)) if timed else "-", "expected time", "n")
            + "</tr>"
        )
    out.append("</tbody></table></section>")
    return "".join(out)


def _estimate(r: Recommendation) -> str:
    bits = []
    if r.bytes_freed:
        bits.append(f"frees {_bytes(r.bytes_freed)}")
    if r.files_removed:
        bits.append(f"removes {_count(r.files_removed)} files")
    if r.expected_duration_ms is not None:
        basis = "its own past runs" if r.duration_basis == "table" else "the job's time per file elsewhere"
        bits.append(f"takes about {duration(r.expected_duration_ms)} (from {basis})")
    text = "; ".join(bits) or "no bytes or files estimated"
    if r.error:
        errors = ", ".join(
            f"{_MEASURE_NAMES[m]} {_percent(r.error.get(m))}" for m in MEASURES if r.error.get(m) is not None
        )
        text += f". Past error over {r.error.get('runs')} runs: {errors or 'nothing comparable'}"
    else:
        text += ". No past runs with a prediction to judge it by"
    return text + "."


def _recommendations(h: TableHealth) -> str:
    if not h.recommendations:
        return '<p class="muted">Nothing to do: no threshold crossed.</p>'
    out = ['<ul class="recs">']
    for r in h.recommendations:
        effect = "".join(f"<dt>{_t(k)}</dt><dd>{_t(v)}</dd>" for k, v in r.effect.items())
        out.append(
            f"<li><b>{_t(r.job)}</b>: {_t(r.reason)} <span class='muted'>[{_t(r.threshold)}]</span>"
            f'<div class="est">{_t(_estimate(r))}</div>'
            + (f'<dl class="kv">{effect}</dl>' if effect else "")
            + "</li>"
        )
    out.append("</ul>")
    return "".join(out)


def _histogram(m: Mapping[str, Any]) -> str | None:
    rows = m.get("size_histogram")
    if not isinstance(rows, list) or not rows:
        return None
    labels, values, texts = [], [], []
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        low, high = row.get("from_bytes"), row.get("below_bytes")
        labels.append(f"≥{_short(low)}" if high is None else f"<{_short(high)}")
        values.append(float(row.get("files") or 0))
        texts.append(_count(row.get("files")))
    return columns("Data files by size", labels, values, texts, "blue")


def _short(n: object) -> str:
    """A bucket bound as an axis label has room for: 512K, 8M, 922M, 1.5G."""
    if not isinstance(n, int):
        return "?"
    size = float(n)
    for unit in ("", "K", "M", "G", "T"):
        if size < 1024 or unit == "T":
            return f"{size:.0f}{unit}" if size >= 10 or size == int(size) else f"{size:.1f}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _scalar_rows(m: Mapping[str, Any], keys: Iterable[tuple[str, str, str]]) -> list[tuple[str, float, str]]:
    rows = []
    for key, name, kind in keys:
        value = m.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append((name, float(value), _bytes(value) if kind == "bytes" else _count(value)))
    return rows


def _delete_pressure(m: Mapping[str, Any]) -> str | None:
    rows = _scalar_rows(
        m,
        [
            ("position_delete_files", "position delete files", "n"),
            ("deletion_vectors", "deletion vectors", "n"),
            ("equality_delete_files", "equality delete files", "n"),
            ("files_with_deletion_vectors", "files with DVs", "n"),
            ("position_deleted_rows", "position-deleted rows", "n"),
            ("equality_delete_rows", "equality delete rows", "n"),
            ("deletion_vector_rows", "rows deleted by DVs", "n"),
        ],
    )
    if not rows:
        return None
    share = m.get("deleted_rows_share")
    title = "Delete pressure" + (f" ({_percent(share)} of rows deleted)" if isinstance(share, float) else "")
    return bars(title, rows, "red")


def _manifest_pressure(m: Mapping[str, Any]) -> str | None:
    rows = _scalar_rows(
        m,
        [
            ("data_manifests", "data manifests", "n"),
            ("delete_manifests", "delete manifests", "n"),
            ("snapshots", "snapshots", "n"),
            ("expirable_snapshots", "expirable snapshots", "n"),
            ("metadata_log_entries", "metadata log entries", "n"),
            ("commits_since_checkpoint", "commits since checkpoint", "n"),
            ("tombstones", "tombstones", "n"),
        ],
    )
    sizes = _scalar_rows(
        m,
        [
            ("data_manifest_bytes", "data manifest bytes", "bytes"),
            ("delete_manifest_bytes", "delete manifest bytes", "bytes"),
            ("metadata_json_bytes", "metadata.json", "bytes"),
        ],
    )
    if not rows:
        return None
    note = ", ".join(f"{name} {text}" for name, _, text in sizes)
    return bars("Metadata pressure" + (f" ({note})" if note else ""), rows, "orange")


def _layout(m: Mapping[str, Any]) -> str:
    """Layout quality, when health measured it: files a point lookup opens per column, now and
    after the sort rewrite health predicts, and the partitions where lookups cost most."""
    layout = m.get("layout")
    if not isinstance(layout, Mapping) or not layout:
        return ""
    measured = [c for c in layout.get("columns") or () if isinstance(c, Mapping)]
    after = layout.get("sort_compaction")
    predicted = after.get("files_per_lookup_after") if isinstance(after, Mapping) else None
    lead = after.get("column") if isinstance(after, Mapping) else None
    rows: list[tuple[str, float, float, str, str]] = []
    facts: list[tuple[str, str]] = [("judged by", str(layout.get("source", "-")))]
    for c in measured:
        now = c.get("files_per_lookup")
        if not isinstance(now, (int, float)):
            continue
        then = predicted if c.get("column") == lead and isinstance(predicted, (int, float)) else now
        rows.append((str(c.get("column")), float(now), float(then), f"{now:.2f}", f"{then:.2f}"))
        facts.append(
            (
                f"{c.get('column')}",
                f"{_percent(c.get('lookup_share'))} of a partition's files per lookup, overlap "
                f"depth {_scalar(c.get('overlap_depth'))}, "
                f"{_count(c.get('files_without_bounds'))} files without bounds",
            )
        )
    out = ['<h3>Layout</h3><dl class="kv layout">']
    out.append("".join(f"<dt>{_t(k)}</dt><dd>{_t(v)}</dd>" for k, v in facts) + "</dl>")
    if rows:
        strategy = after.get("strategy", "sort") if isinstance(after, Mapping) else "sort"
        out.append(
            '<div class="charts">'
            + pairs("Data files a point lookup opens", rows, ("now", f"after a {strategy} rewrite"))
            + "</div>"
        )
    worst = measured[0].get("worst_partitions") if measured else None
    out.append(
        _partition_table(
            "",
            worst,
            [
                ("files", lambda r: _count(r.get("files"))),
                ("files per lookup", lambda r: _scalar(r.get("files_per_lookup"))),
            ],
        )
    )
    return "".join(out)


def _partition_table(
    title: str, rows: object, columns: Sequence[tuple[str, Callable[[Mapping[str, Any]], str]]]
) -> str:
    """Rows naming a ``partition`` (field -> value) as a table, one number column each of
    ``columns`` (its header and how a row shows it); nothing when there are no rows."""
    if not isinstance(rows, list) or not rows:
        return ""
    heads = "".join(f'<th class="n">{_t(head)}</th>' for head, _ in columns)
    out = [f'{title}<table class="cards"><thead><tr><th>partition</th>{heads}</tr></thead><tbody>']
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        part = row.get("partition")
        text = ", ".join(f"{k}={v}" for k, v in part.items()) if isinstance(part, Mapping) else str(part)
        cells = "".join(_td(show(row), head, "n") for head, show in columns)
        out.append("<tr>" + _td(text or "(unpartitioned)", "partition", "name") + cells + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _scalar(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def _partitions(m: Mapping[str, Any]) -> str:
    return _partition_table(
        "<h3>Partitions with the most small files</h3>",
        m.get("top_small_file_partitions"),
        [
            ("small files", lambda r: _count(r.get("small_files"))),
            ("bytes", lambda r: _bytes(r.get("small_bytes"))),
        ],
    )


def _table(i: int, h: TableHealth) -> str:
    m = h.metrics
    out = [
        f'<section class="card table-health" id="t-{i}">',
        f'<h2><span class="name">{i}. {_t(h.table)}</span><span class="badge">{_t(h.format)}</span></h2>',
    ]
    if h.error:
        out.append(f'<p class="err">Could not be read: {_t(h.error)}</p></section>')
        return "".join(out)
    facts = [
        ("data", f"{_count(m.get('data_files'))} files, {_bytes(m.get('data_bytes'))}"),
        ("records", _count(m.get("data_records"))),
        ("small files", f"{_count(m.get('small_files'))} below {_bytes(m.get('small_file_size'))}"),
    ]
    out.append('<dl class="kv">' + "".join(f"<dt>{_t(k)}</dt><dd>{_t(v)}</dd>" for k, v in facts) + "</dl>")
    out.append("<h3>Recommendations</h3>" + _recommendations(h))
    charts = [c for c in (_histogram(m), _delete_pressure(m), _manifest_pressure(m)) if c]
    if charts:
        out.append('<div class="charts">' + "".join(charts) + "</div>")
    out.append(_layout(m))
    out.append(_partitions(m))
    notes = m.get("notes")
    if isinstance(notes, list) and notes:
        out.append('<h3>Notes</h3><ul class="recs">' + "".join(f"<li>{_t(n)}</li>" for n in notes) + "</ul>")
    out.append("</section>")
    return "".join(out)


def _runs(runs: Sequence[PastRun] | None) -> str:
    out = ['<section class="card" id="runs"><h2>Last runs: predicted against actual</h2>']
    if runs is None:
        out.append(
            '<p class="muted">No ledger of runs is configured (--ledger-catalog, or a ledger block in '
            "the catalog file), so no past runs to compare.</p></section>"
        )
        return "".join(out)
    shown = [r for r in runs if r.predicted is not None and r.actual is not None][:RUNS_SHOWN]
    if not shown:
        out.append('<p class="muted">No run in the ledger carries a prediction of health yet.</p></section>')
        return "".join(out)
    timed = [r for r in shown if r.predicted and r.predicted.duration_ms is not None]
    if timed:
        rows = [
            (
                f"{r.job} on {r.table}",
                float(r.predicted.duration_ms or 0),  # type: ignore[union-attr]
                float(r.actual.duration_ms or 0),  # type: ignore[union-attr]
                duration(r.predicted.duration_ms),  # type: ignore[union-attr]
                duration(r.actual.duration_ms),  # type: ignore[union-attr]
            )
            for r in timed[:8]
        ]
        out.append(f'<div class="charts">{pairs("Duration: predicted and actual", rows)}</div>')
    head = ["started (UTC)", "job", "table"]
    for m in MEASURES:
        head += [
            f"{_MEASURE_NAMES[m]} predicted",
            f"{_MEASURE_NAMES[m]} actual",
            f"{_MEASURE_NAMES[m]} error",
        ]
    out.append('<table class="cards" id="runs-table"><thead><tr>')
    out.append("".join(f"<th>{_t(h)}</th>" for h in head) + "</tr></thead><tbody>")
    for r in shown:
        cells = [
            _td(micros_to_iso(r.started_at)[:19].replace("T", " "), "started (UTC)"),
            _td(r.job, "job", key="job", raw=r.job),
            _td(r.table, "table", "name", key="table", raw=r.table),
        ]
        for m in MEASURES:
            p, a = r.predicted.get(m), r.actual.get(m)  # type: ignore[union-attr]
            name = _MEASURE_NAMES[m]
            cells.append(_td(_FORMAT[m](p), f"{name} predicted", "n", f"predicted-{m}", p))
            cells.append(_td(_FORMAT[m](a), f"{name} actual", "n", f"actual-{m}", a))
            cells.append(_td(_percent(relative_error(p, a)), f"{name} error", "n"))
        out.append(f'<tr data-run="{_t(r.run_id)}">' + "".join(cells) + "</tr>")
    out.append("</tbody></table></section>")
    return "".join(out)
