"""Apache Thrift's binary protocol, generically, and one call over a plain socket: what the Hive
Metastore speaks (no framing, no SASL).

Values decode into a tree that keeps every field with its id and wire type, in the order it came,
so a struct re-encodes to the very bytes it was read from. A Table fetched from the metastore can
therefore be changed in the fields tablekeeper owns and sent back with all the others (fields of
newer Hive versions included) exactly as the server gave them; nothing here knows the metastore's
IDL, so no generated code is needed.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum


class TType(IntEnum):
    STOP = 0
    BOOL = 2
    BYTE = 3
    DOUBLE = 4
    I16 = 6
    I32 = 8
    I64 = 10
    STRING = 11  # also binary: kept as bytes, decoded only where a caller asks for text
    STRUCT = 12
    MAP = 13
    SET = 14
    LIST = 15
    UUID = 16


class MessageType(IntEnum):
    CALL = 1
    REPLY = 2
    EXCEPTION = 3
    ONEWAY = 4


_VERSION_1 = 0x80010000
_VERSION_MASK = 0xFFFF0000
# Refuse absurd sizes before allocating: a corrupt or foreign stream must not exhaust memory.
_MAX_STRING = 256 * 1024 * 1024
_MAX_ITEMS = 16 * 1024 * 1024
_MAX_DEPTH = 64


class ThriftProtocolError(Exception):
    """Bytes that are not the binary protocol (or a reply to another call)."""


@dataclass(frozen=True)
class TList:
    """A list or a set (``kind``), its element type kept even when it is empty."""

    element: TType
    items: tuple[Value, ...] = ()
    kind: TType = TType.LIST


@dataclass(frozen=True)
class TMap:
    key: TType
    value: TType
    items: tuple[tuple[Value, Value], ...] = ()


@dataclass(frozen=True)
class TField:
    id: int
    type: TType
    value: Value


@dataclass(frozen=True)
class TStruct:
    """A struct as it came off the wire: its fields in their order."""

    fields: tuple[TField, ...] = ()

    def get(self, field_id: int) -> Value | None:
        return next((f.value for f in self.fields if f.id == field_id), None)

    def has(self, field_id: int) -> bool:
        return any(f.id == field_id for f in self.fields)

    def with_field(self, field_id: int, ttype: TType, value: Value) -> TStruct:
        """This struct with field ``field_id`` set: replaced where it stands, else added in id
        order (how generated code writes fields)."""
        new = TField(field_id, ttype, value)
        if self.has(field_id):
            return TStruct(tuple(new if f.id == field_id else f for f in self.fields))
        before = tuple(f for f in self.fields if f.id < field_id)
        after = tuple(f for f in self.fields if f.id > field_id)
        return TStruct((*before, new, *after))

    def without(self, field_id: int) -> TStruct:
        return TStruct(tuple(f for f in self.fields if f.id != field_id))

    # Typed accessors: a field of another type than asked reads as absent.
    def text(self, field_id: int) -> str | None:
        value = self.get(field_id)
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else None

    def integer(self, field_id: int) -> int | None:
        value = self.get(field_id)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def struct(self, field_id: int) -> TStruct | None:
        value = self.get(field_id)
        return value if isinstance(value, TStruct) else None

    def strings(self, field_id: int) -> list[str]:
        value = self.get(field_id)
        if not isinstance(value, TList):
            return []
        return [v.decode("utf-8", "replace") for v in value.items if isinstance(v, bytes)]

    def string_map(self, field_id: int) -> dict[str, str]:
        value = self.get(field_id)
        if not isinstance(value, TMap):
            return {}
        return {
            k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
            for k, v in value.items
            if isinstance(k, bytes) and isinstance(v, bytes)
        }


Value = bool | int | float | bytes | TStruct | TList | TMap


# -- building values ---------------------------------------------------------------------------


def text(value: str) -> bytes:
    return value.encode("utf-8")


def string_list(values: Iterable[str]) -> TList:
    return TList(TType.STRING, tuple(text(v) for v in values))


def string_map(values: Mapping[str, str]) -> TMap:
    return TMap(TType.STRING, TType.STRING, tuple((text(k), text(v)) for k, v in values.items()))


def struct_of(*fields: tuple[int, TType, Value | None]) -> TStruct:
    """A struct from ``(id, type, value)`` triples; None values are left unset."""
    return TStruct(tuple(TField(i, t, v) for i, t, v in sorted(fields, key=lambda f: f[0]) if v is not None))


# -- encoding ----------------------------------------------------------------------------------


def _write(out: bytearray, ttype: TType, value: Value) -> None:
    if ttype == TType.BOOL:
        out.append(1 if value else 0)
    elif ttype == TType.BYTE:
        out += struct.pack(">b", _int(value))
    elif ttype == TType.I16:
        out += struct.pack(">h", _int(value))
    elif ttype == TType.I32:
        out += struct.pack(">i", _int(value))
    elif ttype == TType.I64:
        out += struct.pack(">q", _int(value))
    elif ttype == TType.DOUBLE:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ThriftProtocolError(f"a double field holds {type(value).__name__}")
        out += struct.pack(">d", float(value))
    elif ttype == TType.STRING:
        if not isinstance(value, bytes):
            raise ThriftProtocolError(f"a string field holds {type(value).__name__}")
        out += struct.pack(">i", len(value)) + value
    elif ttype == TType.UUID:
        if not isinstance(value, bytes) or len(value) != 16:
            raise ThriftProtocolError("a uuid field needs 16 bytes")
        out += value
    elif ttype == TType.STRUCT:
        if not isinstance(value, TStruct):
            raise ThriftProtocolError(f"a struct field holds {type(value).__name__}")
        for f in value.fields:
            out += struct.pack(">bh", f.type, f.id)
            _write(out, f.type, f.value)
        out.append(TType.STOP)
    elif ttype in (TType.LIST, TType.SET):
        if not isinstance(value, TList):
            raise ThriftProtocolError(f"a list field holds {type(value).__name__}")
        out += struct.pack(">bi", value.element, len(value.items))
        for item in value.items:
            _write(out, value.element, item)
    elif ttype == TType.MAP:
        if not isinstance(value, TMap):
            raise ThriftProtocolError(f"a map field holds {type(value).__name__}")
        out += struct.pack(">bbi", value.key, value.value, len(value.items))
        for k, v in value.items:
            _write(out, value.key, k)
            _write(out, value.value, v)
    else:
        raise ThriftProtocolError(f"cannot write type {ttype}")


def _int(value: Value) -> int:
    if not isinstance(value, int):
        raise ThriftProtocolError(f"an integer field holds {type(value).__name__}")
    return int(value)


def encode_struct(value: TStruct) -> bytes:
    out = bytearray()
    _write(out, TType.STRUCT, value)
    return bytes(out)


def encode_message(name: str, kind: MessageType, seqid: int, body: TStruct) -> bytes:
    """A strict binary-protocol message: version and type, the method's name, the sequence id,
    then the arguments (or result) struct."""
    out = bytearray(struct.pack(">I", _VERSION_1 | kind))
    _write(out, TType.STRING, text(name))
    out += struct.pack(">i", seqid)
    _write(out, TType.STRUCT, body)
    return bytes(out)


# -- decoding ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftProtocolError("the message ends early")
        chunk = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return chunk

    def unpack(self, fmt: str, size: int) -> int:
        (value,) = struct.unpack(fmt, self.take(size))
        return int(value)

    def value(self, ttype: int, depth: int = 0) -> Value:
        if depth > _MAX_DEPTH:
            raise ThriftProtocolError("values nest too deeply")
        if ttype == TType.BOOL:
            return self.take(1) != b"\x00"
        if ttype == TType.BYTE:
            return self.unpack(">b", 1)
        if ttype == TType.I16:
            return self.unpack(">h", 2)
        if ttype == TType.I32:
            return self.unpack(">i", 4)
        if ttype == TType.I64:
            return self.unpack(">q", 8)
        if ttype == TType.DOUBLE:
            (number,) = struct.unpack(">d", self.take(8))
            return float(number)
        if ttype == TType.STRING:
            size = self.unpack(">i", 4)
            if size > _MAX_STRING:
                raise ThriftProtocolError(f"a string of {size} bytes")
            return self.take(size)
        if ttype == TType.UUID:
            return self.take(16)
        if ttype == TType.STRUCT:
            return self.struct(depth)
        if ttype in (TType.LIST, TType.SET):
            element = self.type_byte()
            size = self.count()
            return TList(element, tuple(self.value(element, depth + 1) for _ in range(size)), TType(ttype))
        if ttype == TType.MAP:
            key, val = self.type_byte(), self.type_byte()
            size = self.count()
            return TMap(
                key, val, tuple((self.value(key, depth + 1), self.value(val, depth + 1)) for _ in range(size))
            )
        raise ThriftProtocolError(f"unknown type {ttype}")

    def type_byte(self) -> TType:
        raw = self.unpack(">b", 1)
        try:
            return TType(raw)
        except ValueError:
            raise ThriftProtocolError(f"unknown type {raw}") from None

    def count(self) -> int:
        size = self.unpack(">i", 4)
        if size < 0 or size > _MAX_ITEMS:
            raise ThriftProtocolError(f"a collection of {size} items")
        return size

    def struct(self, depth: int = 0) -> TStruct:
        fields: list[TField] = []
        while True:
            ttype = self.type_byte()
            if ttype == TType.STOP:
                return TStruct(tuple(fields))
            field_id = self.unpack(">h", 2)
            fields.append(TField(field_id, ttype, self.value(ttype, depth + 1)))


def decode_struct(data: bytes) -> TStruct:
    reader = _Reader(data)
    value = reader.struct()
    if reader.pos != len(data):
        raise ThriftProtocolError(f"{len(data) - reader.pos} bytes after the struct")
    return value


@dataclass(frozen=True)
class Message:
    name: str
    kind: MessageType
    seqid: int
    body: TStruct


def decode_message(data: bytes) -> Message:
    reader = _Reader(data)
    name, kind, seqid = _message_head(reader)
    return Message(name, kind, seqid, reader.struct())


def _message_head(reader: _Reader) -> tuple[str, MessageType, int]:
    head = reader.unpack(">I", 4)
    if head & _VERSION_MASK != _VERSION_1:
        raise ThriftProtocolError("not a strict binary-protocol message")
    try:
        kind = MessageType(head & 0xFF)
    except ValueError:
        raise ThriftProtocolError(f"unknown message type {head & 0xFF}") from None
    name_bytes = reader.value(TType.STRING)
    assert isinstance(name_bytes, bytes)
    seqid = reader.unpack(">i", 4)
    return name_bytes.decode("utf-8", "replace"), kind, seqid


# -- one connection ----------------------------------------------------------------------------


class TransportError(Exception):
    """The connection failed. ``sent`` says whether the whole request may have reached the server
    (then it may have been applied)."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class ApplicationError(Exception):
    """The server could not run the call at all (an unknown method, an internal error): Thrift's
    TApplicationException, whose ``type`` says which."""

    UNKNOWN_METHOD = 1

    def __init__(self, message: str, kind: int) -> None:
        super().__init__(message)
        self.kind = kind


