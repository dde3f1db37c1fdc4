"""The files one manifest keeps alive: each live entry's path, kind and size.

Reachability (what expire-snapshots may delete, what remove-orphans must keep) only needs those
three fields; no partition, metric or typed model is built from an entry, which keeps a pass over
every manifest of every snapshot cheap. fastavro still decodes each record whole (a reader schema
of just these fields is no faster), so decoding is most of the cost. Fields are resolved by id,
like the full reader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import DATA, DELETED, EQUALITY_DELETES
from tablekeeper.iceberg.manifest import id_names, open_avro, record_type

# File kinds, named as Iceberg's procedures count them.
DATA_FILE = "data"
POSITION_DELETE_FILE = "position_delete"
EQUALITY_DELETE_FILE = "equality_delete"
MANIFEST = "manifest"
MANIFEST_LIST = "manifest_list"
STATISTICS = "statistics"
KINDS = (DATA_FILE, POSITION_DELETE_FILE, EQUALITY_DELETE_FILE, MANIFEST, MANIFEST_LIST, STATISTICS)


@dataclass(frozen=True)
class LiveFile:
    path: str
    kind: str
    size: int


def content_kind(content: int) -> str:
    if content == DATA:
        return DATA_FILE
    return EQUALITY_DELETE_FILE if content == EQUALITY_DELETES else POSITION_DELETE_FILE


def live_files(data: bytes, source: str, part: int = 0, parts: int = 1) -> list[LiveFile]:
    """Paths of the ADDED and EXISTING entries of the manifest in ``data``.

    With ``parts`` > 1, only the Avro blocks whose index is ``part`` modulo ``parts``: tasks
    sharing one large manifest each decode a slice of it (blocks are found from their headers,
    so no slice decodes another's records).
    """
    if not 0 <= part < parts:
        raise ValueError(f"part {part} is outside 0..{parts - 1}")
    reader = open_avro(data, f"manifest {source}", blocks=parts > 1)
    top = id_names(reader.writer_schema)
    if 0 not in top or 2 not in top:
        raise CorruptMetadataError(f"manifest {source} has no status or data_file field")
    df = id_names(
        record_type(next(f["type"] for f in reader.writer_schema["fields"] if f.get("field-id") == 2))
    )
    if 100 not in df:
        raise CorruptMetadataError(f"manifest {source} has no file_path field")
    status, data_file, path, content, size = top[0], top[2], df[100], df.get(134), df.get(104)
    records: Iterable[Any] = (
        (rec for i, block in enumerate(reader) if i % parts == part for rec in block) if parts > 1 else reader
    )
    out = []
    try:
        for rec in records:
            if int(rec[status]) == DELETED:
                continue
            f = rec[data_file]
            kind = content_kind(int(f[content])) if content is not None else DATA_FILE
            out.append(LiveFile(f[path], kind, int(f[size]) if size is not None else 0))
    except CorruptMetadataError:
        raise
    except Exception as err:  # truncated blocks, bad codecs: the whole manifest is unreadable
        raise CorruptMetadataError(
            f"manifest {source} is not readable ({err.__class__.__name__}: {err})"
        ) from err
    return out
