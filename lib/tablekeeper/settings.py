"""Where tablekeeper finds its configuration and jars, and what they say.

The files live in the repository's ``conf/`` (or ``$TABLEKEEPER_HOME/conf``); the jars in
``.jars/`` beside it (or ``$TABLEKEEPER_JARS_DIR``). Only the interface and engine layers use this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tablekeeper.errors import ConfigError

HOME_ENV = "TABLEKEEPER_HOME"
JARS_ENV = "TABLEKEEPER_JARS_DIR"
WAREHOUSE_ENV = "TABLEKEEPER_WAREHOUSE"

JARS_FILE = "jars.txt"
SPARK_DEFAULTS_FILE = "spark-defaults.conf"
CATALOGS_FILE = "catalogs.yaml"


@dataclass(frozen=True)
class JarSpec:
    """One pinned Maven artifact and the role it plays (delta, iceberg, jdbc, ...)."""

    role: str
    group: str
    artifact: str
    version: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        # The name `mvn dependency:copy` gives the jar.
        return f"{self.artifact}-{self.version}.jar"


def project_home() -> Path:
    """The directory holding ``conf/``: $TABLEKEEPER_HOME, else the source tree of this package."""
    env = os.environ.get(HOME_ENV)
    if env:
        home = Path(env).expanduser().resolve()
        if not (home / "conf" / JARS_FILE).is_file():
            raise ConfigError(f"{HOME_ENV}={env} has no conf/{JARS_FILE}: point it at a tablekeeper checkout")
        return home
    for parent in Path(__file__).resolve().parents:
        if (parent / "conf" / JARS_FILE).is_file():
            return parent
    cwd = Path.cwd()
    if (cwd / "conf" / JARS_FILE).is_file():
        return cwd
    raise ConfigError(f"conf/{JARS_FILE} not found: run from a tablekeeper checkout or set {HOME_ENV}")


def conf_dir() -> Path:
    return project_home() / "conf"


def jars_dir() -> Path:
    env = os.environ.get(JARS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return project_home() / ".jars"


def default_warehouse() -> Path:
    env = os.environ.get(WAREHOUSE_ENV)
    return Path(env).expanduser().resolve() if env else (Path.cwd() / "warehouse").resolve()


def parse_jar_specs(text: str, source: str = JARS_FILE) -> tuple[JarSpec, ...]:
    specs: list[JarSpec] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        parts = fields[1].split(":") if len(fields) == 2 else []
        if len(parts) != 3 or not all(parts):
            raise ConfigError(
                f"{source}:{lineno}: expected '<role> <group>:<artifact>:<version>', got {raw.strip()!r}"
            )
        specs.append(JarSpec(fields[0], parts[0], parts[1], parts[2]))
    if not specs:
        raise ConfigError(f"{source} lists no jars: restore it from the repository")
    return tuple(specs)


BENCH_ROLE = "bench"


def jar_specs(*, include_bench: bool = False) -> tuple[JarSpec, ...]:
    """The runtime jars; ``include_bench`` adds the reference engines only benchmarks load."""
    path = conf_dir() / JARS_FILE
    specs = parse_jar_specs(path.read_text(encoding="utf-8"), str(path))
    return specs if include_bench else tuple(s for s in specs if s.role != BENCH_ROLE)


def parse_properties(text: str) -> dict[str, str]:
    """Spark's ``spark-defaults.conf`` form: ``key  value`` per line, ``#`` comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        props[key] = value.strip()
    return props


def spark_defaults() -> dict[str, str]:
    path = conf_dir() / SPARK_DEFAULTS_FILE
    return parse_properties(path.read_text(encoding="utf-8")) if path.is_file() else {}


def expand(value: str, variables: Mapping[str, str]) -> str:
    for name, replacement in variables.items():
        value = value.replace("${" + name + "}", replacement)
    return value
