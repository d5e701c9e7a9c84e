"""The Lua the scripts share, read from lua/includes/, and how a script's text is put together
from its file (`assemble`).

Every state change of a job or node is one script, atomic and one round trip. A script's
only key is KEYS[1], the deployment's root (`Keys.root`, which carries the hash tag, so a
Redis Cluster routes the call to the deployment's slot); it names every other key `K.<name>`
after the `Keys` member of that name (lua_keys.lua_keys). Its arguments are named once, where the
script is defined (script.Script), and bound to Lua locals of those names at its top.

A script is lua/<name>.lua; an include file, lua/includes/<file>.lua, is a list of
definitions (a `local` or `local function` and the comment just above it). Each file starts
with the names it uses from elsewhere, one a line, `--- @include "<name>"`: a definition of an
include file, one of generated.py's (written from Python facts), "codes" (the return codes,
codes.py) or "keys" (the K table of the keys it names, lua_keys.py). A script gets the
definitions it includes and those they use in turn, and no others: Redis builds every
definition again on each EVAL, and unused ones cost about 1 µs of a poll's 6 µs of script
time. A line `--- @insert "<fragment>"` stands for the text of lua/fragments/<fragment>.lua
(code two scripts share that is not a definition: create's checks).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from scheduler.store.lua_keys import lua_keys
from scheduler.store.scripts.codes import CODES
from scheduler.store.scripts.generated import GENERATED
from scheduler.store.scripts.place_lua import PLACES_LUA

LUA = Path(__file__).with_name("lua")

# The include files, in an order where each comes after those it uses (a Lua local is seen
# only by the code after it); the generated definitions come first, using none; places is
# GENERATED_FILES'.
FILES = (
    "access", "room", "quota", "places", "read", "parts", "encode", "time", "wake", "events",
    "series", "attempts", "units", "life", "admit", "steal", "settle", "node_loss", "place",
    "drains", "listing", "gone", "numbering",
)  # fmt: skip

# The include files written from Python, by name: a job's place (places.py), generated from
# its table, and using what the files before it define.
GENERATED_FILES = {"places": PLACES_LUA}

_INCLUDE = re.compile(r'--- @include "(\w+)"')
_INSERT = re.compile(r'^[ \t]*--- @insert "(\w+)"[ \t]*$', re.MULTILINE)
# A definition starts at its comment.
_DEFINITION = re.compile(r"^(?:--[^\n]*\n)*local (?:function )?(\w+)", re.MULTILINE)
# The names "codes" and "keys" include: the return codes, the K table.
CODE_NAMES = frozenset(re.findall(r"\b[A-Z_]+\b", CODES))


@dataclass(frozen=True, slots=True)
class Source:
    """A .lua file: the names it includes, and its Lua after them (fragments inserted)."""

    includes: frozenset[str]
    code: str


def read_source(path: Path) -> Source:
    return parse(path.read_text(), path.name)


def parse(text: str, where: str = "Lua") -> Source:
    lines = text.split("\n")
    head = list(itertools.takewhile(lambda line: line.startswith("--- @include"), lines))
    names = [_INCLUDE.fullmatch(line) for line in head]
    if None in names or len(set(head)) < len(head):
        raise ValueError(f"{where}: an include line that is not one name, once")
    code = insert_fragments("\n".join(lines[len(head) :]))
    return Source(frozenset(m.group(1) for m in names if m), code.strip("\n") + "\n")


def insert_fragments(text: str) -> str:
    """`text` with each `--- @insert` line replaced by its fragment."""
    return _INSERT.sub(lambda m: _fragment(m.group(1)), text)


def _fragment(name: str) -> str:
    return read_source(LUA / "fragments" / f"{name}.lua").code.rstrip("\n")


def split(chunk: str) -> list[tuple[str, str]]:
    """`chunk` as (name, definition) pairs; statements that follow a definition (a loop
    filling its table) belong to it."""
    found = list(_DEFINITION.finditer(chunk))
    ends = [m.start() for m in found[1:]] + [len(chunk)]
    pairs = zip(found, ends, strict=True)
    return [(m.group(1), chunk[m.start() : end].strip()) for m, end in pairs]


def include_source(file: str) -> Source:
    """An include file of FILES: lua/includes/<file>.lua, or one written from Python."""
    text = GENERATED_FILES.get(file)
    return parse(text, file) if text else read_source(LUA / "includes" / f"{file}.lua")


def _load() -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """Every definition by name, in library order, and what each may use: the names its file
    includes and its file's own (a generated one: the keys)."""
    library = dict(GENERATED)
    allowed = {name: frozenset({"keys"}) for name in GENERATED}
    for file in FILES:
        source = include_source(file)
        pairs = split(source.code)
        own = frozenset(name for name, _ in pairs)
        for name, definition in pairs:
            if name in library:
                raise ValueError(f"Lua library: {name} is defined twice")
            library[name] = definition
            allowed[name] = own | source.includes
    return library, allowed


