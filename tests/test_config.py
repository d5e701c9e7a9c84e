"""Settings.from_env: the original's variable names and defaults (CONTRACT 2.1), empty means
default, and a value that cannot be used stops the start with the variable's name."""

from __future__ import annotations

from dataclasses import fields

import pytest
from redis_sentinel_url import parse_sentinel_url  # type: ignore[import-untyped]

from scheduler.config import ConfigError, Settings, parse_redis_url
from scheduler.config.redis_url import ClusterRedis, DirectRedis, SentinelRedis

ENV_NAMES = {f.name: f.metadata["env"] for f in fields(Settings)}


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.max_jobs_per_node == 1
    assert settings.max_job_retries == 1
    assert settings.job_timeout_secs == 3600
    assert settings.registry_url == ""
    assert settings.builtin_registry
    assert settings.api_key == ""
    assert settings.scheduler_db == "scheduler.db"


def test_every_field_names_its_variable() -> None:
    names = list(ENV_NAMES.values())
    assert len(set(names)) == len(names)
    for original in ("REGISTRY_URL", "SCHEDULER_DB", "SQS_URL", "SNS_URL", "TINYAWS_API_KEY"):
        assert original in names
    for original in ("JOB_TIMEOUT_SECS", "MAX_JOBS_PER_NODE"):
        assert original in names


def test_empty_values_mean_the_default() -> None:
    assert Settings.from_env({name: "" for name in ENV_NAMES.values()}) == Settings()


@pytest.mark.parametrize(
    "env, attribute, value",
    [
        ({"MAX_JOBS_PER_NODE": "4"}, "max_jobs_per_node", 4),
        ({"MAX_JOBS_PER_NODE": " 4 "}, "max_jobs_per_node", 4),
        ({"MAX_JOB_RETRIES": "0"}, "max_job_retries", 0),
        ({"JOB_TIMEOUT_SECS": "120"}, "job_timeout_secs", 120),
        ({"NODE_TTL_SECS": "1.5"}, "node_ttl_secs", 1.5),
        ({"REGISTRY_CACHE_SECS": "0"}, "registry_cache_secs", 0.0),
        ({"REGISTRY_URL": "http://reg:9000"}, "registry_url", "http://reg:9000"),
        ({"TINYAWS_API_KEY": "k"}, "api_key", "k"),
        ({"REDIS_PREFIX": "prod-1"}, "redis_prefix", "prod-1"),
        ({"REDIS_PREFIX": "eu.prod:2_b-c"}, "redis_prefix", "eu.prod:2_b-c"),
        ({"OUTPUT_LIMIT_BYTES": "1024"}, "output_limit_bytes", 1024),
        ({"JOB_RETENTION_SECS": "86400"}, "job_retention_secs", 86400.0),
        ({"AGENT_AUTH": "token"}, "agent_auth", "token"),
        ({"MAX_NODES": "3"}, "max_nodes", 3),
        ({"REPORT_BYTES_IN_FLIGHT": "134217728"}, "report_bytes_in_flight", 128 * 1024 * 1024),
        ({"AGENT_LIVE_OUTPUT": "off"}, "agent_live_output", "off"),
        ({"AGENT_OUTPUT_FLUSH_SECS": "0.25"}, "agent_output_flush_secs", 0.25),
        ({"AGENT_OUTPUT_CHUNK_BYTES": "65536"}, "agent_output_chunk_bytes", 65536),
        ({"AGENT_POLL_WAIT_SECS": "60"}, "agent_poll_wait_secs", 60.0),
    ],
)
def test_values_are_parsed(env: dict[str, str], attribute: str, value: object) -> None:
    assert getattr(Settings.from_env(env), attribute) == value


def test_registry_url_turns_off_the_builtin_registry() -> None:
    assert not Settings.from_env({"REGISTRY_URL": "http://reg:9000"}).builtin_registry


