"""An SQS message past its namespace's pending quota (docs/GUIDE.md, Quotas): not made, not
acked (left for redelivery, counted unplaced) while the others of its batch are made; made
once the namespace has room."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.models.access_key import ADMIN
from scheduler.models.quota import Quota
from scheduler.store.scripts import quotas
from tests.conftest import ClientFactory, CtxFactory, submit
from tests.fakes import FakeSQS, eventually
from tests.workers.test_sweep_sqs import all_jobs, api_for
from workers import tasks


@pytest.fixture
def ctx_overrides() -> dict[str, Any]:
    return {"max_jobs_per_node": 100}


@pytest.fixture
def sqs() -> Iterator[FakeSQS]:
    with FakeSQS(visibility_secs=0.2) as fake:
        yield fake


def test_a_message_past_the_pending_quota_waits_for_room(
    make_ctx: CtxFactory, make_client: ClientFactory, sqs: FakeSQS
) -> None:
    ctx = make_ctx(sqs_url=sqs.url)
    api = api_for(make_client, ctx, "n1")
    ctx.store.run(quotas.set_quota("team-a", Quota(pending=1), time.time(), ADMIN))
    held = submit(api, command="holds the quota", namespace="team-a")
    sqs.send(json.dumps({"command": "over", "namespace": "team-a"}))
    sqs.send(json.dumps({"command": "other", "namespace": "team-b"}))

    counts = tasks.ingest_sqs(period=1)

    assert counts == {"sqs_received": 2, "sqs_created": 1, "sqs_unplaced": 1}
    assert sorted(j.command for j in all_jobs(api)) == ["holds the quota", "other"]
    assert api.delete(f"/jobs/{held['job_id']}").status_code == 200
    eventually(lambda: tasks.ingest_sqs(period=2).get("sqs_created") == 1 or sqs.remaining() == 0)
    assert "over" in [j.command for j in all_jobs(api)]
