"""Named keys (models/access_key.py), their scripts on a real Redis (store/scripts/access.py)
and an API process's copy of them (api/keyring.py)."""

from __future__ import annotations

import msgspec
import pytest
import redis

from scheduler.api.keyring import Keyring
from scheduler.models.access_key import (
    ADMIN,
    KEY_PREFIX,
    ROLES,
    KeyRequest,
    Principal,
    Role,
    key_hash,
    key_id,
    new_key,
    new_record,
)
from scheduler.models.job import HIDDEN, shown_to
from scheduler.store.errors import Conflict, KeyNotFound, StoreNotReady
from scheduler.store.keys import Keys
from scheduler.store.scripts import access
from scheduler.store.sync_store import SyncJobStore


@pytest.mark.parametrize("have", ROLES)
@pytest.mark.parametrize("need", ROLES)
def test_a_role_allows_what_the_rungs_below_it_do(have: str, need: str) -> None:
    assert Role(have).allows(Role(need)) is (ROLES.index(have) >= ROLES.index(need))


@pytest.mark.parametrize(
    ("role", "sees"),
    [("reader", False), ("submitter", True), ("operator", True), ("admin", True)],
)
def test_only_a_reader_sees_env_vars_without_their_values(role: str, sees: bool) -> None:
    job = b'{"job_id":"job-1","env_vars":{"TOKEN":"s3cret","B":""},"status":"pending"}'
    shown = shown_to(Principal("k", Role(role)), job)
    assert (b"s3cret" in shown) is sees
    if not sees:
        assert list(msgspec.json.decode(shown)) == ["job_id", "env_vars", "status"]  # in order
        assert msgspec.json.decode(shown)["env_vars"] == {"TOKEN": HIDDEN, "B": HIDDEN}


def test_a_job_without_env_vars_is_shown_to_a_reader_as_it_is() -> None:
    job = b'{"job_id":"job-1","status":"pending"}'
    assert msgspec.json.decode(shown_to(Principal("k", Role.READER), job)) == {
        "job_id": "job-1",
        "status": "pending",
    }


def test_a_new_key_is_prefixed_random_and_kept_by_its_hash() -> None:
    one, two = new_key(), new_key()
    assert one.startswith(KEY_PREFIX) and len(one) == len(KEY_PREFIX) + 43 and one != two
    record = new_record(KeyRequest("ci", Role.READER), one, 5.0, ADMIN)
    assert record.hash == key_hash(one) and one not in msgspec.json.encode(record).decode()
    assert (record.created_by, record.created_at) == ("admin", 5.0)


@pytest.mark.parametrize("name", ["", "CI", "-x", "a b", "x" * 65, "é"])
def test_a_key_name_out_of_its_rule_is_refused(name: str) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode({"name": name, "role": "reader"}), type=KeyRequest)


def _record(name: str, role: Role = Role.READER) -> tuple[str, access.KeyRecord]:
    key = new_key()
    return key, new_record(KeyRequest(name, role), key, 1.0, ADMIN)


def test_the_scripts_add_list_and_revoke_keys_moving_the_version(
    store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    assert store.run(access.keyring(-1)) == (0, [])
    _, ci = _record("ci")
    with pytest.raises(StoreNotReady):  # no restore marker: the snapshot's keys come first
        store.run(access.add_key(ci, 2.0, ADMIN))
    with pytest.raises(StoreNotReady):
        store.run(access.revoke_key("ci", 2.0, ADMIN))
    store.redis.set(store.keys.initialised, "test")  # no API started: nothing to restore
    # A version is one past the last and never below the time in ms (`at`): a Redis that
    # lost its data never hands out one a process still holds from before.
    assert store.run(access.add_key(ci, 2.0, ADMIN)) == 2000
    with pytest.raises(Conflict, match="exists"):
        store.run(access.add_key(_record("ci", Role.ADMIN)[1], 2.0, ADMIN))
    assert store.run(access.keyring(-1)) == (2000, [ci])
    assert store.run(access.keyring(2000)) == (2000, None)  # unchanged: not read again
    assert store.run(access.revoke_key("ci", 2.0, Principal("boss", Role.ADMIN))) == 2001
    with pytest.raises(KeyNotFound):
        store.run(access.revoke_key("ci", 5.0, ADMIN))
    assert store.run(access.keyring(2000)) == (2001, [])
    store.redis.delete(store.keys.api_keys_version)  # lost: counted again from the time
    _, again = _record("again")
    assert store.run(access.add_key(again, 9.0, ADMIN)) == 9000
    audit = rclient.xrange(Keys(prefix).audit)
    said = [(f[b"by"], f[b"action"], f[b"name"], f[b"role"]) for _, f in audit]
    assert said == [
        (b"admin", b"key add", b"ci", b"reader"),
        (b"boss", b"key revoke", b"ci", b"reader"),
        (b"admin", b"key add", b"again", b"reader"),
    ]


def test_no_more_keys_than_max_keys_are_made(store: SyncJobStore) -> None:
    store.redis.set(store.keys.initialised, "test")

    def add(name: str) -> int:
        _, record = _record(name)
        call = access.ADD_KEY.call(
            name=name,
            record=msgspec.json.encode(record),
            role="reader",
            at=1,
            by="admin",
            max_keys=2,
            audit_max=10,
        )
        return store.run(call)

    add("a")
    add("b")
    with pytest.raises(Conflict, match="too many keys"):
        add("c")


def test_the_keyring_finds_a_key_by_its_hash_until_it_is_revoked() -> None:
    keyring = Keyring()
    key, ci = _record("ci", Role.SUBMITTER)
    keyring.take(1, [ci])
    found = Principal("ci", Role.SUBMITTER, key_id(ci.hash))
    assert keyring.find(key.encode()) == found
    assert keyring.holds(found)
    assert not keyring.holds(Principal("ci", Role.ADMIN, key_id(ci.hash)))
    # The same name and role, another key (a rotated one): not the key held.
    assert not keyring.holds(Principal("ci", Role.SUBMITTER, key_id(_record("ci")[1].hash)))
    assert keyring.find(key.encode() + b"x") is None
    assert keyring.find(key.removeprefix(KEY_PREFIX).encode()) is None  # no prefix: not looked up
    keyring.take(1, None)  # unchanged
    assert keyring.find(key.encode()) is not None
    keyring.take(2, [])
    assert keyring.find(key.encode()) is None and not keyring.holds(found)
