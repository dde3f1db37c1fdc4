"""Live manifest entries re-encoded as EXISTING without decoding them into models.

A manifest rewrite changes only the head of each live entry (status, snapshot id, sequence
numbers, all made explicit) and, on v3, a data file's ``first_row_id`` (made explicit from the
manifest's inherited range). Every other byte of the record (paths, partition, metrics, splits)
is carried unchanged. So when a manifest's writer schema has the same binary layout as the one the
rewrite writes, each record is scanned for the offsets of those fields by a function generated for
the schema, and spliced; the partition is decoded once per distinct value. Manifests of any other
layout go through the model reader and the entry encoder. Both give the same values; for records
Java wrote they are the same bytes, while a record whose writer framed a map in another order or
in negative-count blocks keeps its own framing.
"""

from __future__ import annotations

import functools
import io
import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import fastavro

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.avro_encoder import GeneratedSource, write_long
from tablekeeper.iceberg.avro_schemas import manifest_entry_avro
from tablekeeper.iceberg.content import ADDED, DATA, DELETED, EXISTING, MANIFEST_DATA, ManifestFile
from tablekeeper.iceberg.conversions import native_to_value
from tablekeeper.iceberg.manifest import EncodedEntry, entry_encoder, open_avro, read_manifest
from tablekeeper.iceberg.manifest_rewrite import as_existing
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# The entry head the splice rewrites, by field id, in Java's order.
_HEAD = (0, 1, 3, 4, 2)
# Data file fields the scan reports: content, path, partition, record count, first_row_id.
_WATCHED = {134: "content", 100: "path", 102: "partition", 103: "count", 142: "frid"}

Scan = Callable[[Any, int], tuple[Any, ...]]


class _Unsupported(Exception):
    """A schema shape the generator does not scan: use the model path."""


def _canon(t: Any) -> Any:
    """What decides the binary layout of ``t`` (and the field ids): equal canons, equal bytes."""
    if isinstance(t, str):
        if t not in _PRIMITIVES:
            raise _Unsupported(t)  # a named-type reference
        return t
    if isinstance(t, list):
        return ("union", tuple(_canon(x) for x in t))
    if not isinstance(t, Mapping):
        raise _Unsupported(repr(t))
    kind = t.get("type")
    if kind == "record":
        return ("record", tuple((f.get("field-id"), _canon(f["type"])) for f in t["fields"]))
    if kind == "array":
        return ("array", _canon(t["items"]))
    if kind == "map":
        return ("map", _canon(t["values"]))
    if kind == "fixed":
        return ("fixed", int(t["size"]))
    if kind == "enum":
        return ("enum", len(t["symbols"]))
    return _canon(kind)


def _read_long(src: GeneratedSource, d: int, target: str) -> None:
    # Most longs here (counts, lengths, union branches, field ids) fit one byte: no call for them.
    src.emit(d, f"{target} = b[p]")
    src.emit(d, f"if {target} < 128:")
    src.emit(d + 1, f"{target} = ({target} >> 1) ^ -({target} & 1); p += 1")
    src.emit(d, "else:")
    src.emit(d + 1, f"{target}, p = rl(b, p)")


def _skip_long(src: GeneratedSource, d: int) -> None:
    src.emit(d, "if b[p] < 128:")
    src.emit(d + 1, "p += 1")
    src.emit(d, "else:")
    src.emit(d + 1, "p = sl(b, p)")


def _skip(src: GeneratedSource, d: int, c: Any) -> None:
    """Code advancing ``p`` over one value of canonical type ``c``."""
    if c == "null":
        return
    if c in ("int", "long", "enum"):
        _skip_long(src, d)
    elif c == "boolean":
        src.emit(d, "p += 1")
    elif c == "float":
        src.emit(d, "p += 4")
    elif c == "double":
        src.emit(d, "p += 8")
    elif c in ("bytes", "string"):
        n = src.var("n")
        _read_long(src, d, n)
        src.emit(d, f"p += {n}")
    elif isinstance(c, tuple) and c[0] == "fixed":
        src.emit(d, f"p += {c[1]}")
    elif isinstance(c, tuple) and c[0] == "enum":
        _skip_long(src, d)
    elif isinstance(c, tuple) and c[0] == "record":
        for _, ft in c[1]:
            _skip(src, d, ft)
    elif isinstance(c, tuple) and c[0] == "union":
        i = src.var("u")
        _read_long(src, d, i)
        branches = [(k, t) for k, t in enumerate(c[1]) if t != "null"]
        for j, (k, t) in enumerate(branches):
            src.emit(d, f"{'if' if j == 0 else 'elif'} {i} == {k}:")
            _skip(src, d + 1, t)
            src.emit(d + 1, "pass")
    elif isinstance(c, tuple) and c[0] in ("array", "map"):
        n = src.var("n")
        _read_long(src, d, n)
        src.emit(d, f"while {n}:")
        src.emit(d + 1, f"if {n} < 0:")
        src.emit(d + 2, f"{n} = -{n}")
        _skip_long(src, d + 2)  # the block's byte size
        src.emit(d + 1, f"for _ in range({n}):")
        if c[0] == "map":
            _skip(src, d + 2, "string")
        _skip(src, d + 2, c[1])
        src.emit(d + 2, "pass")
        _read_long(src, d + 1, n)
    else:
        raise _Unsupported(repr(c))


