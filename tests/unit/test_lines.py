"""The supported Spark lines: the runtime check's decision, and one tested set per line across
tablekeeper.lines, conf/ (jars and constraints), pyproject.toml and the cluster page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from tablekeeper import settings
from tablekeeper.errors import ConfigError, ExitCode, UnsupportedRuntime
from tablekeeper.lines import DEFAULT_LINE, LINES, check_runtime, line_named
from tablekeeper.settings import PACKAGE_ROLES, parse_jar_specs
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

CONF = REPO_ROOT / "conf"


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def _jars_file(line: str) -> Path:
    return CONF / "jars.txt" if line == DEFAULT_LINE else CONF / "lines" / line / "jars.txt"


@pytest.mark.parametrize("line", LINES, ids=lambda x: x.name)
def test_each_line_accepts_its_own_versions(line) -> None:  # type: ignore[no-untyped-def]
    assert check_runtime(line.pyspark_tested, f"{line.scala}.18", line.delta, line.iceberg) == line


@pytest.mark.parametrize(
    ("spark", "scala", "delta", "iceberg", "named"),
    [
        ("3.4.3", "2.12.17", "2.4.0", "1.5.0", r"Spark 3\.4\.3 is not a supported line \(3\.5, 4\.0, 4\.1\)"),
        ("4.2.0", "2.13.17", "4.4.0", "1.11.0", r"Spark 4\.2\.0 is not a supported line"),
        # Spark 4.1 with the 4.0 line's Delta: refused, naming the versions and the 4.1 packages.
        ("4.1.4", "2.13.17", "4.0.1", "1.11.0", r"Delta 4\.0\.1 and Iceberg 1\.11\.0 is not a supported"),
        ("3.5.9", "2.12.18", "3.3.3", "1.10.0", r"Iceberg 1\.10\.0 .*runtime-3\.5_2\.12:1\.12\.0"),
        ("3.5.9", "2.13.8", "3.3.3", "1.12.0", r"Scala 2\.13\.8.*Scala 2\.12 builds only"),
        # A runtime whose version the session could not tell is not assumed to be the right one.
        ("4.0.5", "2.13.16", None, "1.11.0", r"Delta unknown .*delta-spark_2\.13:4\.0\.1"),
    ],
)
def test_an_unsupported_combination_is_refused_with_the_fix(
    spark: str, scala: str, delta: str | None, iceberg: str, named: str
) -> None:
    with pytest.raises(UnsupportedRuntime, match=named) as caught:
        check_runtime(spark, scala, delta, iceberg)
    assert isinstance(caught.value, ConfigError) and caught.value.exit_code == ExitCode.USAGE
    assert "\n" not in caught.value.message


def test_vendor_spark_versions_name_their_line() -> None:
    line = line_named("3.5")
    assert line is not None
    assert check_runtime("3.5.1-amzn-0", "2.12.18", line.delta, line.iceberg) == line


@pytest.mark.parametrize("line", LINES, ids=lambda x: x.name)
def test_conf_and_the_lines_module_are_one_tested_set(line) -> None:  # type: ignore[no-untyped-def]
    path = _jars_file(line.name)
    specs = parse_jar_specs(path.read_text(encoding="utf-8"), str(path))
    coordinates = {s.coordinate for s in specs}
    assert {str(line.iceberg_runtime), str(line.delta_spark), str(line.delta_storage)} <= coordinates
    by_role = {(s.role, s.artifact): s.version for s in specs}
    # Only this line's runtimes: one Delta, one Iceberg, their S3 SDK of the same Iceberg release.
    assert {v for (role, _), v in by_role.items() if role == "delta"} == {line.delta}
    assert by_role[("s3", "iceberg-aws-bundle")] == line.iceberg
    assert [a for r, a in by_role if r == "iceberg"] == [line.iceberg_runtime.artifact]
    pins = _pins(CONF / "lines" / line.name / "constraints.txt")
    assert pins == {"pyspark": line.pyspark_tested, "delta-spark": line.delta}
    assert line.pyspark_min <= line.pyspark_tested < line.pyspark_below
    assert line.pyspark_tested.startswith(f"{line.name}.")


def test_the_package_declares_ranges_every_line_meets() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (pyspark,) = [d for d in project["dependencies"] if d.startswith("pyspark")]
    assert pyspark == f"pyspark>={LINES[0].pyspark_min},<{LINES[-1].pyspark_below}"
    # No exact pin in the runtime dependencies: a cluster's own environment must be able to meet them.
    assert not [d for d in project["dependencies"] if "==" in d]
    shared = _pins(CONF / "constraints.txt")
    for dependency in project["dependencies"]:
        name = re.split(r"[<>=\[]", dependency, maxsplit=1)[0].lower()
        assert name == "pyspark" or name in shared, f"{name} has no tested pin in conf/constraints.txt"


@pytest.mark.parametrize("line", LINES, ids=lambda x: x.name)
def test_the_cluster_page_gives_each_lines_packages(line) -> None:  # type: ignore[no-untyped-def]
    page = (REPO_ROOT / "docs" / "deploy" / "cluster.md").read_text(encoding="utf-8")
    path = _jars_file(line.name)
    specs = parse_jar_specs(path.read_text(encoding="utf-8"), str(path))
    packages = ",".join(s.coordinate for s in specs if s.role in PACKAGE_ROLES)
    assert f"| {line.name} | Scala {line.scala} | `--packages {packages}` |" in page


def test_jars_follow_the_installed_lines_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    """With pyspark 3.5 installed the jars are conf/lines/3.5's, kept in .lines/3.5/jars; the
    test servers' jars stay conf/jars.txt's (they run in JVMs of their own)."""
    monkeypatch.delenv(settings.JARS_ENV, raising=False)
    monkeypatch.delenv(settings.HOME_ENV, raising=False)
    monkeypatch.setattr(settings, "pyspark_version", lambda: "3.5.9")
    specs = settings.all_jar_specs()
    line = line_named("3.5")
    assert line is not None
    assert str(line.delta_spark) in {s.coordinate for s in specs}
    assert not [s for s in specs if "_2.13" in s.artifact]
    assert {s.role for s in specs if s.role.startswith("test-")} == {
        "test-s3-server",
        "test-rest-server",
        "test-hms",
    }
    assert settings.jars_dir() == REPO_ROOT / ".lines" / "3.5" / "jars"
    monkeypatch.setattr(settings, "pyspark_version", lambda: "4.1.4")
    assert settings.jars_dir() == REPO_ROOT / ".jars"
    assert settings.line_jars_file() is None


def test_doctor_prints_the_running_line_and_its_packages() -> None:
    from tablekeeper.cli.doctor import diagnose

    report = diagnose()
    installed = line_named(settings.spark_line() or "")
    assert installed is not None
    assert report.line is not None and report.line.startswith(f"{installed.name} (Scala {installed.scala}")
    for coordinate in (installed.iceberg_runtime, installed.delta_spark, installed.delta_storage):
        assert str(coordinate) in report.packages.split(",")
    assert f"spark line       {report.line}" in report.to_text()
