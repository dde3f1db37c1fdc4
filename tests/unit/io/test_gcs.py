"""Google Cloud Storage settings: Iceberg's property names, what each sets, Hadoop's twin."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from tablekeeper.errors import ConfigError
from tablekeeper.io import FileIO
from tablekeeper.io.gcs import GcsSettings, batch_delete, gcs_filesystem
from tablekeeper.io.storage import storage_subset
from tablekeeper.io.stores import hadoop_settings, with_vended
from tablekeeper.redact import redact


def test_iceberg_property_names_set_the_emulator_endpoint_project_and_anonymity() -> None:
    settings = GcsSettings.from_properties(
        {"gcs.service.host": "http://127.0.0.1:4443", "gcs.project-id": "p1", "gcs.no-auth": "TRUE"}
    )
    assert settings == GcsSettings(project_id="p1", scheme="http", endpoint="127.0.0.1:4443", anonymous=True)
    assert GcsSettings.from_properties({"gcs.service.host": "storage.example.com"}).service_url == (
        "https://storage.example.com"
    )
    assert isinstance(gcs_filesystem(settings), pafs.GcsFileSystem)


@pytest.mark.parametrize(
    ("properties", "said"),
    [
        ({"gcs.user-project": "p"}, "unsupported GCS properties gcs.user-project"),
        ({"gcs.credentials-json": "{}"}, "not a service-account key"),
        ({"gcs.credentials-json": "{not json"}, "is not JSON"),
        ({"gcs.credentials-json": '{"type": "service_account", "private_key": "k"}'}, "missing client_email"),
        ({"gcs.no-auth": "yes"}, "must be true or false"),
        ({"gcs.service.host": "ftp://h"}, "use http://host:port"),
        ({"gcs.service.host": "http://h/storage/v1"}, "use http://host:port"),
        ({"gcs.oauth2.token-expires-at": "soon"}, "epoch milliseconds"),
        ({"gcs.no-auth": "true", "gcs.oauth2.token": "tok-en"}, "set one"),
        ({"gcs.oauth2.token": "tok-en", "gcs.credentials-json": '{"type": "service_account"}'}, "missing"),
    ],
)
def test_settings_that_would_be_ignored_or_misread_are_refused(properties: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        GcsSettings.from_properties(properties)


def test_a_token_is_kept_out_of_repr_and_masked_once_seen() -> None:
    token = "ya29.unit-" + "t0k3n" * 5
    settings = GcsSettings.from_properties({"gcs.oauth2.token": token, "gcs.oauth2.token-expires-at": "1"})
    assert token not in repr(settings) and settings.token_expires_ms == 1
    assert redact(f"GET /b?access_token={token} failed") == "GET /b?access_token=*** failed"
    assert redact(f"bearer {token}") == "bearer ***"


def test_gs_and_gcs_are_served_by_the_built_in_store_and_its_settings_travel() -> None:
    props = {"gcs.service.host": "http://127.0.0.1:9", "gcs.no-auth": "true", "gcs.project-id": "p"}
    io = FileIO.for_location("gcs://bucket/t", props)
    assert repr(io) == "FileIO(gcs)" and not io.atomic_create and io.batches_deletes  # JSON batches
    assert io.fs_path("gs://bucket/t/f") == io.fs_path("gcs://bucket/t/f") == "bucket/t/f"
    with pytest.raises(ConfigError, match="names no bucket"):
        io.fs_path("gs:///t/f")
    assert storage_subset({**props, "uri": "thrift://h:9083"}) == props
    # (a store another test registered for the process, toy://, may add its own settings)
    assert {k: v for k, v in hadoop_settings(props).items() if ".gs." in k} == {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        "fs.gs.project.id": "p",
        "fs.gs.storage.root.url": "http://127.0.0.1:9/",
        "fs.gs.operation.move.enable": "false",  # not Google's endpoint: renames copy and delete
        "fs.gs.auth.type": "UNAUTHENTICATED",
    }


def test_a_token_reaches_the_hadoop_connector_as_its_authorization_header() -> None:
    token = "ya29.vended-" + "t0k3n" * 4
    google = {"gcs.service.host": "https://storage.googleapis.com", "gcs.oauth2.token": token}
    conf = hadoop_settings(google)
    assert conf["fs.gs.auth.type"] == "UNAUTHENTICATED"  # the connector's own credentials off
    assert conf["fs.gs.storage.http.headers.Authorization"] == f"Bearer {token}"
    assert "fs.gs.operation.move.enable" not in conf  # Google's endpoint keeps its atomic moves
    # A key file is per host: the cluster's own credentials stand (nothing of the key is copied).
    key = '{"type": "service_account", "client_email": "a@p.iam.gserviceaccount.com", "private_key": "k"}'
    keyed = hadoop_settings({"gcs.credentials-json": key})
    assert not any(k.startswith("fs.gs.auth") or "Authorization" in k for k in keyed)


def test_a_vended_token_replaces_the_entrys_own_gcs_credentials() -> None:
    own = {"gcs.service.host": "http://127.0.0.1:9", "gcs.no-auth": "true", "s3.endpoint": "http://s3"}
    merged = with_vended(own, {"gcs.oauth2.token": "ya29.v"})
    assert merged == {
        "gcs.service.host": "http://127.0.0.1:9",
        "s3.endpoint": "http://s3",
        "gcs.oauth2.token": "ya29.v",
    }
    assert GcsSettings.from_properties(merged).token == "ya29.v"  # no clash with gcs.no-auth
    assert with_vended(own, {"s3.access-key-id": "k"}) == {**own, "s3.access-key-id": "k"}  # GCS's stand


def test_deletes_with_googles_default_credentials_stay_one_request_each() -> None:
    """Only the C++ client knows the default chain's token: no batch (and no request) then."""
    assert batch_delete(None, {"gcs.service.host": "http://127.0.0.1:9"}, ["b/k"]) is None
