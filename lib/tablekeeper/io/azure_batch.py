"""Deleting many blobs of one container with the Blob Batch API (up to 256 deletes a request).

pyarrow's Azure filesystem deletes one blob at a time, and on an account without a hierarchical
namespace it first leases the blob and makes sure its directory keeps a marker blob: four requests
a file, and concurrent deletes in one directory waiting on each other's leases. A batch sends one
request for up to 256 deletes. pyarrow offers no batch, so the requests and their signing (the
shared key's HMAC, each sub-request signed on its own, or the SAS token on every URL) are here; the
retries of what the service throttles are ``tablekeeper.io.batch_delete``'s, shared with GCS. An
account reached through Azure's default credential chain (known only to pyarrow's client) keeps
pyarrow's deletes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from email.utils import formatdate

from tablekeeper.io.batch_delete import Answers, delete_with_retries, part_answers
from tablekeeper.io.stores import StoreDeletes

BATCH_LIMIT = 256  # the Blob Batch API's maximum of sub-requests
API_VERSION = "2021-08-06"


def _sign(
    key: str, account: str, verb: str, path: str, headers: dict[str, str], query: dict[str, str]
) -> str:
    """The SharedKey Authorization header of one request (Azure's documented string-to-sign:
    the standard headers, the x-ms- headers, then the resource and its query)."""
    length = headers.get("Content-Length", "")
    standard = [
        verb,
        "",  # Content-Encoding
        "",  # Content-Language
        "" if length in ("", "0") else length,
        "",  # Content-MD5
        headers.get("Content-Type", ""),
        "",  # Date (x-ms-date is used)
        "",  # If-Modified-Since
        "",  # If-Match
        "",  # If-None-Match
        "",  # If-Unmodified-Since
        "",  # Range
    ]
    ms = "".join(
        f"{k.lower()}:{v}\n"
        for k, v in sorted(headers.items(), key=lambda i: i[0].lower())
        if k.lower().startswith("x-ms-")
    )
    resource = f"/{account}{path}" + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(query.items()))
    signed = "\n".join(standard) + "\n" + ms + resource
    digest = hmac.new(base64.b64decode(key), signed.encode("utf-8"), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(digest).decode()}"


def _error_code(answer: str) -> str:
    code = re.search(r"(?im)^x-ms-error-code:\s*(\S+)", answer)
    return code.group(1) if code else ""


def delete_blobs(
    account: str,
    base: str,
    container: str,
    blobs: Sequence[str],
    *,
    key: str | None,
    sas: str | None,
) -> StoreDeletes:
    """Delete ``blobs`` (at most ``BATCH_LIMIT``) of ``container`` with one batch request to the
    account's Blob endpoint ``base`` (``https://acct.blob.core.windows.net``, or an emulator's
    ``http://host:port/acct``), signed with the shared ``key`` or the ``sas`` token; throttled
    requests, and throttled sub-requests, are sent again with backoff. Paths are container-relative."""
    prefix = urllib.parse.urlsplit(base).path.rstrip("/")  # "/acct" on an emulator, else ""
    pending = [b.lstrip("/") for b in blobs]

    def send(pending: Sequence[str]) -> Answers:
        boundary = f"batch_{uuid.uuid4()}"
        date = formatdate(usegmt=True)
        parts = []
        for i, blob in enumerate(pending):
            path = f"{prefix}/{urllib.parse.quote(container)}/{urllib.parse.quote(blob)}"
            sub = {"x-ms-date": date, "Content-Length": "0"}
            if key:
                sub["Authorization"] = _sign(key, account, "DELETE", path, sub, {})
            target = f"{path}?{sas}" if sas and not key else path
            lines = "".join(f"{k}: {v}\r\n" for k, v in sub.items())
            parts.append(
                f"--{boundary}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n"
                f"Content-ID: {i}\r\n\r\nDELETE {target} HTTP/1.1\r\n{lines}\r\n"
            )
        body = ("".join(parts) + f"--{boundary}--\r\n").encode()
        # Container-scoped with a key; account-scoped with a SAS (an account SAS grants the
        # service's batch, and Azurite takes a SAS for no container-scoped one).
        query = {"comp": "batch"} if sas and not key else {"restype": "container", "comp": "batch"}
        scope = "" if sas and not key else f"/{urllib.parse.quote(container)}"
        headers = {
            "Content-Type": f"multipart/mixed; boundary={boundary}",
            "Content-Length": str(len(body)),
            "x-ms-date": date,
            "x-ms-version": API_VERSION,
        }
        path = f"{prefix}{scope}" or "/"
        if key:
            headers["Authorization"] = _sign(key, account, "POST", path, headers, query)
        url = f"{base.rstrip('/')}{scope or ('' if prefix else '/')}?{urllib.parse.urlencode(query)}"
        if sas and not key:
            url += "&" + sas
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as reply:
            return part_answers(reply.headers.get("Content-Type", ""), reply.read(), r"(\d+)", _error_code)

    return delete_with_retries(pending, send, label=lambda blob: f"{container}/{blob}")
