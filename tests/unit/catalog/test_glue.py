"""The glue catalog on a real Glue endpoint (moto's server, tests/support/glue_server.py): tables
kept as Iceberg Java's GlueCatalog keeps them, the optimistic swap guarded by the table's VersionId
(one winner among racing committers, a stale version is CommitFailed, a lost answer is settled by
reading the table or left unknown), listing by pages, and secrets that never show."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

from tablekeeper.catalog import catalog_for, delta_source
from tablekeeper.catalog.base import LoadedTable
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.catalog.glue import GlueCatalog
from tablekeeper.catalog.glue_records import GlueSettings, glue_columns
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    NotATableError,
    StorageError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.types import LONG, STRING, DecimalType, ListType, NestedField, Schema
from tablekeeper.iceberg.updates import add_schema, new_table_metadata, set_properties, with_previous_metadata
from tests.support.append_worker import run_worker
from tests.support.glue_server import PAGE, GlueEndpoint
from tests.support.object_store import free_loopback_port

SCHEMA = Schema(
    0, (NestedField(1, "id", LONG, required=True), NestedField(2, "note", STRING, doc="free text"))
)
T0 = 1_700_000_000_000


@pytest.fixture
def glue_env(glue_server: GlueEndpoint, monkeypatch: pytest.MonkeyPatch) -> GlueEndpoint:
    """The server's identity in the environment: the credential chain boto3 walks by default."""
    for key, value in glue_server.env().items():
        monkeypatch.setenv(key, value)
    return glue_server


def catalog(glue: GlueEndpoint, tmp_path: Path, **props: str) -> GlueCatalog:
    return GlueCatalog("glue", str(tmp_path / "wh"), {"glue.endpoint": glue.endpoint, **props})


def ident() -> str:
    """A database of its own per test: the server lives for the session."""
    return f"d{uuid.uuid4().hex[:10]}.events"


def create(cat: GlueCatalog, identifier: str) -> LoadedTable:
    meta = new_table_metadata(schema=SCHEMA, location=cat.default_table_location(identifier), timestamp_ms=T0)
    return cat.create_table(identifier, meta)


def change(base: LoadedTable, value: str) -> Any:
    new = set_properties(base.metadata, {"k": value}, timestamp_ms=T0 + 1)
    return with_previous_metadata(new, base.metadata, base.metadata_location)


def glue_table(glue: GlueEndpoint, identifier: str) -> dict[str, Any]:
    database, name = identifier.split(".")
    return dict(glue.client().get_table(DatabaseName=database, Name=name)["Table"])


def metadata_files(table: LoadedTable) -> set[Path]:
    return set(Path(table.metadata_location).parent.glob("*.metadata.json"))


# -- settings: no server ----------------------------------------------------------------------


def test_settings_take_pyiceberg_names_and_refuse_what_they_cannot_honour() -> None:
    s = GlueSettings.parse("g", {"client.region": "eu-west-1", "glue.id": "123456789012"})
    assert (s.region, s.catalog_id, s.endpoint, s.skip_archive) == ("eu-west-1", "123456789012", None, True)
    assert GlueSettings.parse("g", {"client.region": "a", "glue.region": "b"}).region == "b"
    keyed = GlueSettings.parse(
        "g", {"client.access-key-id": "AKIAKEY1", "glue.secret-access-key": "s3cr3t-value"}
    )
    assert keyed.access_key == "AKIAKEY1" and "s3cr3t-value" not in repr(keyed)
    refusals = {
        "unsupported Glue properties glue.warehouse": {"glue.warehouse": "x"},
        "only one of glue.access-key-id": {"glue.access-key-id": "AKIAKEY1"},
        "lakeformation-enabled=true is not supported": {"glue.lakeformation-enabled": "true"},
        "use http://host:port": {"glue.endpoint": "glue.local:4566"},
        "must be true or false": {"glue.skip-archive": "yes"},
        "from 0 to 20": {"glue.max-retries": "many"},
    }
    for message, props in refusals.items():
        with pytest.raises(ConfigError, match=message):
            GlueSettings.parse("g", props)


