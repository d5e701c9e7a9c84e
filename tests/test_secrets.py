"""The door's secrets must be too strong to guess (config/secrets.py, docs/SECURITY.md): the
estimate's table, and the processes that hold a key refusing a weak one at start while the
command-line client still sends whatever key it has."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from scheduler.config import ConfigError, Settings
from scheduler.config.secrets import MAKE_ONE, STRONG_BITS, check_secrets, strength_bits
from tests.keys import API_KEY, JOIN_KEY
from tests.redis_server import free_port


@pytest.mark.parametrize(
    ("secret", "bits"),
    [
        ("", 0.0),
        ("k", math.log2(26)),
        ("ui-operator-key", 15 * math.log2(26 + 33)),
        ("s3cret-key", 10 * math.log2(26 + 10 + 33)),
        # A repeated unit is worth the unit (test_the_estimate_is_not_fooled_by_a_repeat...).
        ("Z" * 20, math.log2(26)),
        ("0123456789" * 3, 10 * math.log2(10)),
        ("31415926535897932384626433832795", 32 * math.log2(10)),  # digits alone: not hex
        # secrets.token_hex(16): 128 random bits, 4 a hex character.
        ("9f86d081884c7d659a2feaa0c55ad015", 128.0),
        # secrets.token_urlsafe(32), 256 random bits: - and _ make it punctuation too.
        ("Xq3_Zb9-" * 5 + "abc", 43 * math.log2(26 + 26 + 10 + 33)),
        ("Zürich-Zürich", 13 * math.log2(26 + 26 + 33 + 128)),
    ],
)
def test_the_estimate_is_length_times_the_log_of_the_classes_alphabet(
    secret: str, bits: float
) -> None:
    assert strength_bits(secret) == pytest.approx(bits)


@pytest.mark.parametrize(
    ("secret", "strong"),
    [
        ("9f86d081884c7d659a2feaa0c55ad015", True),  # token_hex(16)
        ("9f86d081884c7d65", False),  # token_hex(8): 64 bits
        ("correct-horse-battery", False),
        (API_KEY, True),
        (JOIN_KEY, True),
    ],
)
def test_the_bar_is_128_bits(secret: str, strong: bool) -> None:
    assert (strength_bits(secret) >= STRONG_BITS) is strong


@pytest.mark.parametrize("name", ["TINYAWS_API_KEY", "AGENT_JOIN_KEY"])
def test_a_weak_secret_is_named_with_its_estimate_the_bar_and_a_way_to_make_one(
    name: str,
) -> None:
    settings = Settings.from_env({name: "operator-key"})
    with pytest.raises(ConfigError) as raised:
        check_secrets(settings)
    said = str(raised.value)
    assert said.startswith(f"{name}: about 71 bits (12 characters), below the 128 ")
    assert said.endswith(f"Make one with: {MAKE_ONE}")
    check_secrets(Settings.from_env({"TINYAWS_API_KEY": API_KEY, "AGENT_JOIN_KEY": JOIN_KEY}))
    check_secrets(Settings.from_env({}))  # no key at all: serve's own rules (loopback only)


def scheduler(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "TINYAWS_"))}
    environ.pop("AGENT_JOIN_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *argv],
        env={**environ, "REDIS_URL": "redis://127.0.0.1:1/0", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "argv",
    [("serve", "--port", "0"), ("worker", "--burst"), ("up", "--port", "0")],
    ids=["serve", "worker", "up"],
)
@pytest.mark.parametrize("name", ["TINYAWS_API_KEY", "AGENT_JOIN_KEY"])
def test_a_process_holding_the_key_will_not_start_with_a_weak_one(
    argv: tuple[str, ...], name: str
) -> None:
    done = scheduler(*argv, **{name: "ui-key"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"scheduler: configuration error: {name}: about ")
    assert MAKE_ONE in done.stderr


def test_the_client_sends_a_weak_key_all_the_same() -> None:
    """Not the client's to judge: it holds what the operator gave it (and a refused key is
    the server's 401, with its hint)."""
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the client's own error
    done = scheduler("list", TINYAWS_API_KEY="ui-key", SCHEDULER_URL=url)
    assert done.returncode == 1 and "configuration error" not in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["TINYAWS_API_KEY", "AGENT_JOIN_KEY"])
def test_the_app_factory_for_other_servers_refuses_a_weak_one_too(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """`scheduler.api.app:create_app` is the factory README offers any other ASGI server (and
    `serve --workers N`'s processes start from the environment alike): it served with any
    key."""
    from scheduler.api.app import create_app

    for variable in ("TINYAWS_API_KEY", "AGENT_JOIN_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(name, "ui-key")
    with pytest.raises(ConfigError, match=f"^{name}: about "):
        create_app()
    monkeypatch.setenv(name, API_KEY)
    create_app()  # made, not started: nothing connects


@pytest.mark.parametrize(
    ("secret", "strong"),
    [
        # A repeated character or unit is worth its unit: the estimate of a random key would
        # take 43 x log2(26) = 202 bits for "a" * 43.
        ("a" * 43, False),
        ("password" * 6, False),
        ("Xq3_Zb9-" * 8, False),
        ("passwordpasswordpasswordpasswordpasswordpass", False),
        # Hex is 4 bits a character, not log2(26 + 10): 26 hex characters are 104 bits, not
        # 134 (openssl rand -hex 13 passed).
        ("9f86d081884c7d659a2feaa0c5", False),
        ("9F86D081884C7D659A2FEAA0C55AD015", True),  # 32 hex characters: 128 bits
        # A UUID (uuidgen) counts as its 32 hex digits: 128 bits, 122 of them random, which
        # is as hopeless to guess (docs/SECURITY.md).
        ("1b4e28ba-2fa1-41d2-883f-0016d3cca427", True),
    ],
)
def test_the_estimate_is_not_fooled_by_a_repeat_or_by_hex(secret: str, strong: bool) -> None:
    assert (strength_bits(secret) >= STRONG_BITS) is strong


@pytest.mark.parametrize("name", ["TINYAWS_API_KEY", "AGENT_JOIN_KEY"])
@pytest.mark.parametrize("secret", ["Zürich-" + API_KEY, API_KEY + "\t" + API_KEY])
def test_a_key_only_printable_ascii_can_carry_is_refused(name: str, secret: str) -> None:
    """A non-ASCII key passed the estimate (its characters counted as 128 more each), but
    httpx, which the command-line client, the agent and `up` call with, cannot send it
    (UnicodeEncodeError), and where a client sends its UTF-8 the agent routes read the header
    as latin-1: the right key refused there, and counted."""
    with pytest.raises(ConfigError, match=f"^{name}: .*printable ASCII"):
        check_secrets(Settings.from_env({name: secret}))
