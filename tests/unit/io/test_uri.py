from __future__ import annotations

import pytest

from tablekeeper.io.uri import (
    LocationParts,
    decode_percent,
    is_under,
    join_location,
    location_to_path,
    normalize_location,
    strip_trailing_slash,
)


@pytest.mark.parametrize(
    "spelling",
    ["/a/b", "file:/a/b", "file:///a/b", "file://localhost/a/b", "FILE:/a/b", "file://LocalHost/a/b"],
)
def test_local_spellings_share_one_key(spelling: str) -> None:
    assert normalize_location(spelling) == normalize_location("/a/b")


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("/a/b", "/a/b/"),
        ("/a//b", "/a/b"),
        ("/a/./b", "/a/b"),
        ("/a/x/../b", "/a/b"),
        ("s3a://bucket/t/f", "s3://bucket/t/f"),
        ("s3n://bucket/t/f", "s3://bucket/t/f"),
        ("S3://Bucket/t/f", "s3://bucket/t/f"),
        ("s3://bucket", "s3://bucket/"),
        ("hdfs://NameNode:8020/a", "hdfs://namenode:8020/a"),
        ("gcs://bucket/t/f", "gs://bucket/t/f"),
        ("abfs://c@acct.dfs.core.windows.net/p", "abfss://c@acct.dfs.core.windows.net/p"),
        # An account's Blob and Data Lake endpoints serve one file, under any of Azure's schemes.
        ("wasbs://c@acct.blob.core.windows.net/p", "abfss://c@acct.dfs.core.windows.net/p"),
        ("wasb://c@Acct.Blob.Core.Windows.Net/p", "abfss://c@acct.dfs.core.windows.net/p"),
        ("abfss://c@acct.blob.core.chinacloudapi.cn/p", "wasbs://c@acct.dfs.core.chinacloudapi.cn/p"),
    ],
)
def test_equivalent_locations(left: str, right: str) -> None:
    assert normalize_location(left) == normalize_location(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("/a/b", "/a/bc"),
        ("s3://bucket/t/f", "s3://other/t/f"),
        ("s3://bucket/t/f", "gs://bucket/t/f"),
        ("/a/b", "file://otherhost/a/b"),
        ("/a/b", "a/b"),  # relative never equals absolute
        ("/a/B", "/a/b"),  # paths stay case-sensitive
        ("/a/x%20y", "/a/x y"),  # no percent-decoding inside keys
        ("hdfs:///a/b", "hdfs://nn/a/b"),  # which name node "no authority" means is unknown here
        ("hdfs://nn:8020/a", "hdfs://nn/a"),  # default ports are not assumed
        ("abfss://c1@acct.dfs.core.windows.net/p", "abfss://c2@acct.dfs.core.windows.net/p"),
        ("abfss://c@acct.dfs.core.windows.net/p", "abfss://c@other.dfs.core.windows.net/p"),
        # Another cloud's suffix is another account; a Blob host outside Azure's schemes stays itself.
        ("abfss://c@acct.dfs.core.windows.net/p", "abfss://c@acct.dfs.core.chinacloudapi.cn/p"),
        ("s3://c@acct.blob.core.windows.net/p", "s3://c@acct.dfs.core.windows.net/p"),
        ("gs://bucket/p", "abfs://bucket/p"),
    ],
)
def test_non_equivalent_locations(left: str, right: str) -> None:
    assert normalize_location(left) != normalize_location(right)


def test_scheme_equivalences_are_configurable() -> None:
    # Without the default folding, s3a is its own scheme.
    assert normalize_location("s3a://b/k", equivalent_schemes={}) != normalize_location("s3://b/k")
    azure = {"wasbs": "abfss"}
    assert normalize_location("wasbs://c/k", azure) == normalize_location("abfss://c/k", azure)
    assert normalize_location("gcs://b/k", equivalent_schemes={}) != normalize_location("gs://b/k")


def test_azure_endpoints_fold_even_with_the_scheme_folding_turned_off() -> None:
    # The host rule is Azure's, not a scheme alias: wasbs stays wasbs, its Blob host becomes dfs.
    key = normalize_location("wasbs://c@acct.blob.core.windows.net/p", equivalent_schemes={})
    assert key == "wasbs://c@acct.dfs.core.windows.net/p"
    assert is_under("wasbs://c@acct.blob.core.windows.net/t/data/f", "abfss://c@acct.dfs.core.windows.net/t")


def test_authority_equivalents_fold_hosts_including_a_missing_one() -> None:
    same = {"": "nn:8020", "nn": "nn:8020", "NN.example.com:8020": "nn:8020"}
    keys = {
        normalize_location(loc, authority_equivalents=same)
        for loc in ["hdfs:///a/b", "hdfs://nn/a/b", "hdfs://nn.example.com:8020/a/b", "hdfs://nn:8020/a/b"]
    }
    assert len(keys) == 1
    assert normalize_location("hdfs://other/a/b", authority_equivalents=same) not in keys


