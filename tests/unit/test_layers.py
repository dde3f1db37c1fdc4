"""The layer rules of CONTRIBUTING.md, checked on the code's own imports (lazy ones inside functions
too): dependencies point one way, no module takes part in an import cycle, and pyspark stays in the
layers that drive Spark."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[2] / "lib"
PACKAGE = "tablekeeper"

# Lowest first. A module may import its own group and the groups ranked below its own; groups
# sharing a rank are peers that must not import each other.
RANKS: dict[str, int] = {
    "errors": 0,
    "cycles": 0,
    "faults": 1,
    "clock": 1,
    "progress": 1,
    "redact": 1,
    "settings": 1,
    "lines": 1,
    "iceberg": 1,  # pure format code
    "delta": 2,  # pure format code; Delta's mapping to Iceberg builds on iceberg/
    "io": 3,
    "catalog": 4,
    "tables": 5,
    "files": 6,
    "commit": 7,
    "row_counts": 7,
    "delta_row_ids": 7,
    "spark": 8,
    "jobs": 9,
    "cli": 10,
    "demo": 10,
    "__main__": 11,
}
SPARK_GROUPS = {"spark", "jobs", "cli", "demo"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, modules: set[str]) -> Iterator[str]:
    """Every module of the package ``source`` imports, at any depth of the code."""
    package = module if f"{module}.__init__" in modules else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield base
            # ``from tablekeeper import faults`` imports the module tablekeeper.faults.
            yield from (f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)


def import_map() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in (LIB / PACKAGE).rglob("*.py")}
    known = set(paths) | {f"{m}.__init__" for m, p in paths.items() if p.name == "__init__.py"}
    return {m: set(imports_of(p.read_text(encoding="utf-8"), m, known)) for m, p in paths.items()}


def group(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(imports: Mapping[str, set[str]]) -> list[str]:
    out = []
    for module, names in sorted(imports.items()):
        own = group(module)
        if not own:
            continue
        for name in sorted(names):
            if not name.startswith(f"{PACKAGE}.") or group(name) == own:
                continue
            if RANKS[group(name)] >= RANKS[own]:
                out.append(f"{module} imports {name}")
    return out


def cycles(imports: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: sorted(n for n in names if n in imports and n != m) for m, names in imports.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_group_has_a_rank() -> None:
    groups = {group(m) for m in import_map()} - {""}
    assert groups <= set(RANKS), f"give {sorted(groups - set(RANKS))} a rank here and in CONTRIBUTING.md"


def test_no_lower_layer_imports_a_higher_one() -> None:
    assert upward_imports(import_map()) == []


def test_no_import_cycles() -> None:
    assert cycles(import_map()) == []


def test_pyspark_stays_in_the_spark_layers() -> None:
    offenders = sorted(
        m
        for m, names in import_map().items()
        if group(m) not in SPARK_GROUPS and any(n == "pyspark" or n.startswith("pyspark.") for n in names)
    )
    assert offenders == []


@pytest.mark.parametrize(
    ("edges", "upward", "cycle"),
    [
        # The Delta loader lazily started a Spark replay that imported the loader back.
        (
            {
                "tablekeeper.tables.delta": {"tablekeeper.spark.delta_replay"},
                "tablekeeper.spark.delta_replay": {"tablekeeper.tables.delta"},
            },
            ["tablekeeper.tables.delta imports tablekeeper.spark.delta_replay"],
            True,
        ),
        # The manifest writer and the entry encoder it compiles took names from each other.
        (
            {
                "tablekeeper.iceberg.manifest": {"tablekeeper.iceberg.entry_encoder"},
                "tablekeeper.iceberg.entry_encoder": {"tablekeeper.iceberg.manifest"},
            },
            [],
            True,
        ),
        # Format code reaching for storage.
        (
            {"tablekeeper.iceberg.puffin": {"tablekeeper.io.fileio"}, "tablekeeper.io.fileio": set()},
            ["tablekeeper.iceberg.puffin imports tablekeeper.io.fileio"],
            False,
        ),
    ],
)
def test_the_rules_catch_the_shapes_they_forbid(
    edges: dict[str, set[str]], upward: list[str], cycle: bool
) -> None:
    assert upward_imports(edges) == upward
    assert bool(cycles(edges)) is cycle


def test_lazy_and_relative_imports_are_seen() -> None:
    source = "def f():\n    from tablekeeper.spark import get_spark\n    from . import sibling\n"
    modules = {"tablekeeper.spark", "tablekeeper.tables.sibling", "tablekeeper.tables.__init__"}
    found = set(imports_of(source, "tablekeeper.tables.delta", modules))
    assert {"tablekeeper.spark", "tablekeeper.tables.sibling"} <= found
