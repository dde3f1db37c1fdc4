"""Location strings: splitting, joining and comparison keys.

A *location* is the string a table's metadata stores (``s3://bucket/t/data/f.parquet``,
``file:/tmp/t/f``, ``/tmp/t/f``). Locations are never rewritten for storage: what we read from
metadata is what we write back. This module only derives things *from* them:

- ``location_to_path`` splits one into scheme, authority and path (what ``FileIO`` needs to reach it);
- ``normalize_location`` builds a comparison key so that spellings of the same file compare equal;
- ``join_location`` appends children in the base's own spelling;
- ``decode_percent`` undoes percent-encoding, for formats whose logs store encoded paths.

Equivalence rules of ``normalize_location`` (and so of ``is_under``):

- a plain absolute path and every local ``file:`` form are the same: ``/a/b``, ``file:/a/b``,
  ``file:///a/b`` and ``file://localhost/a/b``;
- schemes are case-insensitive; ``equivalent_schemes`` folds aliases (by default s3a and s3n to
  s3, gcs to gs, and abfss, wasb and wasbs to abfs: Hadoop's spellings of one store);
- an Azure storage account's Blob and Data Lake endpoints serve the same files, so under the Azure
  schemes (abfs, abfss, wasb, wasbs) ``container@acct.blob.<suffix>`` and
  ``container@acct.dfs.<suffix>`` are one authority, whichever scheme names them;
- authorities (host, bucket, ``container@account``) are case-insensitive and folded through
  ``authority_equivalents``; a missing authority is the empty string, so ``hdfs:///a`` and
  ``hdfs://nn/a`` differ unless the caller maps ``""`` to ``"nn"`` (only the cluster's
  configuration knows which name node an authority-less URI means);
- repeated slashes collapse, ``.`` segments vanish, ``..`` removes the segment before it and a
  trailing slash is dropped. These fold a few spellings that object stores would keep apart
  (``a//b`` and ``a/b`` are two S3 keys); keys are for comparison, and when they err it is towards
  "same file", which keeps a file rather than deletes it;
- percent-escapes are *not* decoded: ``a%20b`` and ``a b`` differ. Iceberg metadata stores
  decoded names while Delta logs store encoded ones, so decoding in here would make a file really
  named ``a%20b`` equal to ``a b``. Callers holding encoded paths decode them once, with
  ``decode_percent``, before comparing;
- path case is kept (storage is case-sensitive; a case-insensitive local disk is not modelled);
- relative paths are compared as written and never equal an absolute one.

A scheme needs at least two characters, so Windows drive letters are not mistaken for one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import unquote

__all__ = [
    "DEFAULT_EQUIVALENT_SCHEMES",
    "LocationParts",
    "decode_percent",
    "is_under",
    "join_location",
    "location_to_path",
    "normalize_location",
    "strip_trailing_slash",
]

DEFAULT_EQUIVALENT_SCHEMES: Mapping[str, str] = {
    "s3a": "s3",
    "s3n": "s3",
    "gcs": "gs",
    "abfss": "abfs",
    "wasb": "abfs",
    "wasbs": "abfs",
}
# Azure's schemes: their authority is container@account-host, on the Blob or the Data Lake endpoint.
AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
# acct.blob.core.windows.net and acct.dfs.core.windows.net (and a sovereign cloud's suffix).
_AZURE_HOST = re.compile(r"^(?P<account>[^.@]+)\.(?:blob|dfs)\.(?P<suffix>.+)$")

# A URI scheme per RFC 3986, at least two characters long (see the module docstring).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):(.*)$", re.DOTALL)


class LocationParts(NamedTuple):
    """A location split for access: ``scheme`` is lowercase and ``file`` for plain paths;
    ``authority`` is ``""`` when absent (and for ``file://localhost``); ``path`` is verbatim."""

    scheme: str
    authority: str
    path: str


def _split(location: str) -> tuple[str, str | None, str, str]:
    """(prefix as written, authority or None, path, lowercase scheme or "") without any folding."""
    if not location:
        raise ValueError("empty location")
    match = _SCHEME.match(location)
    if match is None:
        return "", None, location, ""
    scheme, rest = match.group(1), match.group(2)
    if rest.startswith("//"):
        end = rest.find("/", 2)
        authority, path = (rest[2:], "") if end < 0 else (rest[2:end], rest[end:])
        return f"{scheme}://{authority}", authority, path, scheme.lower()
    return f"{scheme}:", None, rest, scheme.lower()


def location_to_path(location: str) -> LocationParts:
    """Split ``location`` into (scheme, authority, path). The path keeps its exact spelling."""
    _, authority, path, scheme = _split(location)
    if not scheme:
        return LocationParts("file", "", path)
    auth = authority or ""
    if scheme == "file" and auth.lower() == "localhost":
        auth = ""
    return LocationParts(scheme, auth, path)


class _Key(NamedTuple):
    scheme: str
    authority: str
    absolute: bool
    segments: tuple[str, ...]

    def render(self) -> str:
        body = "/".join(self.segments)
        if self.absolute:
            return f"{self.scheme}://{self.authority}/{body}"
        return f"{self.scheme}:{body}"


def _azure_authority(authority: str) -> str:
    """``container@acct.blob.<suffix>`` spelled as the Data Lake endpoint, which names the same
    blob (a Hadoop cluster writes wasbs:// paths, Iceberg abfss:// ones, for one file)."""
    container, at, host = authority.rpartition("@")
    match = _AZURE_HOST.match(host)
    if not at or match is None:
        return authority
    return f"{container}@{match['account']}.dfs.{match['suffix']}"


def _key(
    location: str,
    equivalent_schemes: Mapping[str, str],
    authority_equivalents: Mapping[str, str] | None,
) -> _Key:
    scheme, authority, path = location_to_path(location)
    azure = scheme in AZURE_SCHEMES
    scheme = equivalent_schemes.get(scheme, scheme).lower()
    authority = authority.lower()
    if azure:
        authority = _azure_authority(authority)
    if authority_equivalents:
        folded = {k.lower(): v.lower() for k, v in authority_equivalents.items()}
        authority = folded.get(authority, authority)
    # "s3://bucket" has an empty path but names the bucket's root, like "s3://bucket/".
    absolute = path.startswith("/") or bool(authority) or (path == "" and scheme != "file")
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments and segments[-1] != "..":
                segments.pop()
            elif not absolute:
                segments.append(segment)
            # ".." above an absolute root stays at the root, as POSIX resolves it.
            continue
        segments.append(segment)
    return _Key(scheme, authority, absolute, tuple(segments))


def normalize_location(
    location: str,
    equivalent_schemes: Mapping[str, str] = DEFAULT_EQUIVALENT_SCHEMES,
    authority_equivalents: Mapping[str, str] | None = None,
) -> str:
    """A comparison key: equal keys mean the same file under the rules in the module docstring.

    The key is for comparing and indexing only; never store it or use it to open a file.
    """
    return _key(location, equivalent_schemes, authority_equivalents).render()


def is_under(
    location: str,
    prefix: str,
    equivalent_schemes: Mapping[str, str] = DEFAULT_EQUIVALENT_SCHEMES,
    authority_equivalents: Mapping[str, str] | None = None,
) -> bool:
    """Whether ``location`` is ``prefix`` or inside it, compared segment by segment.

    ``/a/bc`` is not under ``/a/b``; ``/a/b/../c`` is not under ``/a/b``.
    """
    loc = _key(location, equivalent_schemes, authority_equivalents)
    pre = _key(prefix, equivalent_schemes, authority_equivalents)
    if (loc.scheme, loc.authority, loc.absolute) != (pre.scheme, pre.authority, pre.absolute):
        return False
    if not pre.absolute and (".." in pre.segments or ".." in loc.segments):
        # Relative paths that climb out cannot be compared without knowing their base.
        return False
    return loc.segments[: len(pre.segments)] == pre.segments


def strip_trailing_slash(location: str) -> str:
    """``location`` without trailing slashes in its path, keeping scheme and authority as written.

    A root loses its path entirely (``/`` → ``""``, ``file:/`` → ``file:``), so appending
    ``"/child"`` always gives a valid location in the same spelling.
    """
    prefix, _, path, _ = _split(location)
    return prefix + path.rstrip("/")


def join_location(base: str, *parts: str) -> str:
    """Append path segments to ``base``, keeping its spelling (``file:/a`` stays ``file:/a/...``).

    Slashes inside parts separate segments; empty and ``.`` segments are skipped. ``..`` is refused
    because a joined location must stay inside its base.
    """
    segments: list[str] = []
    for part in parts:
        for segment in part.split("/"):
            if segment in ("", "."):
                continue
            if segment == "..":
                raise ValueError(f"'..' in {part!r}: joined locations must stay under {base!r}")
            segments.append(segment)
    if not segments:
        return base
    return strip_trailing_slash(base) + "/" + "/".join(segments)


def decode_percent(location: str) -> str:
    """Decode ``%XX`` escapes (UTF-8), as Delta log paths need before they are used or compared.

    Kept apart from ``normalize_location`` on purpose: decoding must happen exactly once, where the
    format says a path is encoded. Invalid UTF-8 after decoding raises ``ValueError``.
    """
    if "%" not in location:
        return location
    return unquote(location, errors="strict")