def test_dotdot_cannot_climb_above_the_root() -> None:
    assert normalize_location("/../../a") == normalize_location("/a")
    # ...but relative paths keep their leading "..": their base is unknown.
    assert normalize_location("../a") != normalize_location("a")


def test_location_to_path_keeps_the_path_verbatim() -> None:
    assert location_to_path("s3a://bucket/a b/%20//x") == LocationParts("s3a", "bucket", "/a b/%20//x")
    assert location_to_path("/tmp/t") == ("file", "", "/tmp/t")
    assert location_to_path("file:/tmp/t") == ("file", "", "/tmp/t")
    assert location_to_path("file:///tmp/t") == ("file", "", "/tmp/t")
    assert location_to_path("file://localhost/tmp/t") == ("file", "", "/tmp/t")
    assert location_to_path("file://host/tmp/t") == ("file", "host", "/tmp/t")
    assert location_to_path("hdfs://nn:8020/w") == ("hdfs", "nn:8020", "/w")
    assert location_to_path("s3://bucket") == ("s3", "bucket", "")
    # '#' and '?' are ordinary characters in object keys, not URI fragments or queries.
    assert location_to_path("s3://b/k#1?x=2") == ("s3", "b", "/k#1?x=2")


def test_single_letter_prefix_is_not_a_scheme() -> None:
    assert location_to_path("C:/data/t") == ("file", "", "C:/data/t")


def test_empty_location_is_refused() -> None:
    with pytest.raises(ValueError, match="empty location"):
        location_to_path("")


@pytest.mark.parametrize(
    ("base", "parts", "expected"),
    [
        ("file:/a", ("b", "c.txt"), "file:/a/b/c.txt"),
        ("file:///a/", ("b",), "file:///a/b"),
        ("/a/", ("b/c",), "/a/b/c"),
        ("/", ("x",), "/x"),
        ("file:/", ("x",), "file:/x"),
        ("s3a://bucket", ("metadata", "v1.json"), "s3a://bucket/metadata/v1.json"),
        ("s3://bucket/t//", ("/data/", "f"), "s3://bucket/t/data/f"),
        ("hdfs://nn:8020/w", ("./t",), "hdfs://nn:8020/w/t"),
        ("/a", (), "/a"),
    ],
)
def test_join_keeps_the_base_spelling(base: str, parts: tuple[str, ...], expected: str) -> None:
    assert join_location(base, *parts) == expected


def test_join_refuses_to_climb_out_of_the_base() -> None:
    with pytest.raises(ValueError, match=r"'\.\.'"):
        join_location("/t", "../etc/passwd")


def test_strip_trailing_slash_keeps_scheme_and_authority() -> None:
    assert strip_trailing_slash("s3://b/t///") == "s3://b/t"
    assert strip_trailing_slash("file:///") == "file://"
    assert strip_trailing_slash("/") == ""


@pytest.mark.parametrize(
    ("location", "prefix", "expected"),
    [
        ("/a/b/c", "/a/b", True),
        ("/a/b", "/a/b", True),
        ("/a/bc", "/a/b", False),
        ("/a/bc/d", "/a/b", False),
        ("/a", "/a/b", False),
        ("/a/b/../c", "/a/b", False),
        ("file:/a/b/c", "/a/b/", True),
        ("/a/b/c", "file://localhost/a/b", True),
        ("s3a://bucket/t/data/f", "s3://bucket/t", True),
        ("s3://bucket/t/data/f", "s3://other/t", False),
        ("s3://bucket/anything", "s3://bucket", True),
        ("gs://bucket/t/f", "s3://bucket/t", False),
        ("/x/y", "/", True),
        ("a/b", "/a", False),
        ("../a/b", ".", False),
    ],
)
def test_is_under_compares_whole_segments(location: str, prefix: str, expected: bool) -> None:
    assert is_under(location, prefix) is expected


def test_is_under_uses_authority_equivalents() -> None:
    assert not is_under("hdfs:///w/t/f", "hdfs://nn/w/t")
    assert is_under("hdfs:///w/t/f", "hdfs://nn/w/t", authority_equivalents={"": "nn"})


def test_decode_percent_is_separate_and_exact() -> None:
    encoded = "s3://b/t/date=2024-01-01%2000%3A00%3A00/part%2D0.parquet"
    assert decode_percent(encoded) == "s3://b/t/date=2024-01-01 00:00:00/part-0.parquet"
    assert decode_percent("/t/caf%C3%A9") == "/t/café"
    # Decoding happens once: an encoded '%' stays a literal '%' after one pass.
    assert decode_percent("/t/a%2520b") == "/t/a%20b"
    assert decode_percent("/t/plain") == "/t/plain"
    # Normalisation itself never decodes, so callers decide (Delta: yes, Iceberg: no).
    assert normalize_location(encoded) != normalize_location(decode_percent(encoded))


def test_decode_percent_rejects_invalid_utf8() -> None:
    with pytest.raises(ValueError):
        decode_percent("/t/%FF%FE")
