"""The retries of a store's batch delete (GCS's and Azure's share them): what is sent again, what
counts as deleted, missing or failed, and the reasons the result gives. The stores' own requests
run against fake-gcs-server and Azurite in tests/interop; here ``send`` answers as a service
throttling or refusing would."""

from __future__ import annotations

import email.message
import http.client
import urllib.error
from collections.abc import Sequence

import pytest

from tablekeeper.io.batch_delete import ATTEMPTS, Answers, delete_with_retries, part_answers

pytestmark = pytest.mark.unit


def refusal(code: int, error_code: str = "") -> urllib.error.HTTPError:
    headers = email.message.Message()
    if error_code:
        headers["x-ms-error-code"] = error_code
    return urllib.error.HTTPError("http://store/batch", code, "refused", headers, None)


class Service:
    """Answers each request from a script: an exception to raise, or per-name statuses."""

    def __init__(self, *script: Exception | dict[str, tuple[int, str]]) -> None:
        self.script = list(script)
        self.sent: list[list[str]] = []

    def __call__(self, names: Sequence[str]) -> Answers:
        self.sent.append(list(names))
        step = self.script.pop(0) if self.script else {}
        if isinstance(step, Exception):
            raise step
        return {i: step[n] for i, n in enumerate(names) if n in step}


def test_only_what_was_not_answered_for_good_is_sent_again() -> None:
    service = Service(
        refusal(503),
        {"a": (204, ""), "b": (404, "gone"), "c": (429, "SlowDown"), "d": (403, "AuthorizationFailure")},
        {"c": (202, "")},
    )
    sleeps: list[float] = []
    result = delete_with_retries(
        ["a", "b", "c", "d"], service, label=lambda n: f"bucket/{n}", sleep=sleeps.append
    )
    assert service.sent == [["a", "b", "c", "d"], ["a", "b", "c", "d"], ["c"]]
    assert result.deleted == ("bucket/a", "bucket/c")
    assert result.missing == ("bucket/b",)
    assert result.failures == (("bucket/d", "403: AuthorizationFailure"),)
    assert sleeps == [0.4, 0.8]  # backoff before each request but the first


def test_a_call_left_unanswered_is_retried_like_a_throttled_one() -> None:
    service = Service({"a": (204, "")}, {"b": (204, "")})
    result = delete_with_retries(["a", "b"], service, sleep=lambda _: None)
    assert service.sent == [["a", "b"], ["b"]]
    assert result.deleted == ("a", "b") and not result.failures


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (refusal(401, "NoAuthenticationInformation"), 401),
        (refusal(403, "AuthorizationFailure"), 403),  # a SAS scoped to a container
        (refusal(404, "ContainerNotFound"), 404),
        (refusal(400, "InvalidHeaderValue"), 400),
        (ValueError("Incorrect padding"), 0),  # a key that cannot sign: nothing was sent
    ],
)
def test_a_request_refused_before_any_call_ran_leaves_every_call_to_the_caller(
    error: Exception, status: int
) -> None:
    """The caller deletes another way (the filesystem's own deletes), which says why if it fails
    too: nothing ran, so nothing is deleted twice."""
    service = Service(error)
    result = delete_with_retries(["a", "b"], service, sleep=lambda _: pytest.fail("no retry"))
    assert len(service.sent) == 1
    assert result.refused_with == status and not (result.deleted or result.missing or result.failures)


def test_a_request_refused_once_calls_were_answered_fails_the_rest_with_its_reason() -> None:
    later = Service({"a": (204, ""), "b": (503, "ServerBusy")}, refusal(403, "AuthorizationFailure"))
    result = delete_with_retries(["a", "b"], later, sleep=lambda _: None)
    assert not result.refused and result.deleted == ("a",)
    assert result.failures == (("b", "batch request answered 403 AuthorizationFailure"),)


def test_a_reply_cut_short_is_retried_like_a_reset() -> None:
    service = Service(http.client.IncompleteRead(b"--batch"), {"a": (202, "")})
    result = delete_with_retries(["a"], service, sleep=lambda _: None)
    assert len(service.sent) == 2 and result.deleted == ("a",) and not result.failures


def test_what_stays_throttled_fails_after_the_last_attempt_saying_why() -> None:
    service = Service(*[{"a": (503, "backendError")}] * ATTEMPTS)
    result = delete_with_retries(["a"], service, sleep=lambda _: None)
    assert len(service.sent) == ATTEMPTS
    assert result.failures == (("a", f"still failing after {ATTEMPTS} attempts (503: backendError)"),)


def test_a_connection_error_is_retried_and_its_secret_never_reported() -> None:
    secret = "https://user:hunter2@store.example/batch"
    service = Service(*[OSError(f"connection reset talking to {secret}")] * ATTEMPTS)
    result = delete_with_retries(["a"], service, sleep=lambda _: None)
    assert len(service.sent) == ATTEMPTS
    ((name, reason),) = result.failures
    assert name == "a" and "hunter2" not in reason and "connection reset" in reason


def test_the_reply_parts_of_both_stores_are_read_by_their_content_ids() -> None:
    azure = (
        b"--batch_1\r\nContent-Type: application/http\r\nContent-ID: 1\r\n\r\n"
        b"HTTP/1.1 403 Forbidden\r\nx-ms-error-code: AuthorizationFailure\r\n\r\n"
        b"--batch_1\r\nContent-Type: application/http\r\nContent-ID: 0\r\n\r\n"
        b"HTTP/1.1 202 Accepted\r\nx-ms-request-id: r\r\n\r\n--batch_1--\r\n"
    )

    def code(answer: str) -> str:
        return "AuthorizationFailure" if "AuthorizationFailure" in answer else ""

    assert part_answers("multipart/mixed; boundary=batch_1", azure, r"(\d+)", code) == {
        0: (202, ""),
        1: (403, "AuthorizationFailure"),
    }
    gcs = (
        b"--b\r\nContent-Type: application/http\r\nContent-ID: <response-0>\r\n\r\n"
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n\r\n"
        b'{"error": "rateLimitExceeded"}\r\n--b--\r\n'
    )
    first = part_answers('multipart/mixed; boundary="b"', gcs, r"<response-(\d+)>", lambda a: a[-40:].strip())
    assert first[0][0] == 429 and "rateLimitExceeded" in first[0][1]
