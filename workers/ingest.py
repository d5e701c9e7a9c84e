"""SQS ingestion (CONTRACT 2.9, with 8.9, 8.10 and 8.12 fixed).

Each poll drains the visible messages of queue `jobs`. A message's body is a job request,
validated exactly as POST /jobs. The job is created with an idempotency key in the same Lua
script (CREATE_JOB), and acked only afterwards; a redelivered message (lost ack, worker killed
between create and ack) finds its key and is acked without a second job. A bad body is acked
and dropped, logged with the reason and counted; a message that cannot be placed is not
acked, so the queue redelivers it after its visibility timeout.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from scheduler.models.job import (
    Job,
    JobCreate,
    asks_fit,
    new_job,
    stamped,
    validate_create,
)
from scheduler.models.wire import ID_RE, DecodeError, InvalidInput, decode_go_style
from scheduler.nodes.placement import NoHealthyNodes
from scheduler.nodes.registry import NodeSource, RegistryError, node_source
from scheduler.store import ops
from scheduler.store.errors import StoreNotReady
from scheduler.store.scripts.jobs import Dedup
from workers.context import Context

log = logging.getLogger("workers.sqs")

QUEUE_PATH = "/queues/jobs/messages"
DRAIN_BUDGET_SECS = 30.0  # one poll stops taking messages after this; the next goes on


class SqsUnavailable(Exception):
    """The queue could not be read; the next poll tries again."""


class BadMessage(ValueError):
    """The body is not an acceptable job request; the message says why."""


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    body: Any


def parse_message(reply: bytes) -> Message | None:
    """A receive reply; None for an empty queue (`null`, `{}`, no id), as the original."""
    try:
        value = msgspec.json.decode(reply)
    except msgspec.DecodeError:
        raise SqsUnavailable("receive answered a body that is not JSON") from None
    if not isinstance(value, dict):
        return None
    message_id = value.get("id")
    if not isinstance(message_id, str) or not message_id:
        return None
    return Message(message_id, value.get("body"))


def parse_request(body: Any, max_bytes: int, now: float) -> Job:
    """The job a message body asks for (`new_job`), checked exactly as POST /jobs checks its
    body, as created at `now` (`stamped`: delayed when it asks for a delay)."""
    if not isinstance(body, str):
        raise BadMessage("body is not a JSON string")
    raw = body.encode()
    if len(raw) > max_bytes:
        raise BadMessage(f"body is larger than MAX_BODY_BYTES ({max_bytes})")
    ignored: list[str] = []
    try:
        request = decode_go_style(raw, JobCreate, ignored)
    except DecodeError as exc:
        raise BadMessage(f"failed to decode job: {exc}") from None
    except RecursionError:
        # Not acking would bring this body back forever; no job request nests this deep.
        raise BadMessage("failed to decode job: nested too deeply") from None
    if ignored:
        # The original ignored them too; POST /jobs refuses them, but a message dropped for
        # a producer's extra key would be a job lost.
        log.warning("sqs: unknown field(s) %s in a message ignored", ", ".join(ignored))
    try:
        job = new_job(request)
        validate_create(job)
        return stamped(job, request, now)
    except InvalidInput as exc:
        raise BadMessage(str(exc)) from None


def dedup_key(message: Message) -> str:
    """The idempotency key: the message id with a hash of the body, because SQS ids (msg-N)
    start again at msg-1 when the SQS database is wiped."""
    body = message.body if isinstance(message.body, str) else ""
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    if ID_RE.fullmatch(message.id):
        return f"{message.id}:{digest}"
    return hashlib.sha256(f"{message.id}\0{body}".encode()).hexdigest()[:32]


class Ingestion:
    """One poll: the SQS client, the node source and the counters of this drain."""

    def __init__(self, ctx: Context, http: httpx.AsyncClient, nodes: NodeSource) -> None:
        self.ctx = ctx
        self.http = http
        self.nodes = nodes
        self.counts: Counter[str] = Counter()

    async def receive(self) -> Message | None:
        try:
            response = await self.http.get(QUEUE_PATH)
        except httpx.HTTPError as exc:
            raise SqsUnavailable(f"receive failed: {exc!r}") from None
        if response.status_code != 200:
            raise SqsUnavailable(f"receive answered {response.status_code}")
        return parse_message(response.content)

    async def ack(self, message: Message) -> None:
        try:
            response = await self.http.delete(f"{QUEUE_PATH}/{quote(message.id, safe='')}")
        except httpx.HTTPError as exc:
            # The job is stored with its key: the redelivery will be acked, not re-created.
            log.warning("sqs: ack of %s failed (%r); it will be redelivered", message.id, exc)
            self.counts["sqs_ack_failed"] += 1
            return
        if response.is_error:
            log.warning("sqs: ack of %s answered %d", message.id, response.status_code)
            self.counts["sqs_ack_failed"] += 1

    async def handle(self, message: Message) -> bool:
        """Create the message's job and ack it. False: stop draining for this poll."""
        now = time.time()
        try:
            req = parse_request(message.body, self.ctx.settings.max_body_bytes, now)
        except BadMessage as exc:
            log.warning("sqs: bad message body in %s, dropped: %s", message.id, exc)
            self.counts["sqs_dropped"] += 1
            await self.ack(message)
            return True
        key = dedup_key(message)
        try:
            placement = await self.nodes.placement(req.instance_id, asks_fit(req))
            dedup = Dedup("sqs", key, self.ctx.settings.sqs_dedup_ttl_secs)
            created = self.ctx.store.run(ops.jobs.create(req, placement, now, dedup))
        except (RegistryError, NoHealthyNodes) as exc:
            if self.ctx.redis.exists(self.ctx.keys.sqs_message(key)):
                self.counts["sqs_duplicates"] += 1
                await self.ack(message)
                return True
            log.warning("sqs: message %s not placed (%s); left for redelivery", message.id, exc)
            self.counts["sqs_unplaced"] += 1
            # Without an instance, a failed placement means no node for anyone (or no
            # registry): the other messages stay visible for the next poll.
            return bool(req.instance_id)
        except InvalidInput as exc:  # what only the store can tell (an `after` job not found)
            log.warning("sqs: message %s refused, dropped: %s", message.id, exc)
            self.counts["sqs_dropped"] += 1
            await self.ack(message)
            return True
        except StoreNotReady:
            # Redis came back empty; the snapshot task restores it within one interval.
            log.warning("sqs: store not restored yet; %s left for redelivery", message.id)
            self.counts["sqs_unplaced"] += 1
            return False
        job = msgspec.json.decode(created.job) if created.job else {}
        if created.duplicate:
            log.info("sqs: %s was already ingested as %s", message.id, job.get("job_id"))
            self.counts["sqs_duplicates"] += 1
        else:
            log.info("sqs: %s created %s", message.id, job.get("job_id"))
            self.counts["sqs_created"] += 1
        await self.ack(message)
        return True

    async def drain(self, limit: int, budget: float) -> None:
        deadline = time.monotonic() + budget
        for _ in range(limit):
            message = await self.receive()
            if message is None:
                return
            self.counts["sqs_received"] += 1
            if not await self.handle(message) or time.monotonic() > deadline:
                return


async def ingest(ctx: Context) -> Counter[str]:
    """Drain the SQS queue once; SQS being down is logged, never raised."""
    settings = ctx.settings
    nodes = node_source(settings)
    http = httpx.AsyncClient(
        base_url=settings.sqs_url.rstrip("/"), timeout=settings.http_timeout_secs
    )
    ingestion = Ingestion(ctx, http, nodes)
    try:
        await ingestion.drain(settings.sqs_max_per_poll, DRAIN_BUDGET_SECS)
    except SqsUnavailable as exc:
        log.warning("sqs: %s; trying again at the next poll", exc)
        ingestion.counts["sqs_errors"] += 1
    finally:
        await http.aclose()
        await nodes.aclose()
        ctx.count(ingestion.counts)
    return ingestion.counts