@pytest.mark.parametrize(
    "name, raw",
    [
        ("MAX_JOBS_PER_NODE", "abc"),
        ("MAX_JOBS_PER_NODE", "1.5"),
        ("MAX_JOBS_PER_NODE", "120abc"),  # the original read the leading integer
        ("MAX_JOBS_PER_NODE", "0"),
        ("MAX_JOBS_PER_NODE", "-1"),
        ("MAX_JOB_RETRIES", "-1"),
        ("JOB_TIMEOUT_SECS", "0"),
        ("JOB_TIMEOUT_SECS", "1h"),
        ("NODE_TTL_SECS", "0.5"),
        ("NODE_TTL_SECS", "nan"),
        ("REGISTRY_CACHE_SECS", "-1"),
        ("REGISTRY_CACHE_SECS", "nan"),
        ("REGISTRY_TIMEOUT_SECS", "0"),
        ("REGISTRY_TIMEOUT_SECS", "nan"),
        ("OUTPUT_LIMIT_BYTES", "100"),
        ("MAX_BODY_BYTES", "1k"),
        ("MAX_REPORT_BYTES", "2048"),  # below MAX_BODY_BYTES' default of 1 MiB
        ("SWEEP_INTERVAL_SECS", "nan"),
        ("REDIS_PREFIX", "a b"),
        ("REDIS_PREFIX", "{a}"),
        ("REDIS_PREFIX", "a}"),
        ("REDIS_PREFIX", "a*"),
        ("REDIS_PREFIX", "a[b]"),
        ("REDIS_PREFIX", "tâche"),
        ("JOB_RETENTION_SECS", "-1"),
        ("AGENT_AUTH", "tokens"),
        ("AGENT_AUTH", "none"),
        ("MAX_NODES", "0"),
        ("REPORT_BYTES_IN_FLIGHT", "1048576"),  # below MAX_REPORT_BYTES' default of 64 MiB
        ("AGENT_LIVE_OUTPUT", "no"),
        ("AGENT_OUTPUT_FLUSH_SECS", "-1"),
        ("AGENT_OUTPUT_CHUNK_BYTES", "65537"),  # the scheduler takes at most 64 KiB a chunk
        ("AGENT_OUTPUT_CHUNK_BYTES", "100"),
        ("AGENT_POLL_WAIT_SECS", "61"),
    ],
)
def test_invalid_values_name_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({name: raw})
    assert name in str(err.value)


def test_retention_needs_a_snapshot_file() -> None:
    # Pruning deletes only what the snapshot holds; a :memory: snapshot holds nothing.
    with pytest.raises(ConfigError, match="JOB_RETENTION_SECS"):
        Settings.from_env({"JOB_RETENTION_SECS": "3600", "SCHEDULER_DB": ":memory:"})
    assert Settings.from_env({"SCHEDULER_DB": ":memory:"}).job_retention_secs == 0


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_JOBS_PER_NODE", "3")
    monkeypatch.setenv("REGISTRY_URL", "")
    assert Settings.from_env().max_jobs_per_node == 3
    assert Settings.from_env().builtin_registry


def test_overrides_are_validated_too() -> None:
    assert Settings.from_env({}, max_jobs_per_node=2).max_jobs_per_node == 2
    with pytest.raises(ConfigError, match="MAX_JOBS_PER_NODE"):
        Settings.from_env({}, max_jobs_per_node=0)


def test_token_mode_needs_the_builtin_registry() -> None:
    # The built-in registry issues the node tokens; an external one knows nothing of them.
    with pytest.raises(ConfigError, match="AGENT_AUTH"):
        Settings.from_env({"AGENT_AUTH": "token", "REGISTRY_URL": "http://reg:9000"})
    assert Settings.from_env({"AGENT_AUTH": "open", "REGISTRY_URL": "http://r:1"}).registry_url


# REDIS_URL: the forms README lists, parsed into where Redis is.

S = SentinelRedis


