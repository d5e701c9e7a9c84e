"""What README and docs/ show a reader exists (issue 38, Must have 4): every `scheduler ...` or
`./dev ...` command they show parses with the CLI's own parser, and every setting
docs/CONFIGURATION.md's tables name is one the code reads (and every setting is in them)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from scheduler.cli.main import build_parser
from scheduler.config import Settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A command in a code block (indented or fenced) or in an inline `code` span.
BLOCK_LINE = re.compile(r"^(?: {4,}|\t)\s*(.+)$", re.M)
FENCED = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
STARTS = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\./dev|scheduler)(?:\s|$)")
# What ends the command a line shows: a shell operator, or the prose after it.
ENDS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "&", "..."}
# Placeholders README writes for a value the reader picks.
PLACEHOLDER_VALUES = {"K": "1", "k": "1", "N": "2", "SECS": "5"}
# A line of output that starts with the program's name (the banner, a refusal).
OUTPUT = re.compile(r"^scheduler (is up|[\w-]+:)")


def _candidates(text: str) -> list[tuple[str, bool]]:
    """Each command line shown, and whether it is a whole command (a code block's line
    without a synopsis' brackets) rather than a mention (inline, or a synopsis)."""
    block = BLOCK_LINE.findall(text) + [
        line for fenced in FENCED.findall(text) for line in fenced.splitlines()
    ]
    shown = [(line.strip(), "[" not in line and "…" not in line) for line in block]
    shown += [(span.strip(), False) for span in INLINE.findall(text)]
    return [(line, whole) for line, whole in shown if STARTS.match(line) and not OUTPUT.match(line)]


def _argv(line: str) -> list[str] | None:
    """The sub-command's arguments `line` shows, or None when it is not one to parse (the
    test command, whose arguments are pytest's; a placeholder for any command)."""
    line = re.sub(r"\"?\$\([^)]*\)\"?", "X", line).replace("\\|", "|")
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: prose that continues on the next line
        return None
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words = words[1:]
    _program, *args = words
    cut = next((i for i, word in enumerate(args) if word in ENDS), len(args))
    args = [PLACEHOLDER_VALUES.get(word, word) for word in args[:cut]]
    if not args or args[0] == "test" or args[0].isupper():
        return None
    return args


def _shown() -> list[tuple[str, str, bool]]:
    return [
        (page.name, line, whole)
        for page in PAGES
        for line, whole in dict.fromkeys(_candidates(page.read_text(encoding="utf-8")))
    ]


def _sub_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-commands there
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _mentions(args: list[str]) -> list[str]:
    """What a mention names that does not exist: its sub-command path (each of `a/b/c`),
    and any --option it names for the last sub-command."""
    parser, missing = build_parser(), []
    words = list(args)
    while words and not words[0].startswith("-") and _sub_parsers(parser):
        choices = _sub_parsers(parser)
        names = words.pop(0).split("/")
        absent = [name for name in names if name not in choices]
        if absent:
            return [f"no sub-command {' or '.join(absent)}"]
        parser = choices[names[0]]
    known = {option for action in parser._actions for option in action.option_strings}
    for word in words:
        option = word.split("=")[0]
        if option.startswith("--") and option not in known:
            missing.append(f"no option {option}")
    return missing


def test_the_docs_show_commands_at_all() -> None:
    """The collection itself: a change to how pages are written must not empty it."""
    lines = [line for _, line, _ in _shown()]
    assert len(lines) > 40
    assert "./dev up" in lines and any(line.startswith("scheduler submit") for line in lines)


def test_every_command_the_docs_show_parses() -> None:
    """A whole command parses as it is; a mention names sub-commands and options that
    exist."""
    refused = []
    for page, line, whole in _shown():
        args = _argv(line)
        if not args:
            continue
        if not whole:
            refused += [f"{page}: {line}: {what}" for what in _mentions(args)]
            continue
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            if exc.code not in (0, None):
                refused.append(f"{page}: {line}")
    assert refused == []


CONFIG_ROW = re.compile(r"^\| ((?:`[A-Z][A-Z0-9_]+`(?: / )?)+) \|", re.M)


def _tabled() -> set[str]:
    text = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    return {name for cell in CONFIG_ROW.findall(text) for name in re.findall(r"`(\w+)`", cell)}


def _read_by_code(name: str) -> bool:
    """A variable the code reads outside Settings (PORT, rq's RQ_KEY_PREFIX): named as a
    string in scheduler/ or workers/."""
    for folder in ("scheduler", "workers"):
        for path in (ROOT / folder).rglob("*.py"):
            if f'"{name}"' in path.read_text(encoding="utf-8"):
                return True
    return False


SETTINGS = {str(f.metadata["env"]) for f in dataclasses.fields(Settings) if "env" in f.metadata}


@pytest.mark.parametrize("name", sorted(_tabled()))
def test_every_setting_the_table_names_is_read(name: str) -> None:
    assert name in SETTINGS or _read_by_code(name)


def test_every_setting_is_in_the_table() -> None:
    assert SETTINGS - _tabled() == set()
