"""How an executor steps an operation's program (operation.py), written once for the asyncio
store (jobs.py) and the blocking one (sync_store.py): each gives the program a step's reply,
or throws the step's error into it (a program may catch one), until it returns its value."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from scheduler.store.operation import Command, Each, Op, Shard, Step, Steps, Together
from scheduler.store.scripts import Call

T = TypeVar("T")


class Driven(Generic[T]):
    """A program under way: `first()`, then `next(reply)` or `fail(error)` after each step,
    until `done`; then `value`."""

    def __init__(self, program: Steps[T]) -> None:
        self._program = program
        self.done = False
        self.value: T | None = None

    def first(self) -> Step:
        return self.next(None)

    def next(self, reply: Any) -> Step:
        try:
            return self._program.send(reply)
        except StopIteration as stop:
            return self._done(stop.value)

    def fail(self, error: BaseException) -> Step:
        try:
            return self._program.throw(error)
        except StopIteration as stop:
            return self._done(stop.value)

    def _done(self, value: T) -> Step:
        self.done, self.value = True, value
        return None  # type: ignore[return-value]


def merge_each(route: Each, values: list[Any]) -> Any:
    """An `Each` operation's value: one shard's is its own (no merge runs on a single value,
    so an unsharded deployment answers exactly as one shard does)."""
    return values[0] if len(values) == 1 else route.merge(values)


def read_step(step: Call[Any] | Command, reply: Any) -> Any:
    """A step of a Together's reply as its value (a call's read by its script), or its error
    (a reply that is one, or the script's reading of it failing)."""
    if isinstance(reply, BaseException) or isinstance(step, Command):
        return reply
    try:
        return step.parse(reply)
    except Exception as exc:
        return exc


def tolerated(replies: list[Any]) -> list[Any]:
    """A tolerant Together's replies, an error among them as its reply; but an interruption
    (a cancelled request: not an Exception) is raised, never handed on as a value."""
    for reply in replies:
        if isinstance(reply, BaseException) and not isinstance(reply, Exception):
            raise reply
    return replies


def in_step(shard: Shard, ops: Sequence[Op[Any]]) -> Steps[list[Any]]:
    """`ops`' programs run side by side on this shard (a bulk submit's creates: each job's
    own program, unchanged): each round sends the step of every program still running in one
    tolerant `Together`, so N programs of K steps cost K round trips, not N x K. A step's
    error is thrown into its own program alone; a program's uncaught error is its value.
    Their values in order. A program that yields another operation (`Op`, `All`) is not
    run here: its value is a TypeError."""
    runs = [Driven(op.program(shard)) for op in ops]
    values: list[Any] = [None] * len(runs)
    steps: dict[int, Call[Any] | Command | Together] = {}

    def advance(i: int, move: Callable[[], Step]) -> None:
        try:
            step = move()
        except Exception as exc:
            values[i] = exc
            return
        if runs[i].done:
            values[i] = runs[i].value
        elif isinstance(step, Call | Command | Together):
            steps[i] = step
        else:
            values[i] = TypeError(f"in_step sends calls and commands, not {type(step).__name__}")

    for i, run in enumerate(runs):
        advance(i, run.first)
    while steps:
        sent: list[Call[Any] | Command] = []
        spans: dict[int, tuple[int, int]] = {}
        for i, step in steps.items():
            parts = step.steps if isinstance(step, Together) else (step,)
            spans[i] = (len(sent), len(sent) + len(parts))
            sent.extend(parts)
        replies: list[Any] = yield Together(sent, tolerant=True)
        current, steps = steps, {}
        for i, (start, end) in spans.items():
            advance(i, _reply_to(runs[i], current[i], replies[start:end]))
    return values


def _reply_to(
    run: Driven[Any], step: Call[Any] | Command | Together, got: list[Any]
) -> Callable[[], Step]:
    """How `run` is given its step's replies (`got`, an error among them for a step that
    failed): the reply, or the first error thrown in (but into a tolerant Together's)."""
    failed = next((reply for reply in got if isinstance(reply, BaseException)), None)
    if isinstance(step, Together):
        if failed is None or step.tolerant:
            return lambda: run.next(got)
    elif failed is None:
        return lambda: run.next(got[0])
    return lambda: run.fail(failed)
