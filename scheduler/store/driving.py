"""How an executor steps an operation's program (operation.py), written once for the asyncio
store (jobs.py) and the blocking one (sync_store.py): each gives the program a step's reply,
or throws the step's error into it (a program may catch one), until it returns its value."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from scheduler.store.operation import Each, Step, Steps

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
