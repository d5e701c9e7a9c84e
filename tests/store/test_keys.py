"""The key layout (store/keys.py): one hash tag per deployment, and the old layout's names the
upgrade (store/migrate.py) renames."""

from __future__ import annotations

import inspect
import re

import pytest
import redis
from redis.crc import key_slot

from scheduler.store.keys import Keys, glob_escape
from scheduler.store.legacy_keys import LegacyKeys
from scheduler.store.lua_keys import lua_keys
from scheduler.store.migrate import rename_legacy_keys, retired_text
from scheduler.store.scripts.library import Source, assemble, uses


def every_key(keys: Keys) -> dict[str, str]:
    """Every key and channel `keys` builds, by helper name (methods called with "x")."""
    built = {}
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in ("prefix", "pattern", "rq_queue", "rq_job_id"):
            continue
        if isinstance(member, property):
            built[name] = getattr(keys, name)
        elif callable(member):
            arity = len(inspect.signature(member).parameters) - 1
            built[name] = getattr(keys, name)(*["x"] * arity)
    return built


def test_every_key_and_channel_starts_with_the_tag() -> None:
    keys = Keys("eu.prod-1")
    built = every_key(keys)
    assert len(built) > 30
    slot = key_slot(b"{eu.prod-1}")
    for name, key in built.items():
        assert key.startswith("{eu.prod-1}:") or key == "{eu.prod-1}", name
        assert key_slot(key.encode()) == slot, name


def test_the_upgrade_renames_every_family_of_keys() -> None:
    """The upgrade renames only old keys whose first part is in LAYOUT_ROOTS: a key family
    added to Keys but not there would be left behind by an upgrade."""
    keys = Keys("p")
    for name, key in every_key(keys).items():
        if name in ("tag", "root") or name.startswith("rq_") or "channel" in name:
            continue
        old = "p:" + key.removeprefix(keys.root)
        assert LegacyKeys("p").owns(old), name
    assert not LegacyKeys("p").owns("p:x:jobs")  # the deployment "p:x" of the old layout


def defined(lua: str) -> list[str]:
    """The names the K table of `lua` defines, and the library definitions it holds."""
    return re.findall(r"^  (\w+) = |^local function (\w+)|^local (FINAL) =", lua, re.MULTILINE)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ("return 1", []),
        ('redis.call("GET", K.job(ARGV[1]))', ["job"]),
        (
            "K.node_status(n, s) K.job_channel(id) K.deadlines",
            ["deadlines", "job_channel", "node_status"],
        ),
        ("local x = 1 -- K.status mentioned in a comment, cjson.K.job not a key", []),
    ],
)
def test_a_script_defines_only_the_keys_it_names(body: str, names: list[str]) -> None:
    text = assemble("T", (), "", Source(frozenset(uses(body)), body))
    assert [entry[0] for entry in defined(text) if entry[0]] == names


def test_a_key_in_lua_is_the_key_in_python(rclient: redis.Redis, prefix: str) -> None:
    """Each Keys member a script may name, evaluated by Redis, is what Python builds."""
    keys = Keys(prefix)
    for name, expected in every_key(keys).items():
        if name in ("tag", "root") or name.startswith("rq_"):
            continue
        member = inspect.getattr_static(Keys, name)
        arity = 0 if isinstance(member, property) else len(inspect.signature(member).parameters) - 1
        call = "" if isinstance(member, property) else "(" + ", ".join(["'x'"] * arity) + ")"
        lua = lua_keys(f"K.{name}") + f"\nreturn K.{name}{call}"
        assert rclient.eval(lua, 1, keys.root) == expected.encode(), name


def test_an_unknown_key_name_fails_when_the_script_is_built() -> None:
    with pytest.raises(KeyError, match=r"K\.nope"):
        lua_keys("K.nope")
    with pytest.raises(KeyError, match=r"K\.rq_prefix"):
        lua_keys("K.rq_prefix")


