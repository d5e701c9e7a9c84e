"""Named keys through both clients (scheduler.client's `add_key`, `keys`, `revoke_key`) against
the real API over a socket, with TINYAWS_API_KEY set: a key made is shown once and works by
its role, a listing never shows one, a revoked one stops working; a change of keys whose
answer was lost is not sent again."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from scheduler.client import (
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    KeyMade,
    KeyView,
    NotFound,
    Role,
    Unauthorized,
    Unreachable,
)
from tests.client.test_client import LosingAnswers, register
from tests.conftest import Serve
from tests.keys import API_KEY


@pytest.fixture
def url(serve: Serve) -> str:
    url = serve(api_key=API_KEY, node_ttl_secs=600)
    register(url, "n1")  # the agent calls are open (AGENT_AUTH=open)
    return url


def admin(url: str, transport: httpx.BaseTransport | None = None) -> Client:
    return Client(url, API_KEY, transport=transport, retries=2, retry_pause=0.01)


def names(keys: list[KeyView]) -> list[str]:
    return [key.name for key in keys]


def test_a_key_made_is_shown_once_works_by_its_role_and_stops_when_revoked(url: str) -> None:
    with admin(url) as client:
        made = client.add_key("ci", Role.SUBMITTER)
        assert isinstance(made, KeyMade) and made.key.startswith("tka_")
        assert (made.name, made.role, made.created_by) == ("ci", Role.SUBMITTER, "admin")
        reader = client.add_key("dashboard", role="reader")
        assert reader.role is Role.READER
        listed = client.named_keys()
        assert names(listed) == ["ci", "dashboard"]
        assert all(type(k) is KeyView for k in listed)  # never the key
        assert listed[0].created_at == made.created_at

        with Client(url, made.key, retries=0) as ci:
            job = ci.submit("echo hi")
            assert ci.job(job.job_id).command == "echo hi"
            with pytest.raises(Forbidden, match=r"this call needs .*admin or above"):
                ci.named_keys()
        client.revoke_key("ci")
        with Client(url, made.key, retries=0) as ci, pytest.raises(Unauthorized):
            ci.job(job.job_id)
        assert names(client.named_keys()) == ["dashboard"]
        with pytest.raises(NotFound):
            client.revoke_key("ci")


def test_a_taken_name_is_conflict_and_a_wrong_role_bad_request(url: str) -> None:
    with admin(url) as client:
        client.add_key("ops", "operator")
        with pytest.raises(Conflict):
            client.add_key("ops", Role.READER)
        with pytest.raises(BadRequest, match="role"):
            client.add_key("boss", "overlord")
        with pytest.raises(BadRequest, match="name"):
            client.add_key("Not A Name", Role.READER)
        assert names(client.named_keys()) == ["ops"]


def test_the_asyncio_client_adds_lists_and_revokes(url: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(url, API_KEY, retry_pause=0.01) as client:
            made = await client.add_key("nightly", Role.OPERATOR)
            assert made.role is Role.OPERATOR and made.key.startswith("tka_")
            assert names(await client.named_keys()) == ["nightly"]
            await client.revoke_key("nightly")
            assert await client.named_keys() == []
            with pytest.raises(NotFound):
                await client.revoke_key("nightly")
            said = [(e.action, e.name, e.by) for e in await client.audit(2)]
            assert said == [("key revoke", "nightly", "admin"), ("key add", "nightly", "admin")]

    asyncio.run(scenario())


def test_an_add_whose_answer_was_lost_is_not_sent_again(url: str) -> None:
    transport = LosingAnswers(1)
    with admin(url, transport=transport) as lossy:
        with pytest.raises(Unreachable, match="may have been done") as raised:
            lossy.add_key("ci", Role.SUBMITTER)
        assert raised.value.maybe_done
        assert transport.methods == ["POST"]
        assert names(lossy.named_keys()) == ["ci"]  # it was made


def test_a_revoke_whose_answer_was_lost_is_not_sent_again_and_a_listing_is(url: str) -> None:
    with admin(url) as client:
        client.add_key("ci", Role.READER)
    transport = LosingAnswers(1)
    with admin(url, transport=transport) as lossy:
        with pytest.raises(Unreachable, match="may have been done"):
            lossy.revoke_key("ci")
        assert transport.methods == ["DELETE"]
        transport.lose = 1
        assert lossy.named_keys() == []  # revoked; the listing's lost answer was read again
        assert transport.methods == ["DELETE", "GET", "GET"]
