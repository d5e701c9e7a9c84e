"""`scheduler schedule add|list|show|pause|resume|delete` against a running API process, with
the key set: output lines, --json, errors as the API says them."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import httpx
import pytest

from scheduler.client import Client
from tests.cli.conftest import Cli
from tests.cli.test_client import KEY
from tests.processes import api_replicas, scheduler_env


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    env = scheduler_env(redis_url, f"cli-sched-{uuid.uuid4().hex[:8]}", TINYAWS_API_KEY=KEY)
    with api_replicas(1, env) as urls:
        yield urls[0]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYAWS_API_KEY", KEY)


def test_add_list_show_pause_resume_delete(api: str, cli: Cli) -> None:
    code, out, err = cli(
        api, "schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris",
        "--catchup", "once", "--env", "TOKEN=t0p", "pg_dump db",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out.startswith('added schedule nightly: cron "0 3 * * *" Europe/Paris, next run 20')
    assert cli(api, "schedule", "add", "ticker", "--every", "30", "echo tick")[0] == 0

    code, out, _ = cli(api, "schedule", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "WHEN", "STATE", "NEXT", "RUN", "LAST",
                                               "JOB", "COMMAND"]  # fmt: skip
    assert lines[1].startswith("nightly ") and lines[1].endswith("  pg_dump db")
    # Its next run as its cron reads it, in Paris (03:00 CET or CEST), to the second.
    assert re.search(r" 20\d\d-\d\d-\d\d 03:00:00 CES?T ", lines[1]), lines[1]
    assert re.search(r" 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC ", lines[2]), lines[2]
    assert lines[2].startswith("ticker ") and "every 30s" in lines[2] and " active " in lines[2]

    shown = json.loads(cli(api, "schedule", "show", "nightly")[1])
    assert shown["job"] == {"command": "pg_dump db", "env_vars": {"TOKEN": "t0p"}}
    assert shown["catchup"] == "once"

    code, out, _ = cli(api, "schedule", "pause", "ticker")
    assert (code, out) == (0, "paused schedule ticker, no next run while paused\n")
    assert " paused " in cli(api, "schedule", "list")[1].splitlines()[2]
    # Twice: said as it was (it said `paused schedule ticker, next run -` again). Made
    # paused: no `next run -` either.
    said = "added schedule held: every 60s, no next run while paused\n"
    assert cli(api, "schedule", "add", "held", "--every", "60", "--paused", "x") == (0, said, "")
    assert cli(api, "schedule", "delete", "held")[0] == 0
    code, out, _ = cli(api, "schedule", "pause", "ticker")
    assert (code, out) == (0, "schedule ticker was already paused, no next run while paused\n")
    code, out, _ = cli(api, "schedule", "resume", "ticker")
    assert code == 0 and out.startswith("resumed schedule ticker, next run 20")
    code, out, _ = cli(api, "schedule", "resume", "ticker")
    assert code == 0 and out.startswith("schedule ticker was not paused, next run 20")

    listed = json.loads(cli(api, "schedule", "list", "--json")[1])
    assert [s["name"] for s in listed] == ["nightly", "ticker"]

    assert cli(api, "schedule", "delete", "ticker") == (0, "deleted schedule ticker\n", "")
    code, _, err = cli(api, "schedule", "delete", "ticker")
    assert (code, err) == (1, "error: schedule not found (404)\n")


def test_errors_say_what_the_api_said(api: str, cli: Cli) -> None:
    code, out, err = cli(api, "schedule", "add", "bad", "--cron", "61 * * * *", "x")
    assert (code, out) == (1, "")
    assert err == "error: invalid cron '61 * * * *': minute 61 is out of range 0-59 (400)\n"
    code, _, err = cli(api, "schedule", "add", "dup", "--every", "5", "x")
    assert code == 0
    code, _, err = cli(api, "schedule", "add", "dup", "--every", "5", "x")
    assert (code, err) == (1, "error: schedule already exists (409)\n")
    # An option's value refused before any request: a usage error, as argparse's own.
    code, out, err = cli(api, "schedule", "add", "env", "--every", "5", "--env", "NOEQ", "x")
    assert (code, out, err) == (2, "", "error: --env 'NOEQ': use NAME=VALUE\n")
    assert cli(api, "schedule", "show", "env")[0] == 1  # not made


def test_add_takes_submits_job_options(
    api: str, cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ["--priority", "5", "--max-retries", "2", "--retry-backoff", "10", "--cpus", "1"]
    job += ["--memory-mb", "64", "--select", "zone=a,b", "--delay", "30", "--service"]
    code, _, err = cli(api, "schedule", "add", "opts", "--every", "60", *job, "serve")
    assert (code, err) == (0, "")
    shown = json.loads(cli(api, "schedule", "show", "opts")[1])
    assert shown["job"] == {
        "command": "serve",
        "job_type": "service",
        "priority": 5,
        "max_retries": 2,
        "retry_backoff_secs": 10,
        "cpus": 1,
        "memory_mb": 64,
        "node_selector": {"zone": ["a", "b"]},
        "delay_secs": 30.0,
    }
    # What a template cannot hold (models NOT_IN_TEMPLATE) is not offered; the API says why.
    for flag, value in (("--after", "job-1"), ("--run-at", "2030-01-01T00:00:00Z")):
        with pytest.raises(SystemExit) as usage:
            cli(api, "schedule", "add", "deps", "--every", "60", flag, value, "x")
        assert usage.value.code == 2
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err
    assert cli(api, "schedule", "delete", "opts")[0] == 0


def test_without_the_key_the_hint_names_it(
    api: str,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TINYAWS_API_KEY")
    code, _, err = cli(api, "schedule", "list")
    assert code == 1 and "error: unauthorized" in err and "TINYAWS_API_KEY" in err


def test_the_list_pages_through_every_schedule(api: str, cli: Cli) -> None:
    """`schedule list` is the client's `schedules()`, read a page at a time: pages of two
    here, as of the API's 1000 for a long list."""
    names = ["p1", "p2", "p3", "p4", "p5"]
    for name in names:
        assert cli(api, "schedule", "add", name, "--every", "60", "--paused", "x")[0] == 0
    listed = json.loads(cli(api, "schedule", "list", "--json")[1])
    assert [s["name"] for s in listed if s["name"].startswith("p")] == names
    pages: list[str] = []
    wire = httpx.HTTPTransport()

    class Recorded(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            pages.append(request.url.params.get("after", ""))
            return wire.handle_request(request)

        def close(self) -> None:
            wire.close()

    with Client(api, KEY, transport=Recorded()) as client:
        paged = [s.name for s in client.schedules(page_size=2)]
    assert paged == [s["name"] for s in listed]
    assert pages == ["", *paged[1 : len(paged) : 2]]  # after the last of each page