LIBRARY, _ALLOWED = _load()
INCLUDES = frozenset(LIBRARY) | {"codes", "keys"}


def code_of(text: str) -> str:
    """`text` without its comments."""
    return re.sub(r"--[^\n]*", "", text)


# A name as the scripts use one: not a field (`cjson.encode` is not `encode`), nor a method.
_NAME = re.compile(r"(?<![\w.:])([A-Za-z_]\w*)")


@functools.cache
def uses(text: str) -> frozenset[str]:
    """The include names `text` uses: library definitions (`cjson.encode` is not `encode`),
    "codes" for a return code, "keys" for K. (Every name read in one pass: a search per
    definition made the scripts' import take seconds.)"""
    code = code_of(text)
    names = set(_NAME.findall(code))
    used = names & LIBRARY.keys()
    if names & set(CODE_NAMES):
        used.add("codes")
    if re.search(r"(?<![\w.])K\.\w", code):
        used.add("keys")
    return frozenset(used)


def needed(includes: frozenset[str]) -> list[str]:
    """The names `includes` bring: those, and what each definition uses in turn (of the
    names its file may use), definitions in library order."""
    unknown = includes - INCLUDES
    if unknown:
        raise ValueError(f"no Lua definition is named {sorted(unknown)}")
    found: set[str] = set()
    todo = set(includes)
    while todo:
        name = todo.pop()
        found.add(name)
        if name in LIBRARY:
            todo |= (uses(LIBRARY[name]) & _ALLOWED[name]) - found - {name}
    return [*sorted(found - set(LIBRARY)), *(name for name in LIBRARY if name in found)]


def _check_order() -> None:
    seen: set[str] = set()
    for name, definition in LIBRARY.items():
        missing = (uses(definition) & set(LIBRARY)) - seen - {name}
        if missing:
            raise RuntimeError(f"Lua library: {name} uses {sorted(missing)}, defined after it")
        seen.add(name)


_check_order()


def argv(names: tuple[str, ...], rest: str) -> str:
    """Lua binding each ARGV to its name; `rest` gets a table of the arguments after them."""
    lines = []
    if names:
        values = ", ".join(f"ARGV[{i}]" for i in range(1, len(names) + 1))
        lines.append(f"local {', '.join(names)} = {values}")
    if rest:
        lines.append(
            f"local {rest} = {{}}\n"
            f"for i = {len(names) + 1}, #ARGV do {rest}[#{rest} + 1] = ARGV[i] end"
        )
    return "\n".join(lines)


def assemble(name: str, names: tuple[str, ...], rest: str, source: Source) -> str:
    """A script's whole text: its name and the comment its code starts with, its keys, the
    return codes, the library definitions it includes, its arguments by name, then its code."""
    lines = source.code.strip().split("\n")
    comment = list(itertools.takewhile(lambda line: line.startswith("--"), lines))
    header = [f"-- {name}", *comment]
    code = "\n".join(lines[len(comment) :])
    brought = needed(source.includes)
    definitions = "\n".join(LIBRARY[used] for used in brought if used in LIBRARY)
    keys = lua_keys(code_of(definitions + "\n" + code)) if "keys" in brought else ""
    codes = CODES if "codes" in brought else ""
    parts = ("\n".join(header), keys, codes, definitions, argv(names, rest), code, "")
    return "\n".join(parts)
