"""``tablekeeper doctor``: what runtime tablekeeper would use, and the fix for what is missing.

It never starts a JVM, so it answers in well under a second even when Spark would not start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from tablekeeper import __version__
from tablekeeper.catalog.config import load_catalogs
from tablekeeper.errors import ConfigError
from tablekeeper.lines import DEFAULT_LINE, LINES, SparkLine, line_named
from tablekeeper.redact import redact, redacted_properties
from tablekeeper.settings import PACKAGE_ROLES, JarSpec, jar_specs, jars_dir, spark_line

MIN_JAVA = 17
MIN_PYTHON = (3, 10)
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')


@dataclass(frozen=True)
class JarStatus:
    role: str
    coordinate: str
    path: str
    present: bool


@dataclass(frozen=True)
class CatalogStatus:
    """A catalog as configured, fit to print: secret values are masked."""

    name: str
    type: str
    uri: str | None
    warehouse: str
    properties: Mapping[str, str]


@dataclass(frozen=True)
class DoctorReport:
    tablekeeper: str
    python: str
    java: str | None
    java_home: str | None
    spark: str | None
    # The supported line the installed pyspark is on (tablekeeper.lines), None when it is on none.
    line: str | None
    delta: str | None
    delta_python: str | None
    iceberg: str | None
    jars_dir: str
    jars: tuple[JarStatus, ...]
    packages: str
    problems: tuple[str, ...]
    catalogs: tuple[CatalogStatus, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> str:
        body = asdict(self)
        body["ok"] = self.ok
        return json.dumps(body, sort_keys=False)

    def to_text(self) -> str:
        rows = [
            ("tablekeeper", self.tablekeeper),
            ("python", self.python),
            ("java", f"{self.java} ({self.java_home})" if self.java else "missing"),
            ("spark (pyspark)", self.spark or "missing"),
            ("spark line", self.line or "unsupported"),
            ("delta", f"{self.delta} (python API {self.delta_python or 'missing'})"),
            ("iceberg", self.iceberg or "missing"),
            ("jars", self.jars_dir),
        ]
        rows += [(f"  {j.role}", f"{j.path}{'' if j.present else '  MISSING'}") for j in self.jars]
        rows.append(("--packages", self.packages))
        for c in self.catalogs:
            settings = ", ".join(f"{k}={v}" for k, v in c.properties.items())
            where = c.uri or c.warehouse
            rows.append((f"catalog {c.name}", f"{c.type} {where}" + (f" ({settings})" if settings else "")))
        width = max(len(k) for k, _ in rows)
        lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
        lines += [f"problem: {p}" for p in self.problems] or ["all good"]
        return "\n".join(lines)


def _java() -> tuple[str | None, str | None]:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    exe = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    if exe is None:
        return None, None
    try:
        out = subprocess.run(
            [exe, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    match = _JAVA_VERSION.search(out)
    home = str(Path(exe).resolve().parent.parent)
    return (match.group(0).split('"')[1] if match else None), home


def _java_major(version: str) -> int:
    head, _, rest = version.partition(".")
    # Java 8 and older report "1.8.0_x".
    return int(rest.partition(".")[0]) if head == "1" else int(head)


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _spark_line(specs: tuple[JarSpec, ...]) -> str | None:
    """The Spark minor a runtime jar was built for, from its artifact name (…-runtime-4.1_2.13)."""
    for spec in specs:
        match = re.search(r"-(\d+\.\d+)_2\.\d+$", spec.artifact) or re.search(
            r"_(\d+\.\d+)_2\.\d+$", spec.artifact
        )
        if match:
            return match.group(1)
    return None


def _describe(line: SparkLine | None) -> str | None:
    if line is None:
        return None
    return f"{line.name} (Scala {line.scala}, Delta {line.delta}, Iceberg {line.iceberg})"


def diagnose(conf_file: Path | None = None) -> DoctorReport:
    problems: list[str] = []
    if sys.version_info < MIN_PYTHON:
        problems.append(f"Python {sys.version.split()[0]} is too old: use Python 3.10+")
    java, java_home = _java()
    if java is None:
        problems.append(f"Java {MIN_JAVA}+ not found: install a JDK {MIN_JAVA} and set JAVA_HOME")
    elif _java_major(java) < MIN_JAVA:
        problems.append(f"Java {java} is too old: install a JDK {MIN_JAVA} and set JAVA_HOME")
    spark = _dist_version("pyspark")
    if spark is None:
        problems.append("pyspark not installed: run make setup")
    installed = spark_line()
    supported = line_named(installed) if installed else None
    if spark is not None and supported is None:
        names = ", ".join(x.name for x in LINES)
        problems.append(
            f"pyspark {spark} is on no supported Spark line ({names}): run make setup "
            f"(Spark {DEFAULT_LINE}) or make setup SPARK=<line>"
        )
    # The setup that builds the installed line's environment and jars.
    default = supported is None or supported.name == DEFAULT_LINE
    setup = "make setup" if default else f"make setup SPARK={installed}"
    specs = jar_specs()
    line = _spark_line(specs)
    if spark and line and not spark.startswith(line + "."):
        problems.append(f"pyspark {spark} does not match the Spark {line} jars: run {setup}")
    directory = jars_dir()
    jars = tuple(
        JarStatus(s.role, s.coordinate, str(directory / s.file_name), (directory / s.file_name).is_file())
        for s in specs
    )
    missing = [j.coordinate for j in jars if not j.present]
    if missing:
        problems.append(f"jars missing from {directory} ({', '.join(missing)}): run {setup}")
    delta = next((s.version for s in specs if s.role == "delta"), None)
    delta_python = _dist_version("delta-spark")
    if delta and delta_python and delta_python != delta:
        problems.append(f"delta-spark Python {delta_python} differs from jar {delta}: run {setup}")
    catalogs: tuple[CatalogStatus, ...] = ()
    try:
        config = load_catalogs(conf_file)
        catalogs = tuple(
            CatalogStatus(
                c.name,
                c.type,
                redact(c.uri) if c.uri else None,
                c.warehouse,
                redacted_properties(c.properties),
            )
            for c in config.catalogs.values()
        )
        problems.extend(config.unusable.values())
    except ConfigError as err:
        problems.append(err.message)
    return DoctorReport(
        catalogs=catalogs,
        tablekeeper=__version__,
        python=sys.version.split()[0],
        java=java,
        java_home=java_home,
        spark=spark,
        line=_describe(supported),
        delta=delta,
        delta_python=delta_python,
        iceberg=next((s.version for s in specs if s.role == "iceberg"), None),
        jars_dir=str(directory),
        jars=jars,
        packages=",".join(s.coordinate for s in specs if s.role in PACKAGE_ROLES),
        problems=tuple(problems),
    )


def run(as_json: bool, conf_file: Path | None = None) -> int:
    report = diagnose(conf_file)
    print(redact(report.to_json() if as_json else report.to_text()))
    if not report.ok:
        raise ConfigError(report.problems[0])
    return 0
