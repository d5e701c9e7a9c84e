"""How every command says an error: `ClientError` (the message, exit status 1, or USAGE for
an option's value refused before any request, and the hints a refused key gets), and the
scheduler's refusals said in one form (`said`: `error: <message> (<HTTP status>)`, a job's
field named as the option that set it: `submitting`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from scheduler.cli.job_options import OptionError, in_option_terms
from scheduler.client import ApiError, SchedulerError, TooManyRequests

# A usage error's exit status, as argparse's own: an option's value refused before any
# request (`error: --env 'NOEQ': use NAME=VALUE`), where a scheduler's refusal exits 1.
USAGE = 2


class ClientError(Exception):
    """Ends the command with this message on stderr and `exit_status`; `status`: the
    scheduler's, when the message says an answer of it; `refused_key`: the answer refused
    the key (the command ends with a hint naming TINYAWS_API_KEY); `locked_for`: seconds
    this address's wrong keys are refused for (a hint says when to try again)."""

    def __init__(
        self,
        message: str,
        status: int = 0,
        refused_key: bool = False,
        locked_for: float = 0,
        exit_status: int = 1,
    ) -> None:
        super().__init__(message)
        self.status, self.refused_key, self.locked_for = status, refused_key, locked_for
        self.exit_status = exit_status


def refused_option(exc: OptionError) -> ClientError:
    """An option's value refused before any request: a usage error (exit 2), said as every
    command says an error."""
    return ClientError(f"error: {exc}", exit_status=USAGE)


def locked_for(exc: ApiError) -> float:
    """Seconds left of the scheduler's lockout of this address's wrong keys (past
    AUTH_FAILURES_MAX), 0 for any other answer: its 429 says them in Retry-After, which a
    429 of a namespace's quota has none of (it stands until jobs end or the quota changes)."""
    return exc.retry_after if isinstance(exc, TooManyRequests) else 0.0


def refused_key(exc: ApiError) -> bool:
    """Whether the scheduler refused the key: 401, or the lockout's 429 (`locked_for`)."""
    return exc.status == 401 or locked_for(exc) > 0


def said(exc: SchedulerError, terms: Callable[[str], str] = str) -> ClientError:
    """A library error as every command says one: `error: job not found (404)`, the
    scheduler's message in `terms` (a job's field said of its option: in_option_terms) and
    its HTTP status (a script, and tests/up_user.py, tell a refused key from a typo by it);
    anything else (`cannot reach the scheduler at URL: ...`, an answer that is not what was
    asked for) after `error: ` too."""
    if isinstance(exc, ApiError) and exc.status >= 400:
        message = f"error: {terms(exc.message)} ({exc.status})"
        return ClientError(message, exc.status, refused_key(exc), locked_for(exc))
    return ClientError(f"error: {exc.message if isinstance(exc, ApiError) else exc}")


@contextlib.contextmanager
def submitting() -> Iterator[None]:
    """The scheduler's refusal of a job made of the job options (submit, schedule add) said
    in the options' terms: `error: --priority: must be ...`, not the API's `priority`."""
    try:
        yield
    except ApiError as exc:
        raise said(exc, in_option_terms) from None


def auth_hint(has_key: bool) -> str:
    """What to do about a refused key, naming TINYAWS_API_KEY."""
    if has_key:
        return (
            "hint: the scheduler refused TINYAWS_API_KEY: set it to the scheduler's key, or "
            "to a named key not revoked (an admin's `scheduler key list` shows them)"
        )
    return "hint: the scheduler needs an API key: set TINYAWS_API_KEY to it"


def lockout_hint(seconds: float) -> str:
    """When this address's wrong keys are served again (Retry-After: whole seconds)."""
    return (
        f"hint: too many wrong keys from this address: try again in {seconds:.0f} s (a right "
        "key is served now)"
    )
