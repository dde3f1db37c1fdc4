"""Where tablekeeper finds its configuration and jars, and what they say.

The files live in the repository's ``conf/`` (or ``$TABLEKEEPER_HOME/conf``); the jars in
``.jars/`` beside it (or ``$TABLEKEEPER_JARS_DIR``). Only the interface and engine layers use this.

The jars follow the installed pyspark's line: ``conf/jars.txt`` is the default line's (4.1), and a
line with a ``conf/lines/<line>/jars.txt`` takes its Spark-side jars from there and keeps them in
``.lines/<line>/jars/`` (``make setup SPARK=<line>`` fetches them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from tablekeeper.errors import ConfigError

HOME_ENV = "TABLEKEEPER_HOME"
JARS_ENV = "TABLEKEEPER_JARS_DIR"
WAREHOUSE_ENV = "TABLEKEEPER_WAREHOUSE"

JARS_FILE = "jars.txt"
LINES_DIR = "lines"
SPARK_DEFAULTS_FILE = "spark-defaults.conf"
CATALOGS_FILE = "catalogs.yaml"


@dataclass(frozen=True)
class JarSpec:
    """One pinned Maven artifact and the role it plays (delta, iceberg, jdbc, ...). Nearly all are
    jars; a test server shipped as a distribution archive names its packaging (``tar.gz``)."""

    role: str
    group: str
    artifact: str
    version: str
    classifier: str = ""
    packaging: str = "jar"

    @property
    def coordinate(self) -> str:
        """The ``--packages`` form (Ivy takes no classifier; runtime roles have none)."""
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def maven_artifact(self) -> str:
        """The ``mvn dependency:copy -Dartifact`` form, with the packaging and classifier if any."""
        if self.classifier:
            return f"{self.coordinate}:{self.packaging}:{self.classifier}"
        return self.coordinate if self.packaging == "jar" else f"{self.coordinate}:{self.packaging}"

    @property
    def file_name(self) -> str:
        # The name `mvn dependency:copy` gives the file.
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.{self.packaging}"

    @property
    def directory(self) -> str:
        """Where under ``.jars/`` it lives: servers the tests start get a directory each, so they
        never share a classpath with Spark."""
        return self.role if self.role.startswith(TEST_ROLE_PREFIX) else ""


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


def pyspark_version() -> str | None:
    """The installed pyspark's version, read without importing it (this layer drives no Spark):
    its distribution metadata, else (pyspark put on the path by spark-submit) its version.py."""
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pass
    spec = util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"__version__[^=]*=\s*[\"']([^\"']+)", text)
    return match.group(1) if match else None


def spark_line() -> str | None:
    """The installed pyspark's line (``3.5``), or None without pyspark."""
    version = pyspark_version()
    return ".".join(version.split(".")[:2]) if version else None


def line_jars_file() -> Path | None:
    """``conf/lines/<line>/jars.txt`` of the installed line, None for the default line's."""
    line = spark_line()
    path = conf_dir() / LINES_DIR / line / JARS_FILE if line else None
    return path if path is not None and path.is_file() else None


def jars_dir() -> Path:
    env = os.environ.get(JARS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    own = line_jars_file()
    if own is not None:
        return project_home() / ".lines" / own.parent.name / "jars"
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
        # The fifth part, a packaging, may follow an empty classifier (group:artifact:v::tar.gz).
        named = parts[:3] + parts[4:] if len(parts) == 5 else parts
        if len(parts) not in (3, 4, 5) or not all(named):
            raise ConfigError(
                f"{source}:{lineno}: expected '<role> <group>:<artifact>:<version>[:<classifier>]' "
                f"(or ':<classifier>:<packaging>' for an archive), got {raw.strip()!r}"
            )
        specs.append(JarSpec(fields[0], *parts))
    if not specs:
        raise ConfigError(f"{source} lists no jars: restore it from the repository")
    return tuple(specs)


BENCH_ROLE = "bench"
TEST_ROLE_PREFIX = "test-"
# What a cluster submit ships with --packages. Role "s3" stays out: clusters that read S3 mostly
# have S3A already (EMR, Dataproc), and Ivy would pull hadoop-aws's 612 MiB SDK bundle with it.
PACKAGE_ROLES = ("delta", "iceberg", "jdbc")


def all_jar_specs() -> tuple[JarSpec, ...]:
    """Every pinned jar of the installed line. The servers the tests start (roles ``test-*``) run
    in JVMs of their own, alike for every line: they are always ``conf/jars.txt``'s."""
    path = conf_dir() / JARS_FILE
    default = parse_jar_specs(path.read_text(encoding="utf-8"), str(path))
    own = line_jars_file()
    if own is None:
        return default
    specs = parse_jar_specs(own.read_text(encoding="utf-8"), str(own))
    return specs + tuple(s for s in default if s.role.startswith(TEST_ROLE_PREFIX))


def jar_specs(*, include_bench: bool = False) -> tuple[JarSpec, ...]:
    """The runtime jars; ``include_bench`` adds the reference engines only benchmarks load.
    Servers the tests start (roles ``test-*``) are never among them."""
    return tuple(
        s
        for s in all_jar_specs()
        if not s.role.startswith(TEST_ROLE_PREFIX) and (include_bench or s.role != BENCH_ROLE)
    )


def role_jar_paths(role: str) -> list[Path]:
    """The jar files of one role, where ``make setup`` put them."""
    return [jars_dir() / s.directory / s.file_name for s in all_jar_specs() if s.role == role]


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


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(value: str, variables: Mapping[str, str]) -> str:
    """``${name}`` from ``variables``, else from the environment (so secrets stay out of files)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in variables:
            return variables[name]
        if name in os.environ:
            return os.environ[name]
        raise ConfigError(f"${{{name}}} is not set: export {name} or write the value instead")

    return _VARIABLE.sub(one, value)
