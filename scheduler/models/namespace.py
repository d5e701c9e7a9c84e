"""Namespaces (docs/GUIDE.md, Teams): every job and schedule belongs to one, `default` unless
it says another; a named key may be limited to some (models/access_key.py), and then sees,
cancels, retries and depends on those namespaces' jobs only.

A job of the default namespace stores none (`Job.namespace` ""): records made before
namespaces, and every job of a deployment that uses none, are the default's as they are, and
the wire omits the field there, as it omits every empty one. Pure: no I/O here.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from scheduler.models.rules import in_words
from scheduler.models.wire import InvalidInput

DEFAULT = "default"
# A namespace's name: a DNS label, as Kubernetes' and Nomad's.
NAME_WORDS = "1 to 63 characters of a-z 0-9 -, the first and last a letter or digit"
NAME_RULE = in_words(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", NAME_WORDS)
NAME_RE = re.compile(NAME_RULE)
MAX_PER_KEY = 32  # the namespaces one key may be limited to

Namespace = Annotated[str, msgspec.Meta(pattern=NAME_RULE)]


class OutsideNamespace(Exception):
    """A call naming a namespace its key is not limited to (403): a submit into it, a
    schedule made in it. A job or schedule of such a namespace that a call names by id is
    not found instead (404): the key cannot tell it exists."""

    def __init__(self, key: str, namespace: str, allowed: tuple[str, ...]) -> None:
        super().__init__(
            f"forbidden: the key {key!r} may use the namespaces {', '.join(allowed)}; "
            f"not {shown(namespace)!r}"
        )


def check_namespace(name: str) -> None:
    """InvalidInput for a namespace a job or key may not name ("": none named)."""
    if name and not NAME_RE.fullmatch(name):
        raise InvalidInput(f"invalid namespace {name[:64]!r}: use {NAME_WORDS}")


# The scripts' `namespaces` for a caller that sees every namespace (`script_scope`).
EVERY = ""


def script_scope(namespaces: tuple[str, ...]) -> str:
    """The namespaces a caller is limited to (shown names, as Principal.namespaces holds them)
    as the Lua scripts take them (`scope_text`), to answer a job or schedule outside them as
    one that does not exist (lua/includes/read.lua `sees`)."""
    return scope_text(scope(namespaces, ""))


def scope_text(covered: Scope) -> str:
    """What a call covers (`scope`) as every Lua script takes it: EVERY for every namespace
    (and no work), else each as stored between commas (",team-a,," for team-a and default:
    read.lua `sees` finds one with a plain string.find, listing.lua `namespaces_in` lists
    them)."""
    assert covered != (), "a read of no namespace asks Redis nothing"
    return EVERY if covered is None else "," + ",".join(covered) + ","


def shown(stored: str) -> str:
    """A job's namespace as users read it: `default` for the one stored as ""."""
    return stored or DEFAULT


def stored(name: str) -> str:
    """A namespace's name as a job stores it: "" for `default`."""
    return "" if name == DEFAULT else name


# The namespaces a read covers (a listing, the events, the counts), as stored: None for every
# namespace; else those, none at all for a key asking for a namespace it is not limited to
# (it reads nothing, as of a namespace without jobs: it cannot tell which exist).
Scope = tuple[str, ...] | None


def scope(limited: tuple[str, ...], asked: str) -> Scope:
    """What a read of namespace `asked` ("": none named, a valid name: check_namespace) by a
    key `limited` to those namespaces (none: every one) covers: the one asked, if the key may
    read it; with none asked, the key's own, or every namespace."""
    if asked:
        return (stored(asked),) if not limited or asked in limited else ()
    return tuple(stored(name) for name in limited) if limited else None


def in_scope(covered: Scope, namespace: str) -> bool:
    """Whether a job of `namespace` (as stored) is in what a read covers."""
    return covered is None or namespace in covered
