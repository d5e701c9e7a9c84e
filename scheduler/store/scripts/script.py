"""A Lua script as one object: its name, its arguments by name, its Lua, whether it only
reads, and how its reply is read (return codes become exceptions there). A store runs a
`Call` of it; nothing here does I/O."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scheduler.config import Settings
from scheduler.store.scripts.codes import CODES
from scheduler.store.scripts.library import LIBRARY, LUA, assemble, read_source

T = TypeVar("T")

# Every script, by name: registered once, when its module defines it.
SCRIPTS: dict[str, Script[Any]] = {}


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """A script with its arguments, ready to run against the deployment's root."""

    script: Script[T]
    args: list[Any]
    # What the script's reader needs beside the reply that only the caller knows, never sent
    # to Redis (a new job's spec stored apart, which the create script never echoes).
    known: tuple[Any, ...] = ()

    def parse(self, reply: Any) -> T:
        return self.script.reply(reply, *self.known)


class Script(Generic[T]):
    """`argv` names the script's arguments in order, as the Lua sees them; a last name
    starting with "*" takes the rest, a sequence. Its Lua is lua/<name in lower case>.lua
    (library.py). `reply` reads its reply (with a call's `known` values after it).
    `read_only` scripts never wait for replicas (REDIS_MIN_REPLICAS_ACKED) and
    weigh less in the API's batches."""

    def __init__(
        self,
        name: str,
        argv: str,
        reply: Callable[..., T],
        *,
        read_only: bool = False,
    ) -> None:
        names = argv.split()
        self.rest = names.pop()[1:] if names and names[-1].startswith("*") else ""
        self.argv = tuple(names)
        # Every argument's name, checked once here: a call compares against it.
        self.names = frozenset((*self.argv, self.rest) if self.rest else self.argv)
        _check_names(name, [*self.argv, self.rest] if self.rest else list(self.argv))
        self.name = name
        self.reply = reply
        self.read_only = read_only
        self.source = read_source(LUA / f"{name.lower()}.lua")
        self.text = assemble(name, self.argv, self.rest, self.source)
        self.sha = hashlib.sha1(self.text.encode()).hexdigest()
        self.lua = self.source.code
        # Its name in the deployment's Redis function library (functions.py sets it).
        self.function = ""
        if name in SCRIPTS:
            raise ValueError(f"two scripts are named {name}")
        SCRIPTS[name] = self

    def call(self, **args: Any) -> Call[T]:
        """A call with every argument by its name (the rest as a sequence)."""
        if args.keys() != self.names:
            raise TypeError(f"{self.name} takes {sorted(self.names)}, not {sorted(args)}")
        values = [args[name] for name in self.argv]
        if self.rest:
            rest: Sequence[Any] = args[self.rest]
            if isinstance(rest, str | bytes):
                raise TypeError(f"{self.name}: {self.rest} takes a sequence of values")
            values.extend(rest)
        return Call(self, values)

    def acks(self, settings: Settings) -> tuple[int, int]:
        """(replicas to wait for, WAIT timeout in ms) after a call; 0: no WAIT. Every script
        that may write waits for REDIS_MIN_REPLICAS_ACKED replicas."""
        if self.read_only:
            return 0, 0
        return settings.redis_min_replicas_acked, settings.redis_replicas_ack_timeout_ms

    def __repr__(self) -> str:
        return f"Script({self.name})"


# Names a script's arguments may not take: Lua's own words, and the names its text already
# gives (the return codes, the library's definitions, ROOT and K), which they would shadow.
LUA_WORDS = frozenset(
    {
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
        "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
        "redis", "cjson", "table", "string", "math", "unpack", "tonumber", "tostring", "type",
        "pairs", "ipairs", "next", "error", "pcall",
    }
)  # fmt: skip


_TAKEN = LUA_WORDS | set(LIBRARY) | set(re.findall(r"\b[A-Z_]+\b", CODES))


def _check_names(script: str, names: list[str]) -> None:
    # A "*" anywhere but last fails the pattern: only the last argument takes the rest.
    for name in names:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or name in _TAKEN:
            raise ValueError(f"{script}: {name!r} cannot name an argument")
    if len(set(names)) < len(names):
        raise ValueError(f"{script}: an argument is named twice")
