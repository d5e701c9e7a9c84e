"""Every script as one Redis function library (Redis 7 FUNCTION LOAD), the way the stores run
them: `FCALL <script.function> 1 <root> <args>`.

An EVAL script builds its whole Lua again on every call: each library definition it uses,
the key table, the tables of codes and fields. That was most of a script's cost (a report's
script spent ~18 µs of its ~25 before its first command: benchmarks/life_cost.py). A function
library is compiled once, when loaded, and its definitions live on between calls; a call
runs its body only.

The library is generated from the same `Script` objects as the EVAL texts (script.py), which
the tests and benchmarks still run: each script's body becomes a function's callback, after
every library definition (library.py) and the keys every script names (lua_keys.py
library_keys). Its name carries a hash of its text, as do its functions' names, so processes
of two versions beside each other (a rolling upgrade) load and call each their own. A store
that finds its function missing (a Redis restarted without persistence, flushed, or a slot
moved to a primary that never loaded it) loads the library and calls again (NoScriptError,
as a script's NOSCRIPT)."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from scheduler.store.lua_keys import library_keys
from scheduler.store.scripts.codes import CODES
from scheduler.store.scripts.library import LIBRARY, argv, code_of
from scheduler.store.scripts.script import SCRIPTS, Script


def _callback(script: Script[object]) -> str:
    parts = ("at_root(KEYS[1])", argv(script.argv, script.rest), script.lua.strip())
    body = "\n".join(filter(None, parts))
    return f"function(KEYS, ARGV)\n{body}\nend"


def _registration(script: Script[object], suffix: str) -> str:
    flags = "{'no-writes'}" if script.read_only else "{}"
    return (
        f"redis.register_function{{function_name = '{script.name}_{suffix}', "
        f"callback = {_callback(script)}, flags = {flags}}}"
    )


@dataclass(frozen=True, slots=True)
class Library:
    name: str
    code: str  # FUNCTION LOAD's argument


@functools.cache
def library() -> Library:
    """The library of every script, built once the package has defined them all (its
    __init__ calls this last), naming each script's function (`Script.function`)."""
    scripts = [SCRIPTS[name] for name in sorted(SCRIPTS)]
    names = set()
    for script in scripts:
        names |= set(re.findall(r"(?<![\w.])K\.(\w+)", code_of(script.text)))
    definitions = "\n".join(LIBRARY.values())
    shared = "\n".join((CODES, library_keys(names), definitions))
    text = shared + "".join(script.lua for script in scripts)
    suffix = hashlib.sha1(text.encode()).hexdigest()[:12]
    registrations = "\n".join(_registration(script, suffix) for script in scripts)
    for script in scripts:
        script.function = f"{script.name}_{suffix}"
    name = f"sched_{suffix}"
    return Library(name, f"#!lua name={name}\n{shared}\n{registrations}\n")