@pytest.mark.parametrize(("body", "has_final"), [("if FINAL[old] then end", True), ("", False)])
def test_a_script_defines_the_final_table_only_when_it_reads_it(body: str, has_final: bool) -> None:
    text = assemble("T", (), "", Source(frozenset(uses(body)), body))
    assert (("", "", "FINAL") in defined(text)) is has_final


def test_glob_escape() -> None:
    assert glob_escape("a*b?[c]\\d{e}") == "a\\*b\\?\\[c\\]\\\\d{e}"


def test_a_new_deployment_is_not_touched(rclient: redis.Redis, prefix: str) -> None:
    keys = Keys(prefix)
    rclient.set(keys.initialised, "started empty")
    rclient.set(f"{prefix}:initialised", "an old marker")  # both: already upgraded
    rclient.set(f"{prefix}:jobs", "x")
    assert rename_legacy_keys(rclient, keys) == 0
    assert rclient.get(f"{prefix}:jobs") == b"x"


@pytest.mark.parametrize("marker", [False, True])
def test_an_old_deployment_is_renamed_with_or_without_its_marker(
    rclient: redis.Redis, prefix: str, marker: bool
) -> None:
    """The old version always set the marker at start; a deployment older than the marker
    has jobs all the same, and gets one (renamed last, as always)."""
    keys, old = Keys(prefix), LegacyKeys(prefix)
    rclient.set(old.of(keys.job_seq, keys), 7)
    if marker:
        rclient.set(old.initialised, "restored 7 jobs")
    assert rename_legacy_keys(rclient, keys) == 2
    assert rclient.get(keys.job_seq) == b"7"
    assert rclient.get(keys.initialised) == (
        b"restored 7 jobs" if marker else b"found jobs in Redis"
    )
    # The old names are retired: an old process finds its marker set and cannot number jobs.
    for name in (old.of(keys.job_seq, keys), old.initialised):
        assert rclient.get(name) == retired_text(keys).encode()


def test_old_keys_without_jobs_or_marker_are_left(rclient: redis.Redis, prefix: str) -> None:
    keys, old = Keys(prefix), LegacyKeys(prefix)
    rclient.set(old.of(keys.stats, keys), 1)
    assert rename_legacy_keys(rclient, keys) == 0
    assert rclient.exists(old.of(keys.stats, keys)) and not rclient.exists(keys.stats)


def test_an_old_lock_does_not_replace_the_one_held(rclient: redis.Redis, prefix: str) -> None:
    keys, old = Keys(prefix), LegacyKeys(prefix)
    rclient.set(old.initialised, "started empty")
    rclient.set(old.of(keys.lock("sqlite-restore"), keys), "a dead old process", px=5000)
    rclient.set(keys.lock("sqlite-restore"), "this upgrade's token", px=5000)
    assert rename_legacy_keys(rclient, keys) == 1
    assert rclient.get(keys.lock("sqlite-restore")) == b"this upgrade's token"


def test_every_key_has_its_row_in_the_architecture_table() -> None:
    """docs/ARCHITECTURE.md's "Redis keys" table is the one description of the layout: each
    helper of Keys is named in its last column."""
    import inspect
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    table = doc.split("## Redis keys", 1)[1].split("\n## ", 1)[0]
    helper_cells = [row.split("|")[-2] for row in table.splitlines() if row.startswith("| `{P}")]
    named = {name for cell in helper_cells for name in re.findall(r"`(\w+)", cell)}
    helpers = {
        name
        for name, member in inspect.getmembers(Keys)
        if not name.startswith("_") and (isinstance(member, property) or inspect.isfunction(member))
    }
    structural = {"root", "tag", "pattern"}  # the deployment's root, its tag, a SCAN match
    rq_names = {name for name in helpers if name.startswith("rq_")}  # rq's (its paragraph)
    assert helpers - structural - rq_names <= named, sorted(helpers - named)