def _optional_long(c: Any) -> int:
    """The long branch's index of a ``["null", "long"]`` union (either order)."""
    if isinstance(c, tuple) and c[0] == "union" and sorted(c[1]) == ["long", "null"]:
        return int(c[1].index("long"))
    raise _Unsupported(repr(c))


@functools.lru_cache(maxsize=64)
def _compile(canon_json: str) -> tuple[Scan, tuple[int, int, int, int]]:
    """A scanner of one entry record: returns (status, snapshot id, sequence number, file sequence
    number, data file start, content, path start, path end, partition start, partition end, record
    count, first_row_id, its start, its end, record end), and each head union's long branch."""
    canon = json.loads(canon_json)
    fields = [(fid, _tupled(t)) for fid, t in canon]
    if [fid for fid, _ in fields] != list(_HEAD) or fields[0][1] != "int":
        raise _Unsupported("entry head")
    branches = tuple(_optional_long(t) for _, t in fields[1:4])
    data_file = fields[4][1]
    if not (isinstance(data_file, tuple) and data_file[0] == "record"):
        raise _Unsupported("data_file")
    src = GeneratedSource()
    src.emit(0, "def scan(b, p):")
    _read_long(src, 1, "status")
    for name in ("sid", "seq", "fseq"):
        src.emit(1, f"{name} = None")
        u = src.var("u")
        _read_long(src, 1, u)
        src.emit(1, f"if {u} != {1 - branches[('sid', 'seq', 'fseq').index(name)]}:")
        src.emit(2, f"{name}, p = rl(b, p)")
    src.emit(1, "df = p")
    src.emit(1, "content = 0; ps = pe = qs = qe = fs = fe = -1; count = 0; frid = None")
    seen = set()
    for fid, t in data_file[1]:
        what = _WATCHED.get(fid)
        seen.add(what)
        if what == "content":
            if t != "int":
                raise _Unsupported("content")
            _read_long(src, 1, "content")
        elif what == "count":
            if t != "long":
                raise _Unsupported("record_count")
            src.emit(1, "count, p = rl(b, p)")
        elif what == "path":
            if t != "string":
                raise _Unsupported("file_path")
            _read_long(src, 1, "n")
            src.emit(1, "ps = p; p += n; pe = p")
        elif what == "partition":
            src.emit(1, "qs = p")
            _skip(src, 1, t)
            src.emit(1, "qe = p")
        elif what == "frid":
            k = _optional_long(t)
            src.emit(1, "fs = p")
            _read_long(src, 1, "u")
            src.emit(1, f"if u == {k}:")
            src.emit(2, "frid, p = rl(b, p)")
            src.emit(1, "fe = p")
        else:
            _skip(src, 1, t)
    if not {"path", "partition", "count"} <= seen:
        raise _Unsupported("data_file fields")
    src.emit(1, "return status, sid, seq, fseq, df, content, ps, pe, qs, qe, count, frid, fs, fe, p")
    namespace: dict[str, Any] = {"rl": _rl, "sl": _sl}
    exec(compile("\n".join(src.lines), "<manifest entry scanner>", "exec"), namespace)
    scan: Scan = namespace["scan"]
    return scan, (branches[0], branches[1], branches[2], _frid_branch(data_file))


def _frid_branch(data_file: Any) -> int:
    for fid, t in data_file[1]:
        if fid == 142:
            return _optional_long(t)
    return -1


def _tupled(x: Any) -> Any:
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


