"""What a call of the client raises: `ApiError` when the scheduler answered with an error
(its status, its message, and the field of the request it names), `Unreachable` when no
answer came after the tries the call may make, `WaitTimeout` when a wait ran out.

The scheduler's errors are plain text (api/http.py): `failed to decode job: priority: must be
an integer between -1000 and 1000`, or `invalid limit: use 1 to 10000`. A decode error repeats
`field: rule` in its X-Error-Detail header (models/rules.py); the field is read from there, or
from a message that starts `invalid <field>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_INVALID = re.compile(r"invalid (?P<field>[A-Za-z_][A-Za-z0-9_.-]*)")
_DETAIL = re.compile(r"(?P<field>[A-Za-z_][A-Za-z0-9_.\[\]-]*): (?P<rule>.+)", re.S)


class SchedulerError(Exception):
    """Every error the client raises."""


class Unreachable(SchedulerError):
    """No answer from the scheduler: it could not be reached, or the connection was lost
    before its answer (after the tries that could not do a thing twice). `maybe_done`: the
    request was sent, so the scheduler may have done it."""

    def __init__(self, message: str, maybe_done: bool = False) -> None:
        super().__init__(message)
        self.maybe_done = maybe_done


class WaitTimeout(SchedulerError):
    """A wait ran out before the job got where it was waited for; `job` is the last seen."""

    def __init__(self, message: str, job: Any) -> None:
        super().__init__(message)
        self.job = job


class ApiError(SchedulerError):
    """The scheduler answered `status` with `message`; `field` is the request's field the
    error names ("" when none), `rule` what it must be."""

    status: int = 0

    def __init__(self, status: int, message: str, field: str = "", rule: str = "") -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.field, self.rule = status, message, field, rule


class BadRequest(ApiError):
    """400: the request is wrong; `field` says which of its fields, when one."""


class Unauthorized(ApiError):
    """401: no key, or a wrong one (TINYAWS_API_KEY)."""


class Forbidden(ApiError):
    """403: a named key whose role does not allow the call (the message says which would)."""


class NotFound(ApiError):
    """404: no such job, node, schedule or named key."""


class Conflict(ApiError):
    """409: the call does not fit what the job or node is now (cancel an ended job, retry a
    job that has not failed, a schedule's or a key's name taken)."""


class TooLarge(ApiError):
    """413: the body is over the scheduler's limit."""


class Unprocessable(ApiError):
    """422: an Idempotency-Key used before for another request."""


class TooManyRequests(ApiError):
    """429: too many wrong credentials from this address (`retry_after` seconds), or a
    submit its namespace's quota refused (docs/GUIDE.md, Quotas)."""

    retry_after: float = 0.0


class Unavailable(ApiError):
    """5xx: the scheduler (or its Redis) cannot answer now."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: Unprocessable,
    429: TooManyRequests,
}


def api_error(status: int, body: bytes, headers: Mapping[str, str]) -> ApiError:
    """The exception for an error answer: its class by status, its field and rule."""
    message = body.decode("utf-8", "replace").strip()
    field, rule = _named(message, headers.get("x-error-detail", ""))
    kind = _BY_STATUS.get(status, Unavailable if status >= 500 else ApiError)
    error = kind(status, message, field, rule)
    if isinstance(error, TooManyRequests):
        error.retry_after = retry_after(headers)
    return error


def _named(message: str, detail: str) -> tuple[str, str]:
    """(field, rule) an error names: its detail's `field: rule`, or `invalid field: rule`."""
    matched = _DETAIL.fullmatch(detail)
    if matched:
        return matched["field"], matched["rule"]
    invalid = _INVALID.match(message)
    if invalid:
        return invalid["field"], message.partition(": ")[2]
    return "", ""


def retry_after(headers: Mapping[str, str]) -> float:
    """Retry-After in seconds (0: none, or a date, which the scheduler never sends)."""
    value = headers.get("retry-after", "")
    return float(value) if value.isascii() and value.isdigit() else 0.0
