"""A wrong bearer of a named key's form costs one read of the keys (api/guesses.py
door_again), on both fronts: the refusal that counts it does not read them again."""

from __future__ import annotations

import secrets

import pytest

from scheduler.api.keyring import Keyring
from tests.conftest import BOTH_FRONTS, ClientFactory

pytestmark = BOTH_FRONTS
KEY = secrets.token_urlsafe(32)


def test_a_wrong_named_form_bearer_reads_the_keys_once(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = make_client(api_key=KEY, keyring_refresh_secs=3600)
    reads: list[int] = []
    refresh = Keyring.refresh

    async def counted(self: Keyring, store: object) -> None:
        reads.append(1)
        await refresh(self, store)  # type: ignore[arg-type]

    monkeypatch.setattr(Keyring, "refresh", counted)
    guess = {"Authorization": "Bearer tka_" + secrets.token_urlsafe(32)}
    assert api.get("/jobs/job-1", headers=guess).status_code == 401  # the lane's route
    assert api.get("/jobs", params={"limit": 1}, headers=guess).status_code == 401  # ASGI's
    assert len(reads) == 2
