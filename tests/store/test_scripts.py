"""A script as one object (scripts/script.py) and the shared Lua it is put together from
(scripts/library.py): the definitions a script gets, its arguments by name."""

from __future__ import annotations

import re

import pytest
import redis

from scheduler.store.scripts import SCRIPTS, Script
from scheduler.store.scripts import library as lib
from scheduler.store.scripts.library import LIBRARY, assemble, parse


def defined(text: str) -> list[str]:
    return re.findall(r"^local (?:function )?(\w+)", text, re.MULTILINE)


@pytest.mark.parametrize(
    ("body", "needed"),
    [
        ("return 1", []),
        # finish uses move_place, publish, store_job (and encode under it), wake_*, FINAL
        ("finish(id, n, job, 'done', now, stamp)", ["FINAL", "encode", "finish", "move_place"]),
        ("return cjson.encode(x)", []),  # cjson's encode is not the library's
        ("-- finish mentioned in a comment\nreturn 1", []),
        ("local moved = move_pending(node, live, 1, {})", ["move_pending", "next_live", "rebind"]),
    ],
)
def test_a_script_gets_the_definitions_it_uses_and_theirs(body: str, needed: list[str]) -> None:
    got = [name for name in lib.needed(frozenset(lib.uses(body))) if name in LIBRARY]
    assert set(needed) <= set(got)
    if not needed:
        assert got == []
    # In the library's order, each after what it uses, as a Lua local must be.
    assert got == [name for name in LIBRARY if name in got]


def test_every_definition_a_script_gets_is_defined_before_its_body(
    rclient: redis.Redis,
) -> None:
    """Each script's text compiles in Redis and defines each library name once."""
    for name, script in SCRIPTS.items():
        names = defined(script.text)
        assert len(names) == len(set(names)), name
        sha = rclient.script_load(script.text)
        assert rclient.script_exists(sha) == [True], name


def declared(text: str) -> set[str]:
    """Every name a top-level `local` of `text` declares (`local A, B = ...`: both)."""
    found = re.findall(r"^local (?:function )?(\w+(?:\s*,\s*\w+)*)", text, re.MULTILINE)
    return {name.strip() for names in found for name in names.split(",")}


def test_every_library_name_a_script_uses_is_declared_in_its_text() -> None:
    """A name the library declares beside another (`local A, B = ...`) comes with it: a
    script using B alone (an EVAL of its text, as the benchmarks run) has it too."""
    library = set().union(*(declared(definition) for definition in LIBRARY.values()))
    for name, script in SCRIPTS.items():
        # Each word of the code not after `.` or `:` (a field, a method), read in one pass: a
        # search per name and script took seconds. A name is used where it is such a word.
        words = set(re.findall(r"(?<![\w.:])\w+", lib.code_of(script.text)))
        used = library & words
        assert used <= declared(script.text), (name, sorted(used - declared(script.text)))


def test_a_library_out_of_order_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    reordered = dict(reversed(list(LIBRARY.items())))
    monkeypatch.setattr(lib, "LIBRARY", reordered)
    with pytest.raises(RuntimeError, match="defined after it"):
        lib._check_order()


def test_arguments_are_bound_by_name_at_the_top(rclient: redis.Redis) -> None:
    body = parse("return {first, second, #rest, rest[2]}")
    text = assemble("T", ("first", "second"), "rest", body)
    assert rclient.eval(text, 1, "{t}:", "a", "b", "c", "d") == [b"a", b"b", 2, b"d"]


def reply(raw: object) -> object:
    return raw


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ("a *b c", "cannot name"),  # the rest only last
        ("end", "cannot name"),  # a Lua word
        ("finish", "cannot name"),  # a library definition: it would be shadowed
        ("OK", "cannot name"),  # a return code
        ("job_id job_id", "named twice"),
        ("Job", "cannot name"),
    ],
)
def test_a_script_refuses_argument_names_its_lua_cannot_take(argv: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Script(f"BAD_{abs(hash(argv))}", argv, reply)


def test_a_call_takes_every_argument_by_name() -> None:
    script = SCRIPTS["TRIM_OUTBOX"]
    assert script.call(entries=[b"1 a", b"2 b"]).args == [b"1 a", b"2 b"]
    with pytest.raises(TypeError, match="takes"):
        script.call()
    with pytest.raises(TypeError, match="takes"):
        script.call(entries=[], extra=1)
    with pytest.raises(TypeError, match="sequence"):
        script.call(entries=b"ab")  # would pass each byte as an argument
    poll = SCRIPTS["POLL"]
    asked = poll.call(
        caller="open", node="n1", max_jobs=2, capacity="", named="", stealing="1", builtin="1"
    )
    assert asked.args == ["n1", 2, "open", "", "", "1", "1"]


def test_two_scripts_of_one_name_fail() -> None:
    with pytest.raises(ValueError, match="two scripts"):
        Script("POLL", "", reply)


def test_only_the_read_only_scripts_skip_the_replicas() -> None:
    from scheduler.config import Settings

    settings = Settings.from_env({}, redis_min_replicas_acked=2)
    assert SCRIPTS["SESSION_ALIVE"].acks(settings) == (0, 0)
    assert SCRIPTS["POLL"].acks(settings) == (2, settings.redis_replicas_ack_timeout_ms)  # steals
    assert SCRIPTS["TRANSITION"].acks(settings) == (2, settings.redis_replicas_ack_timeout_ms)


@pytest.mark.parametrize("candidates", [["n1"], ["a", "b", "c"], [f"n{i:02}" for i in range(7)]])
def test_the_scripts_place_by_the_rule_of_placement_choose(
    candidates: list[str], rclient: redis.Redis, prefix: str
) -> None:
    """The Lua placement (next_live, over the shared ticket) and its Python model agree,
    ticket after ticket."""
    from scheduler.nodes.placement import Placement, choose
    from scheduler.store.keys import Keys
    from scheduler.store.scripts import listing

    script = SCRIPTS["PICK_NODE"]
    for ticket in range(1, 2 * len(candidates) + 2):
        call = listing.pick_node(Placement.among(candidates), 0.0, 30)
        picked = call.parse(rclient.eval(script.text, 1, Keys(prefix).root, *call.args))
        assert picked == choose(sorted(candidates), ticket)