def _rl(b: Any, p: int) -> tuple[int, int]:
    x = b[p]
    p += 1
    if x & 0x80:
        x &= 0x7F
        shift = 7
        while True:
            y = b[p]
            p += 1
            x |= (y & 0x7F) << shift
            if not y & 0x80:
                break
            shift += 7
    return (x >> 1) ^ -(x & 1), p


def _sl(b: Any, p: int) -> int:
    while b[p] & 0x80:
        p += 1
    return p + 1


def _head(out: bytearray, branch: int, value: int | None) -> None:
    if value is None:
        write_long(out, 1 - branch)
    else:
        write_long(out, branch)
        write_long(out, value)


def existing_entries(
    data: bytes,
    manifest: ManifestFile,
    *,
    format_version: int,
    spec: PartitionSpec,
    schema: Schema,
) -> Iterator[EncodedEntry]:
    """The live entries of ``manifest`` (``data`` its bytes) as EXISTING records of a manifest of
    ``spec`` in ``format_version``, everything inherited made explicit (as ``as_existing``)."""
    partition_type = spec.partition_type(schema)
    out_avro = manifest_entry_avro(format_version, partition_type)
    reader = open_avro(data, f"manifest {manifest.manifest_path}", blocks=True)
    scan: Scan | None = None
    branches: tuple[int, int, int, int] | None = None
    try:
        canon = _canon(out_avro)
        if _canon(reader.writer_schema) == canon:
            scan, branches = _compile(json.dumps(canon[1]))
    except (_Unsupported, KeyError, TypeError, ValueError):
        pass  # the model reader takes it (and reports a malformed schema in its own words)
    if scan is None or branches is None:
        encode = entry_encoder(format_version, spec, schema, manifest.content)
        for e in read_manifest(data, manifest, partition_type):
            if e.is_live:
                yield encode(as_existing(e))
        return
    part_avro = _partition_avro(out_avro)
    part_schema = fastavro.parse_schema(part_avro)
    types = [f.type for f in partition_type.fields]
    names = [f["name"] for f in part_avro["fields"]]
    partitions: dict[bytes, tuple[Any, ...]] = {}
    sid_branch, seq_branch, fseq_branch, frid_branch = branches
    next_row = manifest.first_row_id
    is_data = manifest.content == MANIFEST_DATA
    try:
        for block in reader:
            b = block.bytes_.getbuffer()
            p = 0
            for _ in range(block.num_records):
                (status, sid, seq, fseq, df, content, ps, pe, qs, qe, count, frid, fs, fe, p) = scan(b, p)
                if status == DELETED:
                    continue
                if sid is None:
                    sid = manifest.added_snapshot_id
                inherit = status == ADDED or manifest.sequence_number == 0
                if seq is None and inherit:
                    seq = manifest.sequence_number
                if fseq is None and inherit:
                    fseq = manifest.sequence_number
                if seq is None:
                    raise CorruptMetadataError(
                        f"an entry of {manifest.manifest_path} has no data sequence number to carry over"
                    )
                out = bytearray()
                write_long(out, EXISTING)
                _head(out, sid_branch, sid)
                _head(out, seq_branch, seq)
                _head(out, fseq_branch, fseq)
                if fs >= 0 and content == DATA and is_data:
                    if next_row is None:
                        frid = None
                    elif frid is None:
                        frid = next_row
                        next_row += count
                    out += b[df:fs]
                    _head(out, frid_branch, frid)
                    out += b[fe:p]
                else:
                    out += b[df:p]
                raw = bytes(b[qs:qe])
                partition = partitions.get(raw)
                if partition is None:
                    rec: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(raw), part_schema, None)  # type: ignore[assignment]
                    partition = tuple(native_to_value(t, rec[n]) for t, n in zip(types, names, strict=True))
                    partitions[raw] = partition
                path = bytes(b[ps:pe]).decode("utf-8")
                yield EncodedEntry(EXISTING, count, seq, partition, path, bytes(out))
    except (IndexError, ValueError, UnicodeDecodeError, EOFError, zlib.error) as err:
        raise CorruptMetadataError(
            f"manifest {manifest.manifest_path} is truncated or corrupt ({err.__class__.__name__})"
        ) from err


def _partition_avro(entry_avro: Mapping[str, Any]) -> dict[str, Any]:
    data_file = next(f["type"] for f in entry_avro["fields"] if f.get("field-id") == 2)
    part = next(f["type"] for f in data_file["fields"] if f.get("field-id") == 102)
    return dict(part)