def test_spark_reaches_the_same_catalog_through_iceberg_javas_glue_catalog(tmp_path: Path) -> None:
    text = """
catalogs:
  local:
    type: glue
    warehouse: ${warehouse}/glue
    glue.region: us-east-1
    glue.endpoint: http://127.0.0.1:4566
    glue.id: "123456789012"
  aws:
    type: glue
    warehouse: s3://lake/warehouse
    client.region: eu-west-1
"""
    catalogs = parse_catalogs(text, tmp_path)
    local = iceberg_catalog_conf(catalogs.get("local"))
    prefix = "spark.sql.catalog.local"
    assert local[prefix] == "org.apache.iceberg.spark.SparkCatalog"
    assert local[f"{prefix}.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert local[f"{prefix}.client.region"] == "us-east-1"  # Java's client reads no glue.region
    assert local[f"{prefix}.glue.endpoint"] == "http://127.0.0.1:4566"
    assert local[f"{prefix}.glue.id"] == "123456789012"
    assert local[f"{prefix}.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"  # not S3FileIO
    assert local[f"{prefix}.warehouse"] == f"{tmp_path}/glue"
    aws = iceberg_catalog_conf(catalogs.get("aws"))
    assert (
        "spark.sql.catalog.aws.io-impl" not in aws
        and aws["spark.sql.catalog.aws.client.region"] == "eu-west-1"
    )
    with pytest.raises(ConfigError, match="needs a 'warehouse'"):
        parse_catalogs("catalogs:\n  g:\n    type: glue\n", tmp_path)


def test_columns_are_shown_as_iceberg_java_shows_them() -> None:
    meta = new_table_metadata(schema=SCHEMA, location="/t", timestamp_ms=T0)
    wider = Schema(
        1,
        (
            NestedField(1, "id", LONG, required=True),
            NestedField(3, "tags", ListType(4, DecimalType(10, 2))),
        ),
    )
    columns = glue_columns(add_schema(meta, wider, timestamp_ms=T0 + 1))
    assert [(c["Name"], c["Type"], c["Parameters"]["iceberg.field.current"]) for c in columns] == [
        ("id", "bigint", "true"),
        ("tags", "array<decimal(10,2)>", "true"),
        ("note", "string", "false"),
    ]
    assert columns[0]["Parameters"]["iceberg.field.optional"] == "false"
    assert columns[2]["Comment"] == "free text"


# -- on the server ----------------------------------------------------------------------------


def test_create_load_commit_as_iceberg_java_records_them(glue_env: GlueEndpoint, tmp_path: Path) -> None:
    cat = catalog(glue_env, tmp_path, **{"glue.region": glue_env.region})
    table = ident()
    database = table.split(".")[0]
    assert cat.default_table_location(table) == f"{tmp_path}/wh/{database}.db/events"  # as Java's
    created = create(cat, table)
    got = glue_table(glue_env, table)
    assert got["TableType"] == "EXTERNAL_TABLE"
    assert got["Parameters"] == {"table_type": "ICEBERG", "metadata_location": created.metadata_location}
    assert got["StorageDescriptor"]["Location"] == created.metadata.location
    assert [c["Name"] for c in got["StorageDescriptor"]["Columns"]] == ["id", "note"]
    # Another tool describes the table and adds a parameter: a commit keeps both.
    glue_env.client().update_table(
        DatabaseName=database,
        TableInput={
            **{k: got[k] for k in ("Name", "TableType", "StorageDescriptor")},
            "Description": "orders",
            "Parameters": {**got["Parameters"], "owner": "team-a"},
        },
    )
    loaded = cat.load_table(table)
    committed = cat.commit(loaded, change(loaded, "1"))
    got = glue_table(glue_env, table)
    assert got["Parameters"] == {
        "table_type": "ICEBERG",
        "metadata_location": committed.metadata_location,
        "previous_metadata_location": created.metadata_location,
        "owner": "team-a",
    }
    assert got["Description"] == "orders"
    assert cat.load_table(table).metadata.properties["k"] == "1"
    assert cat.list_namespaces().count(database) == 1 and cat.list_tables(database) == [table]
    with pytest.raises(ConfigError, match="already exists"):
        create(cat, table)
    # A database with a location of its own places its tables there, as Java's GlueCatalog does.
    placed = ident().split(".")[0]
    glue_env.client().create_database(DatabaseInput={"Name": placed, "LocationUri": "s3://lake/placed/"})
    assert cat.default_table_location(f"{placed}.t") == "s3://lake/placed/t"


def test_listing_follows_pages_and_tells_iceberg_from_delta(glue_env: GlueEndpoint, tmp_path: Path) -> None:
    cat = catalog(glue_env, tmp_path)
    database = ident().split(".")[0]
    names = [f"{database}.t{i}" for i in range(PAGE + 2)]  # more than one page
    for name in names:
        create(cat, name)
    client = glue_env.client()
    client.create_table(
        DatabaseName=database, TableInput={"Name": "csv", "Parameters": {"classification": "csv"}}
    )
    client.create_table(
        DatabaseName=database,
        TableInput={
            "Name": "orders",
            "Parameters": {"spark.sql.sources.provider": "delta"},
            "StorageDescriptor": {"SerdeInfo": {"Parameters": {"path": "s3://lake/orders/"}}},
        },
    )
    client.create_table(
        DatabaseName=database,
        TableInput={
            "Name": "clicks",
            "Parameters": {"table_type": "DELTA"},
            "StorageDescriptor": {"Location": "/lake/clicks"},
        },
    )
    assert cat.list_tables(database) == names
    assert cat.delta_tables(database) == ["/lake/clicks", "s3://lake/orders"]
    assert cat.delta_table_location(f"{database}.orders") == "s3://lake/orders"
    assert not cat.table_exists(f"{database}.csv") and cat.table_exists(names[0])
    with pytest.raises(NotATableError, match="is not an Iceberg table"):
        cat.load_table(f"{database}.csv")
    with pytest.raises(NotATableError, match="not registered as a Delta table"):
        cat.delta_table_location(names[0])
    with pytest.raises(ConfigError, match="one level of namespace"):
        cat.load_table("a.b.c")
    with pytest.raises(ConfigError, match="lowercase letters"):
        cat.load_table("db.Events")


def test_a_delta_source_named_in_a_catalog_resolves_to_its_location(
    glue_env: GlueEndpoint, tmp_path: Path
) -> None:
    database = ident().split(".")[0]
    glue_env.client().create_database(DatabaseInput={"Name": database})
    glue_env.client().create_table(
        DatabaseName=database,
        TableInput={
            "Name": "orders",
            "Parameters": {"table_type": "DELTA"},
            "StorageDescriptor": {"Location": "s3://lake/orders"},
        },
    )
    text = (
        f"catalogs:\n  glue:\n    type: glue\n    warehouse: {tmp_path}\n"
        f"    glue.endpoint: {glue_env.endpoint}\n"
        f"  tk:\n    type: sql\n    uri: sqlite:///{tmp_path}/c.db\n    warehouse: {tmp_path}\n"
    )
    catalogs = parse_catalogs(text, tmp_path)
    assert delta_source(f"glue.{database}.orders", catalogs) == "s3://lake/orders"
    for as_given in ("s3://lake/orders", "/lake/orders", "orders", "nocatalog.db.orders"):
        assert delta_source(as_given, catalogs) == as_given  # a path, relative or not
    with pytest.raises(UnsupportedFeatureError, match="registers no Delta tables by name"):
        delta_source("tk.db.orders", catalogs)
    with pytest.raises(NotATableError, match="not found"):
        delta_source(f"glue.{database}.missing", catalogs)


def test_a_lost_race_is_commit_failed_and_leaves_nothing(glue_env: GlueEndpoint, tmp_path: Path) -> None:
    cat = catalog(glue_env, tmp_path)
    base = create(cat, ident())
    winner = cat.commit(base, change(base, "winner"))
    before = metadata_files(base)
    with pytest.raises(CommitFailed, match="changed by another writer"):
        cat.commit(base, change(base, "loser"))
    assert metadata_files(base) == before  # the loser's metadata file is gone
    assert (
        glue_table(glue_env, base.identifier)["Parameters"]["metadata_location"] == winner.metadata_location
    )


def test_a_writer_between_our_read_and_our_update_fails_ours_by_version(
    glue_env: GlueEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata location we read still matched, but another writer updated the table before
    our UpdateTable: its VersionId is stale, and Glue refuses it."""
    cat, other = catalog(glue_env, tmp_path), catalog(glue_env, tmp_path)
    base = create(cat, ident())
    read = cat._get_table
    winner: list[LoadedTable] = []

    def read_then_lose_the_race(database: str, name: str) -> Any:
        table = read(database, name)
        if not winner:
            winner.append(other.commit(base, change(base, "other")))
        return table

    monkeypatch.setattr(cat, "_get_table", read_then_lose_the_race)
    before = metadata_files(base)
    with pytest.raises(CommitFailed, match="changed by another writer"):
        cat.commit(base, change(base, "ours"))
    assert metadata_files(base) == before | {Path(winner[0].metadata_location)}
    assert (
        glue_table(glue_env, base.identifier)["Parameters"]["metadata_location"]
        == winner[0].metadata_location
    )


def test_racing_committers_exactly_one_wins(glue_env: GlueEndpoint, tmp_path: Path) -> None:
    base = create(catalog(glue_env, tmp_path), ident())
    start = threading.Barrier(6)
    won: list[str] = []
    lost: list[BaseException] = []

    def commit(i: int) -> None:
        cat = catalog(glue_env, tmp_path)  # a writer of its own (its own clients)
        cat._client(), cat._client(retries=False)  # made before the start: the commits meet
        start.wait()
        try:
            won.append(cat.commit(base, change(base, str(i))).metadata_location)
        except CommitFailed as err:
            lost.append(err)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 5
    assert glue_table(glue_env, base.identifier)["Parameters"]["metadata_location"] == won[0]
    assert len(metadata_files(base)) == 2  # the created one and the winner's


class _LostAnswer:
    """The swap's answer never comes (a read timeout): ``applied`` says whether Glue had run it,
    ``then`` what another writer does before the catalog looks again."""

    def __init__(self, client: Any, applied: bool, then: Any = None) -> None:
        self.client = client
        self.applied, self.then = applied, then

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def update_table(self, **params: Any) -> Any:
        if self.applied:
            self.client.update_table(**params)
        if self.then is not None:
            self.then()
        raise ReadTimeoutError(endpoint_url="http://glue")


def test_a_lost_answer_is_settled_by_reading_the_table(glue_env: GlueEndpoint, tmp_path: Path) -> None:
    cat, other = catalog(glue_env, tmp_path), catalog(glue_env, tmp_path)
    base = create(cat, ident())
    real = cat._client(retries=False)

    def losing(applied: bool, then: Any = None) -> None:
        cat._clients[False] = _LostAnswer(real, applied, then)

    def on_top() -> None:
        loaded = other.load_table(base.identifier)
        other.commit(loaded, change(loaded, "x"))

    losing(applied=True)
    committed = cat.commit(base, change(base, "1"))  # ours is in the table: it was applied
    assert (
        glue_table(glue_env, base.identifier)["Parameters"]["metadata_location"]
        == committed.metadata_location
    )

    losing(applied=False)
    before = metadata_files(base)
    with pytest.raises(CommitStateUnknown, match="check whether"):
        cat.commit(committed, change(committed, "2"))  # the old pointer: it may still land
    assert len(metadata_files(base) - before) == 1  # an unknown commit's file stays

    third = other.commit(committed, change(committed, "third"))  # another writer moves the table
    losing(applied=False)
    with pytest.raises(CommitFailed):
        cat.commit(committed, change(committed, "3"))  # its VersionId is stale: it never can land

    # Applied, then another writer committed on top before we looked: ours is in its history.
    current = cat.load_table(base.identifier)
    losing(applied=True, then=on_top)
    ours = cat.commit(current, change(current, "4"))
    after = cat.load_table(base.identifier)
    assert third.metadata_location != after.metadata_location
    assert ours.metadata_location in {e.metadata_file for e in after.metadata.metadata_log}
    assert Path(ours.metadata_location).exists()


def test_errors_name_the_catalog_never_a_secret(
    glue_env: GlueEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "Sup3r-" + uuid.uuid4().hex
    down = f"http://127.0.0.1:{free_loopback_port()}"
    keyed = {
        "glue.access-key-id": "AKIAEXAMPLEKEY01",
        "glue.secret-access-key": secret,
        "glue.max-retries": "0",
    }
    with pytest.raises(StorageError) as unreachable:
        GlueCatalog("glue", str(tmp_path), {"glue.endpoint": down, **keyed}).load_table("db.t")
    message = str(unreachable.value)
    assert "did not answer" in message and "glue.endpoint" in message and "\n" not in message
    assert secret not in message and "AKIAEXAMPLEKEY01" not in message
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigError, match="found no AWS credentials"):
        catalog(glue_env, tmp_path).load_table("db.t")
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigError, match=r"client\.region"):
        GlueCatalog("glue", str(tmp_path), keyed).load_table("db.t")


def test_a_writer_killed_at_the_swap_leaves_a_readable_table_and_the_rerun_converges(
    glue_server: GlueEndpoint, tmp_path: Path
) -> None:
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(
        f"catalogs:\n  glue:\n    type: glue\n    warehouse: {tmp_path / 'wh'}\n"
        f"    glue.endpoint: {glue_server.endpoint}\n    client.region: {glue_server.region}\n"
        f"    glue.access-key-id: {glue_server.access_key}\n"
        f"    glue.secret-access-key: {glue_server.secret_key}\n"
    )
    cat = catalog_for(parse_catalogs(conf.read_text(), tmp_path).get("glue"))
    table = ident()
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "writer", STRING))),
        location=cat.default_table_location(table),
        timestamp_ms=T0,
    )
    cat.create_table(table, meta)

    def appended() -> int:
        loaded = cat.load_table(table)  # the pointer names a complete metadata file
        snapshot = loaded.metadata.current_snapshot()
        return 0 if snapshot is None else len(loaded.metadata.ancestors(snapshot.snapshot_id))

    env: dict[str, str] = {}
    run_worker(conf, "glue", table, 1, 3, kill_at="commit.swapped@2", env=env)  # SIGKILL right after the swap
    assert appended() == 2  # the new state
    run_worker(conf, "glue", table, 2, 1, kill_at="commit.metadata-written", env=env)  # SIGKILL before it
    assert appended() == 2  # the old state
    run_worker(conf, "glue", table, 3, 2, env=env)  # the next writer goes on from there
    assert appended() == 4
