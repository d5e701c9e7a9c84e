"""`scheduler key add|list|revoke` against a running API process with TINYAWS_API_KEY set: the
key shown once (alone on stdout), a listing that never shows one, a revoked key refused, and
the API's refusals (403, 404, 409) said as it says them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from scheduler.cli import client as cli_client
from scheduler.client import Client
from scheduler.config import Settings
from tests.cli.conftest import Cli
from tests.cli.test_client import KEY, LIVE_NODES, no_pauses, register
from tests.client.test_client import LosingAnswers
from tests.processes import api_replicas, scheduler_env, unique_prefix


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    env = scheduler_env(redis_url, unique_prefix("cli-keys"), TINYAWS_API_KEY=KEY, **LIVE_NODES)
    with api_replicas(1, env) as urls:
        register(urls[0], "node-1")  # for the jobs submitted
        yield urls[0]


@pytest.fixture(autouse=True)
def admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYAWS_API_KEY", KEY)


def test_a_key_is_shown_once_listed_without_it_and_refused_once_revoked(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(api, "key", "add", "ci", "--role", "submitter")
    assert code == 0
    key = out.removesuffix("\n")
    assert key.startswith("tka_") and out.count("\n") == 1  # the key alone
    assert err.startswith("made key ci (submitter): it is shown this once and never again")
    assert "TINYAWS_API_KEY=<key>" in err and "Authorization: Bearer <key>" in err
    assert key not in err

    code, out, _ = cli(api, "key", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "NAME",
        "ROLE",
        "NAMESPACES",
        "CREATED",
        "CREATED",
        "BY",
    ]
    name, role, namespaces, made_at, by = lines[1].split()
    assert (name, role, namespaces, by) == ("ci", "submitter", "*", "admin")
    assert made_at.startswith("20") and made_at.endswith("Z")
    assert key not in out
    listed = json.loads(cli(api, "key", "list", "--json")[1])
    assert [(k["name"], k["role"]) for k in listed] == [("ci", "submitter")]
    assert "key" not in listed[0]

    monkeypatch.setenv("TINYAWS_API_KEY", key)
    assert cli(api, "list")[0] == 0  # the key works, by its role
    code, out, err = cli(api, "key", "list")
    assert (code, out) == (1, "")
    # The API's words: who the key is, and the role the call needs.
    assert err.startswith("error: forbidden: the key 'ci' ")
    assert err.endswith(" admin or above (403)\n") and err.count("\n") == 1

    monkeypatch.setenv("TINYAWS_API_KEY", KEY)
    code, out, err = cli(api, "key", "revoke", "ci")
    assert (code, err) == (0, "")
    assert out.startswith("revoked key ci: it stops working")
    monkeypatch.setenv("TINYAWS_API_KEY", key)
    code, _, err = cli(api, "list")
    assert code == 1 and err.startswith("error: unauthorized (401)\nhint: ")

    monkeypatch.setenv("TINYAWS_API_KEY", KEY)
    code, _, err = cli(api, "key", "revoke", "ci")
    assert (code, err) == (1, "error: key not found (404)\n")

    code, out, _ = cli(api, "key", "audit", "--limit", "2")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and rows[0] == ["AT", "BY", "ACTION", "NAME", "ROLE"]
    assert [row[1:] for row in rows[1:]] == [
        ["admin", "key", "revoke", "ci", "submitter"],
        ["admin", "key", "add", "ci", "submitter"],
    ]


def test_a_taken_name_is_refused_as_the_api_says(api: str, cli: Cli) -> None:
    assert cli(api, "key", "add", "taken", "--role", "reader")[0] == 0
    code, out, err = cli(api, "key", "add", "taken", "--role", "admin")
    assert (code, out) == (1, "")
    assert err == (
        "error: a key with that name exists: revoke it first, or choose another name (409)\n"
    )


def test_add_json_is_the_made_key_and_a_wrong_role_is_a_usage_error(api: str, cli: Cli) -> None:
    code, out, _ = cli(api, "key", "add", "dash", "--role", "reader", "--json")
    made = json.loads(out)
    assert code == 0 and (made["name"], made["role"]) == ("dash", "reader")
    assert made["key"].startswith("tka_")
    with pytest.raises(SystemExit) as usage:
        cli(api, "key", "add", "boss", "--role", "overlord")
    assert usage.value.code == 2


def test_an_add_whose_answer_was_lost_says_to_look_and_is_not_sent_again(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_pauses(monkeypatch)
    transport = LosingAnswers(1)

    def lossy(url: str, settings: Settings) -> Client:
        return Client(url or settings.scheduler_url, settings.api_key, transport=transport)

    with monkeypatch.context() as patched:
        patched.setattr(cli_client, "connect", lossy)
        code, out, err = cli(api, "key", "add", "lost", "--role", "operator")
    assert (code, out) == (1, "")
    assert "(it may have been done: look first)" in err
    assert err.endswith(
        "hint: `scheduler key list` shows whether lost was made; if it was, its key was lost "
        "with the answer: revoke it and add it again\n"
    )
    assert transport.methods == ["POST"]
    assert "lost " in cli(api, "key", "list")[1]  # it was made


def test_a_key_limited_to_namespaces_submits_into_its_first(
    api: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(
        api, "key", "add", "team-a-ci", "--role", "submitter", "--namespace", "team-a",
        "--namespace", "team-c",
    )  # fmt: skip
    assert code == 0
    assert err.startswith("made key team-a-ci (submitter, namespaces team-a, team-c): ")
    listed = cli(api, "key", "list")[1].splitlines()
    row = next(line.split() for line in listed if line.startswith("team-a-ci "))
    assert row[:3] == ["team-a-ci", "submitter", "team-a,team-c"]

    monkeypatch.setenv("TINYAWS_API_KEY", out.strip())
    code, out, err = cli(api, "submit", "echo x", "--json")
    assert code == 0 and json.loads(out)["namespace"] == "team-a", err
    code, out, _ = cli(api, "submit", "echo x", "--namespace", "team-c", "--json")
    assert code == 0 and json.loads(out)["namespace"] == "team-c"
    code, out, err = cli(api, "submit", "echo x", "--namespace", "team-b")
    assert code == 1
    assert "error: forbidden: the key 'team-a-ci' may use the namespaces team-a, team-c; " in err


def test_events_of_a_job_a_limited_key_may_not_see_is_its_404(api: str, cli: Cli) -> None:
    """As if it did not exist (GET /jobs/{id}'s answer to that key), not an empty replay."""
    code, out, _ = cli(api, "submit", "echo x", "--json")
    assert code == 0
    job_id = json.loads(out)["job_id"]  # in the default namespace
    code, key, _ = cli(api, "key", "add", "team-z-ci", "--role", "reader", "--namespace", "team-z")
    assert code == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINYAWS_API_KEY", key.strip())
        assert cli(api, "events", "--job", job_id, "--since-start", "--no-follow") == (
            1,
            "",
            "error: job not found (404)\n",
        )