class _SocketReader(_Reader):
    """Reads a reply straight off the socket, so no length need be known in advance."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(b"")
        self.sock = sock
        self.buffer = bytearray()

    def take(self, n: int) -> bytes:
        if n < 0:
            raise ThriftProtocolError("a negative size")
        while len(self.buffer) - self.pos < n:
            chunk = self.sock.recv(max(65536, n))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk
        data = bytes(self.buffer[self.pos : self.pos + n])
        self.pos += n
        return data


class ThriftConnection:
    """One socket to a Thrift server, calls made one at a time (the protocol has no multiplexing:
    a thread needs its own connection)."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._sock: socket.socket | None = None
        self._seqid = 0

    def _socket(self) -> socket.socket:
        if self._sock is None:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
            except OSError as err:
                raise TransportError(str(err) or type(err).__name__, sent=False) from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def call(self, method: str, args: TStruct) -> TStruct:
        """Send ``method(args)`` and return its result struct (field 0 the answer, others the
        declared exceptions). A failure leaves the connection closed: its stream is out of step."""
        sock = self._socket()
        self._seqid += 1
        request = encode_message(method, MessageType.CALL, self._seqid, args)
        try:
            # sendall does not say how much it wrote before failing, and the server acts on a
            # whole message: from here on the call may have been applied.
            sock.sendall(request)
            reader = _SocketReader(sock)
            name, kind, seqid = _message_head(reader)
            body = reader.struct()
        except (OSError, ThriftProtocolError) as err:
            self.close()
            raise TransportError(str(err) or type(err).__name__, sent=True) from None
        if kind == MessageType.EXCEPTION:
            raise ApplicationError(body.text(1) or "no message", body.integer(2) or 0)
        if name != method or seqid != self._seqid or kind != MessageType.REPLY:
            self.close()
            raise TransportError(f"a reply to {name!r} #{seqid} came for {method!r}", sent=True)
        return body

    def __enter__(self) -> ThriftConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
