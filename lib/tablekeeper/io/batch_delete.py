"""The retries of a store's multipart batch delete (GCS's JSON API batch, Azure's Blob Batch API).

Both stores take one ``multipart/mixed`` request of DELETE calls and answer one part per call,
numbered by its Content-ID. Either the whole request or single calls inside it can be throttled or
fail on the service's side; what is sent again is only what has not been answered for good, with
the same backoff for both. A call answered 404 counts as missing (already gone), any other
non-retryable status as a failure with the service's reason; what is still retryable after the last
attempt is a failure saying so. The stores' own modules build and sign the request and read the
answer's parts; the loop and its verdicts are here once.
"""

from __future__ import annotations

import http.client
import logging
import re
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence

from tablekeeper.io.stores import StoreDeletes
from tablekeeper.redact import redact

log = logging.getLogger(__name__)

ATTEMPTS = 6
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
# Content-ID -> (HTTP status of that call, the service's reason: an error code or a body's line)
Answers = Mapping[int, tuple[int, str]]


def part_answers(
    content_type: str, data: bytes, content_id: str, reason: Callable[[str], str]
) -> dict[int, tuple[int, str]]:
    """The parts of a batch reply: ``content_id`` is the pattern of a part's Content-ID header
    whose one group is the call's number; ``reason`` reads a reason from the part's HTTP answer."""
    boundary = content_type.partition("boundary=")[2].strip().strip('"')
    answers: dict[int, tuple[int, str]] = {}
    for part in data.decode("utf-8", "replace").split(f"--{boundary}")[1:]:
        head, _, inner = part.partition("\r\n\r\n")
        cid = re.search(rf"(?im)^content-id:\s*{content_id}", head)
        status = re.match(r"HTTP/\d(?:\.\d)?\s+(\d{3})", inner.lstrip())
        if cid and status:
            answers[int(cid.group(1))] = (int(status.group(1)), reason(inner))
    return answers


def delete_with_retries(
    names: Sequence[str],
    send: Callable[[Sequence[str]], Answers],
    *,
    label: Callable[[str], str] = lambda name: name,
    sleep: Callable[[float], None] = time.sleep,
) -> StoreDeletes:
    """Send ``names`` with ``send`` (one batch request of them, its answers by position) until
    every call is answered for good or ``ATTEMPTS`` requests were made. ``label`` names a call in
    the result (the store's ``bucket/key``)."""
    pending = list(names)
    deleted: list[str] = []
    missing: list[str] = []
    failures: list[tuple[str, str]] = []
    reason = ""
    made = 0
    for attempt in range(ATTEMPTS):
        if attempt:
            log.debug("batch delete: %d calls again after %s", len(pending), reason)
            sleep(min(8.0, 0.2 * 2**attempt))
        made += 1
        try:
            answers = send(pending)
        except urllib.error.HTTPError as err:
            # Azure says why in a header; GCS's whole-request refusals carry no more than the code.
            code = err.headers.get("x-ms-error-code", "") if err.headers is not None else ""
            reason = f"batch request answered {err.code} {code}".strip()
            if err.code in RETRYABLE:
                continue
            if not (deleted or missing or failures):
                # Refused before any call ran (credentials that may not batch, a container that
                # is not there): the caller deletes another way, which says why if it fails too.
                return StoreDeletes(refused_with=err.code)
            # Refused for good (credentials, permissions): sending it again changes nothing.
            failures += [(label(n), reason) for n in pending]
            pending = []
            break
        except (OSError, http.client.HTTPException) as err:  # a reset or a reply cut short
            reason = f"batch request failed: {redact(str(err)) or err.__class__.__name__}"
            continue
        except ValueError as err:  # the request could not be made (a malformed key or token)
            if not (deleted or missing or failures):
                return StoreDeletes(refused_with=0)
            failures += [(label(n), f"batch request not sent: {redact(str(err))}") for n in pending]
            pending = []
            break
        retry: list[str] = []
        for i, name in enumerate(pending):
            status, text = answers.get(i, (0, "no answer for this call"))
            if 200 <= status < 300:
                deleted.append(label(name))
            elif status == 404:
                missing.append(label(name))
            elif status in RETRYABLE or status == 0:
                retry.append(name)
                reason = f"{status or 'no answer'}: {redact(text)}"
            else:
                failures.append((label(name), f"{status}: {redact(text)}"))
        pending = retry
        if not pending:
            break
    failures += [(label(n), f"still failing after {made} attempts ({reason})") for n in pending]
    return StoreDeletes(tuple(deleted), tuple(missing), tuple(failures))
