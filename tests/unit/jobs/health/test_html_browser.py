"""health's HTML report opened in a real browser: Debian's Chromium, headless, driven by
Playwright (never a browser Playwright downloads; ``make servers`` installs Chromium).

The report is a real one: health over a small catalog (tests.support.health_fleet), with a ledger
holding two rounds of health and expire-snapshots, so the runs section has predictions (one with
a duration) beside what the runs did. The page must load with no console error and no request
beyond the file itself, draw every chart, fit a phone's width, and show the ledger's numbers.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.jobs.common.accuracy import PastRun
from tablekeeper.jobs.common.ledger import HistoryQuery, read_runs
from tablekeeper.jobs.health.html import duration
from tablekeeper.jobs.health.report import human_bytes
from tests.support.health_fleet import append, build, cli, sql_catalog

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: make servers installs Debian's chromium"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PastRun]]:
    """The report after two rounds of health and expire-snapshots, and the ledger's runs."""
    root = tmp_path_factory.mktemp("health-report")
    conf = build(root)
    run = ("--engine", "driver")
    for _ in range(2):
        cli(conf, root, "health", "--catalog", "tk", *run)
        cli(conf, root, "expire-snapshots", "--table", "db.orders", *run)
        append(root, "db.orders", 2)
    path = root / "report" / "health.html"
    # Layout judged by lookups on id: the tables holding one get the files-per-lookup chart.
    result = cli(conf, root, "health", "--catalog", "tk", "--html", str(path), "--layout-columns", "id", *run)
    assert result["status"] == "ok" and path.is_file()
    ledger = sql_catalog(root).load_table("tablekeeper.runs")
    runs = [PastRun.from_row(r) for r in read_runs(ledger, HistoryQuery(job="expire-snapshots", limit=None))]
    return path, [r for r in runs if r.predicted is not None]


def open_page(browser: Any, path: Path, viewport: dict[str, int]) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport=viewport)
    problems: list[str] = []
    requests: list[str] = []
    page.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    return page, problems, requests


def shot(page: Any, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot {path} ({path.stat().st_size} bytes)")
    assert path.stat().st_size > 10_000


def test_the_report_in_chromium(browser: Any, report: tuple[Path, list[PastRun]], tmp_path: Path) -> None:
    path, runs = report
    assert len(runs) == 2 and sum(1 for r in runs if r.predicted and r.predicted.duration_ms) == 1

    page, problems, requests = open_page(browser, path, DESKTOP)
    shot(page, tmp_path / "health-desktop.png")
    assert problems == []
    assert requests == [path.as_uri()]  # the page itself, nothing else
    charts = page.eval_on_selector_all(
        "svg.chart",
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " return [r.width, r.height, e.querySelectorAll('rect, line, text').length] })",
    )
    # The jobs of the summary; per readable table (the three, and the ledger, a table of the
    # catalog too) a histogram, delete and metadata pressure, and the layout's files per lookup
    # where the table has an id; the durations predicted and actual.
    layouts = page.eval_on_selector_all("dl.kv.layout", "els => els.length")
    assert layouts >= 3, layouts
    assert len(charts) == 1 + 4 * 3 + layouts + 1
    assert all(w > 100 and h > 20 and drawn > 2 for w, h, drawn in charts), charts
    ranked = page.eval_on_selector_all("#ranking tbody td.name", "els => els.map(e => e.textContent)")
    assert ranked[0] == "db.orders" and set(ranked) == {
        "db.events",
        "db.orders",
        "db.fresh",
        "tablekeeper.runs",
    }

    # The runs shown are the ledger's, with its numbers.
    rows = page.eval_on_selector_all(
        "#runs-table tr[data-run]",
        "trs => trs.map(tr => [tr.dataset.run, Object.fromEntries([...tr.querySelectorAll('td[data-k]')]"
        ".map(td => [td.dataset.k, [td.dataset.v, td.textContent]]))])",
    )
    assert [run_id for run_id, _ in rows] == [r.run_id for r in runs]
    for (_, cells), run in zip(rows, runs, strict=True):
        assert run.predicted is not None and run.actual is not None
        for side, outcome in (("predicted", run.predicted), ("actual", run.actual)):
            for measure, shown in (
                ("bytes_freed", human_bytes),
                ("files_removed", lambda n: f"{n:,}"),
                ("duration_ms", duration),
            ):
                value = outcome.get(measure)
                raw, text = cells[f"{side}-{measure}"]
                assert raw == ("" if value is None else str(value))
                assert text == ("-" if value is None else shown(value))
        assert cells["table"][0] == "db.orders"
    page.close()

    phone, problems, _ = open_page(browser, path, PHONE)
    shot(phone, tmp_path / "health-phone.png")
    assert problems == []
    width = phone.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")
    assert max(width[:2]) <= width[2], width
    sizes = phone.eval_on_selector_all("svg.chart", "els => els.map(e => e.getBoundingClientRect().right)")
    assert sizes and max(sizes) <= PHONE["width"]
    phone.close()
