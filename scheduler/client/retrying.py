"""Which calls the client sends again, and after how long (docs/CLIENT.md, Retries).

A call is sent again when that cannot do anything twice: whatever the call, when the request
never left (`NotSent`); for a `repeatable` call (a read, a submit under its Idempotency-Key,
a drain) also when its answer was lost (`Lost`), or the answer says a try again soon may work
(`passing`: a proxy's 502 or 504, a 503 with Retry-After: a replica restarting, Redis busy).
Any other call whose answer was lost raises `Unreachable` saying it may have been done
(`maybe_done`): a retry by hand or a schedule's change is looked at before it is made again,
by whoever asked for it; a cancel looks itself (jobs.cancel).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.client.errors import Unreachable, retry_after
from scheduler.client.steps import POLICY, Exchange, Flow, Lost, NotSent, Reply, Request, Sleep

PROXIES = (502, 504)  # a proxy's: its backend is restarting, or slow


def passing(reply: Reply) -> bool:
    """Whether an answer says a try again soon may work: a proxy's 502 or 504, or a 503 with
    Retry-After (the scheduler's for a moment's outage: api/errors.py SOON); a 503 without
    one stands (no healthy node, too many nodes) until someone acts."""
    return reply.status in PROXIES or (reply.status == 503 and "retry-after" in reply.headers)


MAX_PAUSE_SECS = 30.0  # the longest a Retry-After is waited


@dataclass(frozen=True, slots=True)
class Policy:
    """`tries`: how many times a call is sent at most; the pause before the second try is
    `first_pause` seconds, doubled each time after (unless the scheduler says Retry-After)."""

    tries: int = 4
    first_pause: float = 0.5
    # False: a request that never left is the call's error at once (a client that has had
    # no answer yet, told to fail fast: the CLI against no scheduler at all).
    retry_not_sent: bool = True

    def pause(self, retried: int) -> float:
        return float(min(self.first_pause * 2.0**retried, MAX_PAUSE_SECS))


def send(request: Request, repeatable: bool) -> Flow[Reply]:
    """The request's answer, sent again as the module says; Unreachable when none came."""
    policy: Policy = yield POLICY
    for retried in range(policy.tries):
        last = retried == policy.tries - 1
        try:
            reply: Reply = yield Exchange(request)
        except NotSent as exc:
            failure = f"cannot reach the scheduler {exc}"
            if not policy.retry_not_sent:
                raise Unreachable(failure) from None
        except Lost as exc:
            failure = f"lost the answer of the scheduler {exc}"
            if not repeatable:
                raise Unreachable(f"{failure} (it may have been done: look first)", True) from None
        else:
            if not passing(reply) or not repeatable or last:
                return reply
            failure = f"the scheduler answered {reply.status}"
            wait = retry_after(reply.headers)
            if wait:
                yield Sleep(min(wait, MAX_PAUSE_SECS))
                continue
        if last:
            raise Unreachable(failure)
        yield Sleep(policy.pause(retried))
    raise AssertionError("unreachable: the last try returns or raises")
