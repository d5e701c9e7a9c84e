"""`scheduler agent`'s settings of what the node offers: AGENT_LABELS read into labels (the
wire's rule, models/labels.py) and AGENT_MEMORY_MB, checked at start with an error naming
the setting."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from scheduler.cli.agent import build, default_node_id, offer
from scheduler.client import session
from scheduler.config import ConfigError, Settings


@pytest.mark.parametrize(
    "raw, labels",
    [
        ("", {}),
        ("zone=eu-1", {"zone": "eu-1"}),
        (" zone = eu-1 , gpu=a100,", {"zone": "eu-1", "gpu": "a100"}),
        ("example.com/tier=gold_2,os=linux", {"example.com/tier": "gold_2", "os": "linux"}),
        ("k=" + "v" * 255, {"k": "v" * 255}),
        ("zone=", {"zone": ""}),  # an empty value, as Kubernetes allows
        (",".join(f"k{i}=v" for i in range(16)), {f"k{i}": "v" for i in range(16)}),
    ],
)
def test_agent_labels_are_read(raw: str, labels: dict[str, str]) -> None:
    assert offer(Settings.from_env({"AGENT_LABELS": raw})).labels == labels


@pytest.mark.parametrize(
    "raw, problem",
    [
        ("zone", "'zone' is not key=value"),
        ("zone=eu-1,zone=eu-2", "label key 'zone' given twice"),
        ("=eu-1", "invalid labels key ''"),
        ("zo ne=eu", "invalid labels key 'zo ne'"),
        ("zone=eu 1", "invalid labels value 'eu 1' for zone"),
        ("zone=eu=1", "invalid labels value 'eu=1' for zone"),
        ("zône=eu", "invalid labels key 'zône'"),
        ("k" * 64 + "=v", "use 1 to 63 (key)"),
        ("k=" + "v" * 256, "0 to 255 (value)"),
        (",".join(f"k{i}=v" for i in range(17)), "invalid labels: at most 16"),
        ("node.id=other", "node.* is the scheduler's"),
        ("node.hostname=h", "node.* is the scheduler's"),
    ],
)
def test_bad_agent_labels_stop_the_start_naming_the_setting(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        offer(Settings.from_env({"AGENT_LABELS": raw}))
    assert str(err.value).startswith("AGENT_LABELS: ")
    assert problem in str(err.value)


def test_agent_memory_mb_is_what_the_node_offers_and_every_cpu_is() -> None:
    offered = offer(Settings.from_env({"AGENT_MEMORY_MB": "6000"}))
    assert (offered.memory_mb, offered.cpus) == (6000, os.cpu_count())
    assert offer(Settings.from_env({})).memory_mb > 0  # found on this machine
    with pytest.raises(ConfigError, match="AGENT_MEMORY_MB"):
        Settings.from_env({"AGENT_MEMORY_MB": "-1"})


def test_the_agents_configuration_carries_the_offer() -> None:
    args = argparse.Namespace(node_id="n1", scheduler_url="", registry_url="", max_jobs=0)
    env = {"AGENT_LABELS": "zone=eu-1", "AGENT_MEMORY_MB": "2048", "AGENT_LIMITS": "off"}
    config, _ = build(args, Settings.from_env(env))
    assert (config.offer.memory_mb, dict(config.offer.labels)) == (2048, {"zone": "eu-1"})


def test_the_agents_configuration_carries_its_live_output_settings() -> None:
    args = argparse.Namespace(node_id="n1", scheduler_url="", registry_url="", max_jobs=0)
    config, _ = build(args, Settings.from_env({"AGENT_LIMITS": "off"}))
    assert (config.live_output, config.output_flush_secs, config.output_chunk_bytes) == (
        True,
        1.0,
        65536,
    )
    env = {
        "AGENT_LIMITS": "off",
        "AGENT_LIVE_OUTPUT": "off",
        "AGENT_OUTPUT_FLUSH_SECS": "0.5",
        "AGENT_OUTPUT_CHUNK_BYTES": "4096",
    }
    config, _ = build(args, Settings.from_env(env))
    assert (config.live_output, config.output_flush_secs, config.output_chunk_bytes) == (
        False,
        0.5,
        4096,
    )


def test_an_agent_beside_up_takes_its_session_key_and_says_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scheduler agent --node-id gpu-1` beside `up` is one command: without
    TINYAWS_API_KEY and AGENT_JOIN_KEY it sends the key up keeps for SCHEDULER_URL, and a
    refusal names that file (or the key to set)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    url = "http://127.0.0.1:9001"
    args = argparse.Namespace(node_id="gpu-1", scheduler_url=url, registry_url="", max_jobs=0)
    env = {"AGENT_LIMITS": "off", "AGENT_WORK_DIR": str(tmp_path / "work")}
    config, _ = build(args, Settings.from_env(env))
    path = tmp_path / "tinyaws-scheduler" / "127.0.0.1-9001" / "api-key"
    assert config.api_key == "" and str(path) in config.refused_hint
    assert "set TINYAWS_API_KEY" in config.refused_hint
    key, _ = session.create(url)
    config, _ = build(args, Settings.from_env(env))
    assert config.api_key == key and str(path) in config.refused_hint
    config, _ = build(args, Settings.from_env({**env, "TINYAWS_API_KEY": "k" * 40}))
    assert config.api_key == "k" * 40 and "refused TINYAWS_API_KEY" in config.refused_hint
    config, _ = build(args, Settings.from_env({**env, "AGENT_JOIN_KEY": "j" * 40}))
    assert config.api_key == "" and "AGENT_JOIN_KEY" in config.refused_hint
    # Without a node id of its own it would be up's agent's (the machine's): refused, naming
    # --node-id; AGENT_NODE_ID names one too.
    unnamed = argparse.Namespace(node_id="", scheduler_url=url, registry_url="", max_jobs=0)
    with pytest.raises(ConfigError, match=r"runs its own agent as node .*: .* --node-id NAME"):
        build(unnamed, Settings.from_env(env))
    config, _ = build(unnamed, Settings.from_env({**env, "AGENT_NODE_ID": "gpu-2"}))
    assert (config.node_id, config.api_key) == ("gpu-2", key)
    session.remove(path)
    config, _ = build(unnamed, Settings.from_env(env))  # no `up` there: the machine's id
    assert config.node_id == default_node_id()
