"""A loopback HTTP proxy in front of a storage emulator, in a process of its own: it answers 503 to
every ``every``-th request (a deterministic counter) without forwarding it, as a service under load
does, and forwards the rest as they came (signatures stay valid). It records each request's
method, path, ``Authorization`` and ``User-Agent`` headers; ``GET /__proxy__/stats`` returns them.

One answer is the proxy's own: a GCS resumable upload whose chunk it refused is asked about
(``PUT`` with ``Content-Range: bytes */*``, no body) and fake-gcs-server would finalize the object
as it stands, empty, where GCS answers 308 with what it persisted (nothing of the refused chunk),
and the client sends the chunk again. The proxy refused that chunk itself, so it answers as GCS
does.

A process of its own because a client may hold the caller's interpreter lock while it waits for
an answer (pyarrow's GCS downloads do), and a proxy thread in the same interpreter could then never
answer it: every such download hung.

Run as ``python -m tests.support.store_proxy UPSTREAM EVERY``; it prints its port, then serves
until terminated.
"""

from __future__ import annotations

import http.client
import http.server
import json
import sys
import threading
from typing import Any, ClassVar

LOOPBACK = "127.0.0.1"
STATS_PATH = "/__proxy__/stats"


class _Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = ""
    every = 10  # 0: never refuse (a recording proxy)
    seen: ClassVar[list[dict[str, str]]] = []
    refused: ClassVar[list[int]] = [0]
    # upload_id -> the first byte of the chunk refused (every byte before it was forwarded)
    refused_chunks: ClassVar[dict[str, int]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, data: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        body = self._body()
        if self.path == STATS_PATH:
            with self.lock:
                stats = {"seen": list(self.seen), "refused": self.refused[0]}
            self._reply(200, json.dumps(stats).encode(), {"Content-Type": "application/json"})
            return
        upload = _upload_id(self.path)
        with self.lock:
            resumed_at = self.refused_chunks.pop(upload, None) if upload else None
        if (
            resumed_at is not None
            and not body
            and self.headers.get("Content-Range", "").startswith("bytes */")
        ):
            persisted = {"Range": f"bytes=0-{resumed_at - 1}"} if resumed_at else {}
            self._reply(308, headers=persisted)
            return
        with self.lock:
            self.seen.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "authorization": self.headers.get("Authorization", ""),
                    "agent": self.headers.get("User-Agent", ""),
                    "range": self.headers.get("Content-Range", ""),
                    "length": str(len(body)),
                }
            )
            refuse = self.every > 0 and len(self.seen) % self.every == 0
            self.refused[0] += refuse
            chunk = self.headers.get("Content-Range", "")
            if refuse and upload and chunk.startswith("bytes ") and not chunk.startswith("bytes */"):
                self.refused_chunks[upload] = int(chunk[6:].partition("-")[0])
        if refuse:
            self._reply(503, headers={"Retry-After": "0"})
            return
        host, _, port = self.upstream.partition("://")[2].partition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding")
            }
            headers["Content-Length"] = str(len(body))
            connection.request(self.command, self.path, body=body, headers=headers)
            reply = connection.getresponse()
            data = reply.read()
            self.send_response(reply.status, reply.reason)
            head = self.command == "HEAD"  # its Content-Length is the object's size: kept as sent
            for key, value in reply.getheaders():
                if key.lower() in ("transfer-encoding", "connection", "server", "date") or (
                    key.lower() == "content-length" and not head
                ):
                    continue
                self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)
        finally:
            connection.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _handle  # noqa: N815

    def log_message(self, *args: Any) -> None:  # keep the test output to failures
        pass


def _upload_id(path: str) -> str:
    query = path.partition("?")[2]
    return next((v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "upload_id"), "")


def main(argv: list[str]) -> None:
    upstream, every = argv[0], int(argv[1])
    handler = type(
        "Handler",
        (_Proxy,),
        {"upstream": upstream, "every": every, "seen": [], "refused": [0], "refused_chunks": {}},
    )
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
