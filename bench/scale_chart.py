"""The scale benchmark's charts: per job, time and driver peak memory against size, per engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed, or wanted, on a build machine

import matplotlib.pyplot as plt

COLORS = {"tablekeeper-spark": "tab:blue", "iceberg": "tab:orange"}
FAILED = {"oom": "out of memory", "timeout": "timed out", "error": "failed"}


def _points(sizes: Sequence[Mapping[str, object]], engine: str, field: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for entry in sizes:
        run = entry["results"].get(engine)  # type: ignore[attr-defined]
        if run is not None and run.get("status") == "ok" and run.get(field) is not None:
            xs.append(int(entry["size"]))  # type: ignore[call-overload]
            ys.append(float(run[field]))
    return xs, ys


def draw(
    title: str,
    unit: str,
    sizes: Sequence[Mapping[str, object]],
    engines: Sequence[str],
    path: Path,
    memory_goal_mib: float | None = None,
) -> None:
    """Two panels, seconds and driver peak MiB (total solid, the JVM's part dashed); a size an
    engine did not finish is marked on the axis with why."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for engine in engines:
        color = COLORS.get(engine)
        xs, ys = _points(sizes, engine, "seconds")
        left.plot(xs, ys, "o-", color=color, label=engine)
        if engine == "tablekeeper-spark" and len(xs) > 1:
            # Proportional to size from the smallest: on log-log axes, linear growth runs parallel.
            left.plot(
                [xs[0], xs[-1]],
                [ys[0], ys[0] * xs[-1] / xs[0]],
                ":",
                color=color,
                label=f"{engine} x size (linear)",
            )
        xs, ys = _points(sizes, engine, "driver_peak_mib")
        right.plot(xs, ys, "o-", color=color, label=f"{engine} (Python + JVM)")
        xs, ys = _points(sizes, engine, "jvm_peak_mib")
        right.plot(xs, ys, "s--", color=color, alpha=0.6, markersize=4, label=f"{engine} (JVM)")
        for entry in sizes:
            run = entry["results"].get(engine)  # type: ignore[attr-defined]
            if run is None or run.get("status") not in FAILED:
                continue
            for ax in (left, right):
                ax.axvline(int(entry["size"]), color=color, alpha=0.3, linewidth=6)  # type: ignore[call-overload]
                ax.annotate(
                    f"{engine}\n{FAILED[run['status']]}",
                    (int(entry["size"]), 0.95),  # type: ignore[call-overload]
                    xycoords=("data", "axes fraction"),
                    ha="center",
                    va="top",
                    fontsize=7,
                    color=color,
                )
    if memory_goal_mib is not None:
        right.axhline(
            memory_goal_mib, color="tab:red", linestyle=":", label=f"goal: {memory_goal_mib:,.0f} MiB"
        )
    left.set_ylabel("seconds (JVM start-up excluded), log")
    left.set_yscale("log")
    left.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    # Only 2, 3 and 5 of each decade labelled: all nine crowd the axis.
    left.yaxis.set_minor_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if f"{v:.0e}"[0] in "235" else "")
    )
    right.set_ylabel("driver peak RSS, MiB")
    ticks = sorted({int(e["size"]) for e in sizes})  # type: ignore[call-overload]
    for ax in (left, right):
        ax.set_xlabel(unit)
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks], fontsize=8)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    right.set_ylim(bottom=0, top=right.get_ylim()[1] * 1.25)  # room for the legend
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