@pytest.mark.parametrize(
    "url, target",
    [
        ("redis://127.0.0.1:6379/0", DirectRedis("redis://127.0.0.1:6379/0")),
        ("rediss://:pw@cache:6380/2", DirectRedis("rediss://:pw@cache:6380/2")),
        ("unix:///run/redis.sock?db=1", DirectRedis("unix:///run/redis.sock?db=1")),
        ("redis+sentinel://s1:26379/main", S((("s1", 26379),), "main")),
        ("redis+sentinel://s1/main/3", S((("s1", 26379),), "main", 3)),
        (
            "redis+sentinel://s1:5000,s2:5001,s3/main/0",
            S((("s1", 5000), ("s2", 5001), ("s3", 26379)), "main"),
        ),
        ("redis+sentinel://:p%40ss@s1/main", S((("s1", 26379),), "main", password="p@ss")),
        (
            "redis+sentinel://app:pw@s1/main/1?sentinel_password=sp",
            S((("s1", 26379),), "main", 1, "app", "pw", "sp"),
        ),
        ("redis+sentinel://[::1]:5000/main", S((("::1", 5000),), "main")),
        ("redis+cluster://n1:7000,n2:7001", ClusterRedis((("n1", 7000), ("n2", 7001)))),
        ("redis+cluster://:pw@n1/0", ClusterRedis((("n1", 6379),), password="pw")),
        ("redis+cluster://u:pw@n1:7000/", ClusterRedis((("n1", 7000),), "u", "pw")),
    ],
)
def test_redis_url_forms(url: str, target: object) -> None:
    assert parse_redis_url(url) == target
    assert Settings.from_env({"REDIS_URL": url}).redis_target == target


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379",
        "127.0.0.1:6379",
        "redis://127.0.0.1:port/0",
        "redis://127.0.0.1:6379/zero",
        "unix://",
        "redis+sentinel://s1:26379",  # no service
        "redis+sentinel://s1:26379/",
        "redis+sentinel://s1:26379/main/db",
        "redis+sentinel://s1:26379/main/0/extra",
        "redis+sentinel://s1:99999/main",
        "redis+sentinel://s1:x/main",
        "redis+sentinel://s1,/main",
        "redis+sentinel://s1/main?socket_timeout=1",
        "redis+cluster://n1:7000/1",  # a cluster has database 0 only
        "redis+cluster://n1:7000?x=1",
        "redis+cluster://",
        "rediss://cache:6380/0?ssl_ca_certs=/no/such/ca.pem",
        "rediss://cache:6380/0?ssl_certfile=/no/such/client.pem",
        "rediss://cache:6380/0?ssl_cert_reqs=sometimes",
        "rediss://cache:6380/0?ssl_cert_reqs=NONE",  # redis-py takes only lowercase
        "rediss://cache:6380/0?ssl_cert_reqs=required&ssl_cert_reqs=none",  # read apart
        "rediss://cache:6380/0?ssl_check_hostname=maybe",
        "rediss://cache:6380/0?ssl_ca=/etc/ssl/certs/ca-certificates.crt",  # misspelt
        "rediss://cache:6380/0?ssl_ciphers=HIGH",  # not read by the API's connection
        "rediss://cache:6380/0?ssl_keyfile=/etc/hostname",  # a key without its certificate
        "rediss://cache:6380/0?ssl_ca_path=/no/such/dir",
        "redis://cache:6379/1?db=2",  # redis-py would take ?db=, the API the path
        "redis://cache:6379?db=2",
        "unix:///run/redis.sock?db=1&db=2",
    ],
)
def test_bad_redis_urls_stop_the_start_naming_redis_url(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^REDIS_URL: "):
        Settings.from_env({"REDIS_URL": url})


def test_a_bad_redis_url_message_hides_the_password() -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"REDIS_URL": "redis+sentinel://u:hunter2@s1/main/x"})
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://s1:5000,s2:5001/main/3",
        "redis+sentinel://:pw@s1/main",
        "redis+sentinel://s1/main",
    ],
)
def test_the_dashboard_reads_a_sentinel_url_as_we_do(url: str) -> None:
    # The Procfile passes REDIS_URL to rq-dashboard, which reads it with redis-sentinel-url.
    ours = parse_redis_url(url)
    assert isinstance(ours, SentinelRedis)
    theirs = parse_sentinel_url(url)
    assert tuple(theirs.hosts) == ours.sentinels
    assert theirs.default_client.service == ours.service
    assert theirs.client_options["db"] == ours.db
    assert theirs.client_options.get("password") == ours.password
