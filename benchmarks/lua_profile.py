"""Where a script's own Lua goes, line by line: the VM instructions of each function of a job's
life's scripts (create, the poll, running, done), which callgrind cannot split (it sees
Redis's interpreter, not the script's lines; Redis gives scripts no `debug` library).

    .venv/bin/python -m benchmarks.lua_profile [--stored 200] [--top 12]

Each call of the life runs twice:
1. in a private Redis, as EVAL of its text wrapped to log every `redis.call` and its reply;
2. under a plain Lua 5.1 (`lua5.1` and `lua-cjson`, Debian's), the same text with a
   `redis.call` that replays that log, a count hook counting each VM instruction of the
   script by the function it is in, and a call hook counting the C functions it calls
   (`cjson.encode`, `string.format`...), whose own cost is not in the count.

A VM instruction is not a CPU instruction: the figures rank the Lua against itself. What the
redis.call commands cost is `life_commands --units`'s. The EVAL text builds every definition
on each call, which the function library does once: that prelude is counted apart and left
out of the ranking.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from benchmarks import harness
from benchmarks.life_commands import STEPS, life_calls
from benchmarks.report import Column, Table
from benchmarks.script_instructions import Scripts

# The EVAL text, each redis.call (and pcall) logged with its reply; returns {log, reply...}.
RECORDING = """local __real, __log = redis, {}
local function __logged(how)
  return function(...)
    local reply = __real[how](...)
    __log[#__log + 1] = {{...}, reply}
    return reply
  end
end
local redis = setmetatable({call = __logged("call"), pcall = __logged("pcall")},
  {__index = __real})
local __reply = {(function()
%s
end)()}
return {cjson.encode(__log), unpack(__reply)}
"""

# Runs the text of argv[1] with KEYS, ARGV and the log of argv[2] (JSON), counting; prints
# JSON: {lines: {"defined:line": count}, c: {name: calls}, replayed: n}.
REPLAY = """local cjson = require("cjson")
local function read(path)
  local f = assert(io.open(path))
  local text = f:read("*a")
  f:close()
  return text
end
local text, given = read(arg[1]), cjson.decode(read(arg[2]))
_G.cjson, KEYS, ARGV = cjson, given.keys, given.argv
local log, at = given.log, 0
local function replay(...)
  at = at + 1
  local entry, name = log[at], ...
  if not entry or string.upper(entry[1][1]) ~= string.upper(name) then
    error("the replay left the log at command " .. at .. ": " .. tostring(name))
  end
  return entry[2]
end
redis = {call = replay, pcall = replay}
local lines, cs = {}, {}
local function hook(event)
  local info = debug.getinfo(2, "Sln")
  if not info or info.source ~= "=script" then
    if event == "call" and info and info.what == "C" then
      local caller = debug.getinfo(3, "S")
      if caller and caller.source == "=script" then
        local name = info.name or "?"
        cs[name] = (cs[name] or 0) + 1
      end
    end
    return
  end
  if event == "count" then
    local key = info.linedefined .. ":" .. (info.currentline or 0)
    lines[key] = (lines[key] or 0) + 1
  end
end
local chunk = assert(loadstring(text, "=script"))
debug.sethook(hook, "c", 1)
local ok, err = pcall(chunk)
debug.sethook()
if not ok then error(err) end
io.write(cjson.encode({lines = lines, c = cs, replayed = at}))
"""

_DEFINED = re.compile(r"^\s*local function (\w+)|^\s*(?:local )?([\w.]+)\s*=\s*function")
_TABLE = re.compile(r"^\s*(?:local )?([\w.]+)\s*=\s*\{")


def function_name(source: list[str], defined: int) -> str:
    """The name a function's definition gives it: `finish`, or a table's field as
    `K.node_status` (the table: the nearest line above, less indented, that opens one)."""
    line = source[defined - 1] if 0 < defined <= len(source) else ""
    match = _DEFINED.match(line)
    if not match:
        return f"function@{defined}"
    name = next(filter(None, match.groups()))
    indent = len(line) - len(line.lstrip())
    if match.group(1) or indent == 0:
        return name
    for above in reversed(source[: defined - 1]):
        opened = _TABLE.match(above)
        if opened and len(above) - len(above.lstrip()) < indent:
            return f"{opened.group(1)}.{name}"
    return name


def recorded(client: redis.Redis, text: str, keys: list[str], args: list[Any]) -> list[Any]:
    """The call's log (each command with its reply), from Redis running its text."""
    reply = client.eval(RECORDING % text, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
    log: list[Any] = json.loads(reply[0])
    return log


def replayed(text: str, keys: list[str], args: list[Any], log: list[Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as work:
        paths = [Path(work, name) for name in ("script.lua", "given.json", "replay.lua")]
        paths[0].write_text(text)
        given = {"keys": keys, "argv": [_text(a) for a in args], "log": log}
        paths[1].write_text(json.dumps(given))
        paths[2].write_text(REPLAY)
        out = subprocess.run(
            ["lua5.1", str(paths[2]), str(paths[0]), str(paths[1])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    counted: dict[str, Any] = json.loads(out)
    return counted


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def by_function(text: str, lines: dict[str, int]) -> Counter[str]:
    """The counts of `lines` ("defined:line") by function: the name its definition's line
    gives (an anonymous function: the one around it, `name@line`), the main chunk's split at
    the script's body (its ARGV line): the prelude before, `(body)` after."""
    source = text.splitlines()
    body = next((i + 1 for i, line in enumerate(source) if "= ARGV[1]" in line), 0)
    out: Counter[str] = Counter()
    for key, count in lines.items():
        defined, line = (int(part) for part in key.split(":"))
        if defined == 0:
            out["(prelude)" if line < body else "(body)"] += count
            continue
        out[function_name(source, defined)] += count
    return out


def measure(stored: int) -> dict[str, dict[str, Any]]:
    """Each step's counts by function and its C calls, the checkout first on the path."""
    s = Scripts("lp")
    fill, life = life_calls(s, stored)
    steps: dict[str, dict[str, Any]] = {}
    with harness.redis_server() as url, harness.connected(url) as client:
        client.set(s.keys.initialised, "benchmark")
        for build in fill:
            text, keys, args = s.parts(build())
            client.eval(text, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
        for name, build in zip(STEPS, life, strict=True):
            text, keys, args = s.parts(build())
            log = recorded(client, text, keys, args)
            counted = replayed(text, keys, args, log)
            if counted["replayed"] != len(log):
                raise RuntimeError(f"{name}: the replay ran {counted['replayed']} of {len(log)}")
            steps[name] = {
                "functions": by_function(text, counted["lines"]),
                "c": counted["c"],
                "commands": counted["replayed"],
            }
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=200, help="jobs stored before the life")
    parser.add_argument("--top", type=int, default=12, help="the functions shown a step")
    args = parser.parse_args()
    if shutil.which("lua5.1") is None:
        print("lua_profile needs lua5.1 and lua-cjson (apt-get install lua5.1 lua-cjson)")
        return 2
    steps = measure(args.stored)
    life: Counter[str] = Counter()
    for name, step in steps.items():
        functions: Counter[str] = step["functions"]
        life.update(functions)
        _print(f"{name} ({step['commands']} commands)", functions, args.top)
        calls = ", ".join(f"{n} {c}" for n, c in Counter(step["c"]).most_common(8))
        print(f"  C calls: {calls}")
    _print("life", life, args.top)
    return 0


def _print(title: str, functions: Counter[str], top: int) -> None:
    ran = sum(v for k, v in functions.items() if k != "(prelude)")
    table = Table(Column("VM instr", "9d"), Column("share", "6.1%"), label_width=32)
    print()
    table.header(title)
    table.row("all but the prelude", ran, 1.0)
    for name, count in functions.most_common():
        if name == "(prelude)":
            continue
        table.row(name, count, count / ran if ran else 0.0)
        top -= 1
        if top == 0:
            break


if __name__ == "__main__":
    sys.exit(main())
