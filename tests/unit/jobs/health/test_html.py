"""health's HTML report as text: self-contained, every value escaped, optional sections."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tablekeeper.jobs.common.accuracy import Outcome, PastRun
from tablekeeper.jobs.health.html import render_report
from tablekeeper.jobs.health.model import Recommendation, TableHealth

HOSTILE = '<script>alert("x")</script>&"\''


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    return tags


def health(name: str = "db.t", **metrics: object) -> TableHealth:
    base: dict[str, object] = {
        "data_files": 3,
        "small_files": 3,
        "size_histogram": [
            {"from_bytes": 0, "below_bytes": 1024, "files": 3, "bytes": 900},
            {"from_bytes": 1024, "below_bytes": None, "files": 0, "bytes": 0},
        ],
        "position_delete_files": 2,
        "data_manifests": 4,
    }
    rec = Recommendation(
        "compact",
        f"small files {HOSTILE}",
        "compact.min-files=5",
        {"files_rewritten": 3, HOSTILE: HOSTILE},
        files_removed=2,
        expected_duration_ms=1500,
        duration_basis="table",
        error={"runs": 2, "bytes_freed": None, "files_removed": 0.5, "duration_ms": 0.25},
    )
    return TableHealth(name, "iceberg", {**base, **metrics}, (rec,))


def page(tables: list[TableHealth], runs: list[PastRun] | None = None) -> str:
    summary = {"tables_checked": len(tables), "recommendations": {"compact": 1}, "expected_bytes_freed": 0}
    return render_report(HOSTILE, tables, summary, runs, generated_at="2026-01-01T00:00:00.000Z")


def test_every_value_is_escaped_and_nothing_is_fetched() -> None:
    layout = {
        "source": HOSTILE,
        "columns": [
            {
                "column": HOSTILE,
                "files_per_lookup": 2.0,
                "worst_partitions": [{"partition": {HOSTILE: HOSTILE}}],
            }
        ],
        "sort_compaction": {"column": HOSTILE, "strategy": HOSTILE, "files_per_lookup_after": 1.0},
    }
    text = page([health(HOSTILE, layout=layout)])
    assert "<script" not in text
    assert "&lt;script&gt;" in text
    tags = parsed(text)
    assert not [t for t, _ in tags.tags if t in ("script", "link", "img", "iframe")]
    # No address but the SVG namespace: nothing for a browser to request.
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}
    viewport = [a for t, a in tags.tags if t == "meta" and a.get("name") == "viewport"]
    assert viewport and "width=device-width" in (viewport[0]["content"] or "")


def test_the_estimate_and_its_past_error_are_beside_the_recommendation() -> None:
    text = " ".join(parsed(page([health()])).text)
    assert "takes about 1.5s (from its own past runs)" in text
    assert "Past error over 2 runs: files 50%, time 25%" in text


def test_layout_shows_files_per_lookup_now_and_after_the_sort_rewrite() -> None:
    without = page([health()])
    assert "kv layout" not in without
    layout = {
        "source": "sort-order",
        "columns": [
            {
                "column": "id",
                "files_per_lookup": 5.8,
                "lookup_share": 0.97,
                "overlap_depth": 5.9,
                "files_without_bounds": 0,
                "worst_partitions": [
                    {"spec_id": 0, "partition": {"cat": "a"}, "files": 6, "files_per_lookup": 5.9}
                ],
            },
            {"column": "ts", "files_per_lookup": 2.0, "lookup_share": 0.3, "overlap_depth": 2.0},
        ],
        "sort_compaction": {
            "strategy": "sort",
            "column": "id",
            "files_per_lookup_after": 1.0,
            "data_files_after": 12,
        },
    }
    tags = parsed(page([health(layout=layout)]))
    assert any(a.get("class") == "kv layout" for _, a in tags.tags)
    words = " ".join(tags.text)
    assert "97% of a partition's files per lookup" in words
    assert "Data files a point lookup opens" in words
    assert "5.80" in words and "1.00" in words  # id now, and after the rewrite
    assert words.count("2.00") >= 2  # ts: the rewrite by id predicts nothing for it
    assert "cat=a" in words


def test_the_runs_section_says_why_it_is_empty_and_shows_runs() -> None:
    assert "No ledger of runs is configured" in page([health()], None)
    assert "carries a prediction of health yet" in page([health()], [])
    run = PastRun(
        "r1",
        "compact",
        "db.t",
        "tk",
        1_767_225_600_000_000,
        True,
        2000,
        3,
        "h1",
        Outcome(0, 2, 1500),
        Outcome(0, 3, 2000),
    )
    tags = parsed(page([health()], [run]))
    cells = {a["data-k"]: a["data-v"] for t, a in tags.tags if t == "td" and "data-k" in a}
    assert cells["predicted-files_removed"] == "2" and cells["actual-files_removed"] == "3"
    assert cells["predicted-duration_ms"] == "1500" and cells["actual-duration_ms"] == "2000"
    charts = [a for t, a in tags.tags if t == "svg"]
    # summary jobs, histogram, deletes, metadata, durations predicted and actual
    assert len(charts) == 5 and all(a.get("class") == "chart" for a in charts)


def test_an_unreadable_table_says_why() -> None:
    broken = TableHealth("db.gone", "iceberg", error="table db.gone not found")
    text = page([broken])
    assert "Could not be read: table db.gone not found" in text


def test_the_terminal_report_gives_the_estimate_and_its_error() -> None:
    from tablekeeper.jobs.health.report import render

    line = render([health()]).splitlines()[-1]
    assert line.endswith("; takes ~1.5s (table); past error over 2 runs: files 50%, time 25%")


def test_a_report_that_cannot_be_written_fails_the_run_naming_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tablekeeper.cli import main
    from tests.support.health_fleet import build

    conf = build(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    argv = ["health", "--catalog", "tk", "--engine", "driver", "--html", str(blocker / "r.html")]
    assert main([*argv, "--conf-file", str(conf), "--warehouse", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"tablekeeper: cannot write the HTML report to {blocker / 'r.html'}: ")
