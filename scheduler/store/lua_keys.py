"""The Lua of the keys a script names (`K.<name>`), written from the `Keys` member of that
name (keys.py), so Python and Lua cannot disagree on a key."""

from __future__ import annotations

import inspect
import re

from scheduler.store.keys import Keys

# Stand-ins for the variable parts of a key while its Lua is written (lua_keys): no key
# holds these characters.
_PROBE = Keys("\x02")
_MARKS = ("\x00", "\x01")
_LUA_PARAMS = ("a", "b")


def _lua_key(name: str) -> str:
    """The Lua of the key `Keys.<name>`: a string, or a function of the variable parts."""
    member = inspect.getattr_static(Keys, name, None)
    if member is None or name.startswith(("_", "rq_")) or name in ("tag", "root", "pattern"):
        raise KeyError(f"K.{name}: Keys has no key of that name for a script")
    if isinstance(member, property):
        return f'{name} = ROOT .. "{_lua_text(getattr(_PROBE, name))}"'
    if not inspect.isfunction(member):
        raise KeyError(f"K.{name}: Keys.{name} is not a key")
    arity = len(inspect.signature(member).parameters) - 1
    text = _lua_text(getattr(_PROBE, name)(*_MARKS[:arity]))
    for mark, param in zip(_MARKS, _LUA_PARAMS, strict=False):
        text = text.replace(mark, f'" .. {param} .. "')
    params = ", ".join(_LUA_PARAMS[:arity])
    body = f'ROOT .. "{text}"'.replace(' .. ""', "")
    return f"{name} = function({params}) return {body} end"


def _lua_text(key: str) -> str:
    suffix = key.removeprefix(_PROBE.root)
    if not re.fullmatch(r"[\x00\x01A-Za-z0-9:._-]*", suffix):
        raise ValueError(f"{suffix!r} needs escaping in Lua")
    return suffix


def library_keys(names: set[str]) -> str:
    """The keys `names` for a function library (functions.py), whose definitions outlive a
    call: K's functions read ROOT when called; its fixed keys are set by `at_root(root)`,
    which each call runs first (a change of root, another deployment, rebuilds them)."""
    functions, fixed = [], []
    for name in sorted(names):
        entry = _lua_key(name)
        if "function(" in entry:
            functions.append(f"\n  {entry},")
        else:
            fixed.append(f'\n  {name} = "{_lua_text(getattr(_PROBE, name))}",')
    return (
        'local ROOT = ""\n'
        f"local K = {{{''.join(functions)}\n}}\n"
        f"local K_FIXED = {{{''.join(fixed)}\n}}\n"
        "local function at_root(root)\n"
        "  if root == ROOT then return end\n"
        "  ROOT = root\n"
        "  for name, suffix in pairs(K_FIXED) do K[name] = root .. suffix end\n"
        "end"
    )


def lua_keys(body: str) -> str:
    """The Lua defining ROOT (KEYS[1], the deployment's root) and the table K of the keys
    that `body` names as `K.<name>`: only those, as Redis builds every definition again on
    each call."""
    names = sorted(set(re.findall(r"(?<![\w.])K\.(\w+)", body)))
    entries = "".join(f"\n  {_lua_key(name)}," for name in names)
    return "local ROOT = KEYS[1]\n" + (f"local K = {{{entries}\n}}" if names else "")
