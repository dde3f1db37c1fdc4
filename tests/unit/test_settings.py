from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tablekeeper import settings
from tablekeeper.catalog.config import load_catalogs, parse_catalogs
from tablekeeper.errors import ConfigError
from tablekeeper.lines import DEFAULT_LINE, LINES, line_named
from tablekeeper.settings import jar_specs, parse_jar_specs, parse_properties
from tests.conftest import REPO_ROOT


def test_repo_jar_file_pins_each_runtime_once() -> None:
    specs = jar_specs()
    roles = [s.role for s in specs]
    assert {"delta", "iceberg", "jdbc"} <= set(roles)
    artifacts = [s.artifact for s in specs]
    assert len(artifacts) == len(set(artifacts))
    # Delta and Iceberg runtimes must be the installed pyspark's line's (tablekeeper.lines).
    line = line_named(settings.spark_line() or "")
    assert line is not None
    assert {(s.role, s.artifact) for s in specs if s.role in ("delta", "iceberg")} == {
        ("delta", line.delta_spark.artifact),
        ("delta", line.delta_storage.artifact),
        ("iceberg", line.iceberg_runtime.artifact),
    }


@pytest.mark.parametrize("line", LINES, ids=lambda x: x.name)
def test_coordinates_appear_only_in_conf(line) -> None:  # type: ignore[no-untyped-def]
    own = "conf/jars.txt" if line.name == DEFAULT_LINE else f"conf/lines/{line.name}/jars.txt"
    # The project's files as git knows them (untracked bench data can run to 600k files).
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    hits = []
    for name in listed:
        path = REPO_ROOT / name
        if path.suffix in {".pyc", ".jar"} or not path.is_file():
            continue
        if str(line.iceberg_runtime) in path.read_text(encoding="utf-8", errors="ignore"):
            hits.append(name)
    # The cluster page's table of each line's --packages (tests/unit/test_lines.py checks it).
    assert sorted(hits) == sorted([own, "docs/deploy/cluster.md"])


def test_parse_jar_specs_rejects_malformed_lines() -> None:
    with pytest.raises(
        ConfigError, match=r"jars.txt:2: expected '<role> <group>:<artifact>:<version>\[:<classifier>\]'"
    ):
        parse_jar_specs("delta io.delta:delta-spark_4.1_2.13:4.4.0\niceberg org.apache.iceberg:x\n")
    with pytest.raises(ConfigError, match="lists no jars"):
        parse_jar_specs("# nothing\n")


def test_jar_file_names_follow_maven_copy() -> None:
    (spec,) = parse_jar_specs("jdbc org.xerial:sqlite-jdbc:3.50.3.0  # trailing comment\n")
    assert spec.file_name == "sqlite-jdbc-3.50.3.0.jar"
    assert spec.coordinate == "org.xerial:sqlite-jdbc:3.50.3.0"


def test_classified_jars_and_test_servers_stay_off_the_runtime_classpath() -> None:
    specs = parse_jar_specs(
        "iceberg org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:9.9.9\n"
        "test-rest-server org.apache.iceberg:iceberg-core:1.11.0:tests\n"
    )
    runtime, server = specs
    assert server.file_name == "iceberg-core-1.11.0-tests.jar"
    assert server.maven_artifact == "org.apache.iceberg:iceberg-core:1.11.0:jar:tests"
    assert server.directory == "test-rest-server" and runtime.directory == ""
    roles = {s.role for s in jar_specs(include_bench=True)}
    assert "s3" in roles and not any(r.startswith("test-") for r in roles)


def test_properties_parse_spark_defaults_form() -> None:
    props = parse_properties("# c\nspark.master   local[*]\n\nspark.x a b\n")
    assert props == {"spark.master": "local[*]", "spark.x": "a b"}


def test_catalogs_expand_warehouse(tmp_path: Path) -> None:
    conf = load_catalogs(warehouse=tmp_path)
    local = conf.get(None)
    assert local.type == "sql"
    assert local.sqlite_path == tmp_path / "catalog.db"
    assert conf.get("files").warehouse == f"{tmp_path}/files"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("catalogs: [", "is not valid YAML"),
        (
            "catalogs:\n  a: {type: nessie, warehouse: /w}\n",
            "has type 'nessie'; use one of sql, filesystem, rest, glue, hive",
        ),
        ("catalogs:\n  a: {type: sql, warehouse: /w}\n", "needs a 'uri'"),
        ("catalogs:\n  a: {type: filesystem}\n", "needs a 'warehouse'"),
        ("default: b\ncatalogs:\n  a: {type: filesystem, warehouse: /w}\n", "default catalog 'b'"),
    ],
)
def test_catalog_config_errors_are_one_line(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_catalogs(text, tmp_path)
    assert "\n" not in str(info.value)


def test_unknown_catalog_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown catalog 'nope' \(known: files, local\)"):
        load_catalogs(warehouse=tmp_path).get("nope")


def test_a_test_servers_distribution_archive_is_named_by_its_packaging() -> None:
    (dist,) = parse_jar_specs("test-hms org.apache.hive:hive-standalone-metastore:3.1.3:bin:tar.gz\n")
    assert dist.file_name == "hive-standalone-metastore-3.1.3-bin.tar.gz"
    assert dist.maven_artifact == "org.apache.hive:hive-standalone-metastore:3.1.3:tar.gz:bin"
    assert dist.directory == "test-hms"
    (plain,) = parse_jar_specs("test-x g:a:1::zip\n")
    assert plain.file_name == "a-1.zip" and plain.maven_artifact == "g:a:1:zip"
    with pytest.raises(ConfigError, match="expected"):
        parse_jar_specs("test-x g:a:1:c:\n")
