"""The keys of tests that hand one to a process or a settings reader that checks it: `scheduler
serve`, `worker` and `up` refuse a TINYAWS_API_KEY or AGENT_JOIN_KEY under 128 bits
(config/secrets.py). Fixed strings, so a failed test's log shows the same key each run. Tests
that build their Settings themselves (make_settings, make_client) may keep short ones."""

from __future__ import annotations

API_KEY = "tests-operator-key-6f0c1e7a9b3d45e2a8c7b1d0e9f3a6c4"
JOIN_KEY = "tests-join-key-2b9e4d7c1a6f30e5b8d2c9a7f4e1b063"
