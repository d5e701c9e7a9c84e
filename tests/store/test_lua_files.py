"""The scripts' Lua files (scheduler/store/scripts/lua/, docs/ARCHITECTURE.md "Lua files"):
each file's include lines name what it uses, no more, no less; luacheck finds nothing in
any file, nor in any script's text as Redis runs it (an include missing there is an
undefined global) or in the function library; and no Python module holds Lua but the ones
that write it from Python facts."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from scheduler.store.scripts import SCRIPTS, functions
from scheduler.store.scripts import library as lib

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".luacheckrc"
# The modules that write Lua from Python facts (generated.py, the codes, the key table, the
# arguments' binding, the function library's registrations).
WRITERS = {
    "generated.py", "place_lua.py", "codes.py", "lua_keys.py", "library.py", "functions.py",
}  # fmt: skip


def test_a_script_includes_what_it_uses() -> None:
    for name, script in SCRIPTS.items():
        used = lib.uses(script.lua)
        assert script.source.includes == used, (
            f"{name.lower()}.lua: include {sorted(used - script.source.includes)}, "
            f"drop {sorted(script.source.includes - used)}"
        )


@pytest.mark.parametrize("file", lib.FILES)
def test_an_include_file_includes_what_it_uses_from_the_others(file: str) -> None:
    source = lib.include_source(file)
    pairs = lib.split(source.code)
    own = {name for name, _ in pairs}
    used = set().union(*(lib.uses(definition) - {name} for name, definition in pairs)) - own
    assert source.includes == used, (
        f"{file}.lua: include {sorted(used - source.includes)}, "
        f"drop {sorted(source.includes - used)}"
    )


def test_every_lua_file_is_a_script_or_an_include_or_a_fragment_in_use() -> None:
    scripts = {path.stem for path in lib.LUA.glob("*.lua")}
    assert scripts == {name.lower() for name in SCRIPTS}
    written = set(lib.FILES) - set(lib.GENERATED_FILES)
    assert {path.stem for path in (lib.LUA / "includes").glob("*.lua")} == written
    inserted = set()
    for path in lib.LUA.rglob("*.lua"):
        inserted |= set(re.findall(r'--- @insert "(\w+)"', path.read_text()))
    assert {path.stem for path in (lib.LUA / "fragments").glob("*.lua")} == inserted


def test_an_unknown_include_fails() -> None:
    source = lib.parse('--- @include "no_such_thing"\nreturn 1')
    with pytest.raises(ValueError, match="no_such_thing"):
        lib.assemble("T", (), "", source)


def _luacheck(paths: list[Path], *options: str) -> str:
    """luacheck's findings in `paths` ("" for none)."""
    luacheck = shutil.which("luacheck")
    assert luacheck, "luacheck is missing: apt-get install lua-check"
    done = subprocess.run(
        [luacheck, "--config", str(CONFIG), "--codes", "--no-color", "--formatter", "plain"]
        + [str(path) for path in paths]
        + list(options),  # after the files: an option may take any number of values
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1, 2), done.stderr  # 1, 2: warnings, errors; else it failed
    return done.stdout.strip()


def _names(includes: frozenset[str]) -> set[str]:
    """The globals that `includes` stand for in a file read alone."""
    names = includes - {"codes", "keys"}
    if "codes" in includes:
        names |= lib.CODE_NAMES
    if "keys" in includes:
        names |= {"K"}
    return names


# Each file alone (its fragments put in): the names it includes and a script's arguments are
# globals there, on first lines of options; its findings are reported at the file's lines.
# An include file's unused definitions are not findings (each is some script's: the function
# library's lint finds one that is none's).
def test_luacheck_finds_nothing_in_any_lua_file(tmp_path: Path) -> None:
    copies: dict[str, tuple[Path, int]] = {}
    by_file = {f"{name.lower()}.lua": script for name, script in SCRIPTS.items()}
    for path in [*lib.LUA.glob("*.lua"), *(lib.LUA / "includes").glob("*.lua")]:
        source = lib.read_source(path)
        script = by_file.get(path.name) if path.parent == lib.LUA else None
        included = " ".join(sorted(_names(source.includes)))
        arguments = " ".join(sorted(script.names if script else ()))  # locals: may be set
        options = [f"-- luacheck: read globals {line}" for line in textwrap.wrap(included, 60)]
        options += [f"-- luacheck: globals {line}" for line in textwrap.wrap(arguments, 60)]
        if not script:
            options.append("-- luacheck: ignore 211")
        copy = tmp_path / path.parent.name / path.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_text("\n".join([*options, lib.insert_fragments(path.read_text())]))
        copies[str(copy)] = (path, len(options))
    findings = []
    for line in _luacheck([Path(copy) for copy in copies]).splitlines():
        copy, number, finding = line.split(":", 2)
        path, shift = copies[copy]
        findings.append(f"{path.relative_to(ROOT)}:{int(number) - shift}:{finding}")
    assert findings == []


def test_luacheck_finds_nothing_in_the_text_redis_runs(tmp_path: Path) -> None:
    """Each script's assembled text (its definitions, keys, codes and arguments) and the
    function library, whose lines may be long (generated tables, the arguments' binding)."""
    paths = []
    for name, script in SCRIPTS.items():
        paths.append(tmp_path / f"{name}.lua")
        paths[-1].write_text(script.text)
    paths.append(tmp_path / "library.lua")
    shebang, code = functions.library().code.split("\n", 1)  # #!lua name=...
    paths[-1].write_text(f"--{shebang}\n{code}")
    unused_codes = ["--ignore", *(f"211/{name}" for name in sorted(lib.CODE_NAMES))]
    found = _luacheck(paths, "--no-max-line-length", *unused_codes)
    assert found == "", found


def test_a_missing_include_is_an_undefined_global_in_the_text(tmp_path: Path) -> None:
    text = lib.assemble("T", ("id",), "", lib.parse("return load_job(id)"))
    (tmp_path / "t.lua").write_text(text)
    assert "undefined variable 'load_job'" in _luacheck([tmp_path / "t.lua"])


# Lua in a Python string: a Redis call, a local or a function definition, an if's body.
_LUA = re.compile(
    r"redis\.(?:p?call|register_function)\(|^\s*local (?:function )?\w+(?:, \w+)* =?"
    r"|\bthen\b[\s\S]*\bend\b|\b(?:ARGV|KEYS)\[",
    re.MULTILINE,
)


def _lua_strings(path: Path) -> list[int]:
    """The lines of `path`'s strings (but docstrings) that hold Lua."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and _LUA.search(node.value)
    ]


def test_no_python_module_holds_lua_but_those_that_write_it() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for folder in ("scheduler", "workers")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name not in WRITERS and (lines := _lua_strings(path))
    }
    assert found == {}


def test_lua_in_a_python_string_is_found(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""A local user."""\nX = """\nlocal n = redis.call("GET", K.x)\n"""\n')
    assert _lua_strings(path) == [2]
