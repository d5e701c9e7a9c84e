"""SQS ingestion (CONTRACT 2.9, with 8.9, 8.10 and 8.12 fixed).

Each poll drains the visible messages of queue `jobs`, BATCH at a time. A message's body is
a job request, validated exactly as POST /jobs. The batch's jobs are made together, as a bulk
submit makes its jobs (ops.jobs.create_many: one round trip), each with its message's
idempotency key in its own create script (CREATE_JOB), and each message acked only
afterwards; a redelivered message (lost ack, worker killed
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

from scheduler.models.job import Job, JobCreate, asks_fit, new_job, stamped, validate_create
from scheduler.models.wire import ID_RE, DecodeError, InvalidInput, decode_go_style
from scheduler.nodes.placement import NoHealthyNodes, Placement
from scheduler.nodes.registry import NodeSource, RegistryError, node_source
from scheduler.store import ops
from scheduler.store.errors import OverQuota, StoreNotReady
from scheduler.store.scripts.jobs import Created, Dedup
from workers.context import Context

log = logging.getLogger("workers.sqs")

QUEUE_PATH = "/queues/jobs/messages"
DRAIN_BUDGET_SECS = 30.0  # one poll stops taking messages after this; the next goes on
# Messages received before their jobs are made, together (one round trip for them all). The
# queue hands out one per receive: a batch is BATCH receives, well within the visibility
# timeout (30 s), after which an unacked message comes back.
BATCH = 100


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

    async def take(self, message: Message, now: float) -> Job | None:
        """The message's job, checked as POST /jobs checks one (as made at `now`); None for a
        bad body, acked and dropped at once (only a good one waits for its batch)."""
        try:
            return parse_request(message.body, self.ctx.settings.max_body_bytes, now)
        except BadMessage as exc:
            await self.drop(message, f"bad message body in {message.id}", exc)
            return None

    async def handle(self, taken: list[tuple[Message, Job]], now: float) -> bool:
        """Create the messages' jobs, in one bulk create (ops.jobs.create_many: one round trip
        for the batch), each under its message's key, and ack each message whose job is
        made (or was before). False: stop draining for this poll."""
        placements: dict[tuple[str, bool], Placement | Exception] = {}
        wanted: list[tuple[Message, Job, str]] = []
        batch: list[tuple[Job, Placement, Dedup]] = []
        ttl, go_on = self.ctx.settings.sqs_dedup_ttl_secs, True
        for message, req in taken:
            asks, key = (req.instance_id, asks_fit(req)), dedup_key(message)
            if asks not in placements:
                try:
                    placements[asks] = await self.nodes.placement(*asks)
                except (RegistryError, NoHealthyNodes) as exc:
                    placements[asks] = exc
            placed = placements[asks]
            if isinstance(placed, Exception):
                go_on = await self.unplaced(message, req, key, placed) and go_on
            else:
                wanted.append((message, req, key))
                batch.append((req, placed, Dedup("sqs", key, ttl)))
        made = self.ctx.store.run(ops.jobs.create_many(batch, now)) if batch else []
        failure: Exception | None = None
        for (message, req, key), created in zip(wanted, made, strict=True):
            if isinstance(created, Created):
                await self.created(message, created)
            elif isinstance(created, NoHealthyNodes):
                go_on = await self.unplaced(message, req, key, created) and go_on
            elif isinstance(created, OverQuota):
                # Its namespace's pending quota (docs/GUIDE.md, Quotas): made once it has
                # room; the other messages go on.
                log.warning(
                    "sqs: message %s not made (%s); left for redelivery", message.id, created
                )
                self.counts["sqs_unplaced"] += 1
            elif isinstance(created, InvalidInput):  # only the store can tell (`after` unknown)
                await self.drop(message, f"message {message.id} refused", created)
            elif isinstance(created, StoreNotReady):
                # Redis came back empty; the snapshot task restores it within one interval.
                log.warning("sqs: store not restored yet; %s left for redelivery", message.id)
                self.counts["sqs_unplaced"] += 1
                go_on = False
            else:
                failure = failure or created  # a Redis error: the task's, after the acks
        if failure is not None:
            raise failure
        return go_on

    async def drop(self, message: Message, what: str, why: Exception) -> None:
        """A message whose job can never be made: acked and dropped, logged, counted."""
        log.warning("sqs: %s, dropped: %s", what, why)
        self.counts["sqs_dropped"] += 1
        await self.ack(message)

    async def unplaced(self, message: Message, req: Job, key: str, why: Exception) -> bool:
        """A message no node could take now: acked when its key made a job before (a
        redelivery), else left for redelivery. False: stop draining, no message without an
        instance could be placed either."""
        if self.ctx.redis.exists(self.ctx.keys.sqs_message(key)):
            self.counts["sqs_duplicates"] += 1
            await self.ack(message)
            return True
        log.warning("sqs: message %s not placed (%s); left for redelivery", message.id, why)
        self.counts["sqs_unplaced"] += 1
        return bool(req.instance_id)

    async def created(self, message: Message, created: Created) -> None:
        job = msgspec.json.decode(created.job) if created.job else {}
        if created.duplicate:
            log.info("sqs: %s was already ingested as %s", message.id, job.get("job_id"))
            self.counts["sqs_duplicates"] += 1
        else:
            log.info("sqs: %s created %s", message.id, job.get("job_id"))
            self.counts["sqs_created"] += 1
        await self.ack(message)

    async def drain(self, limit: int, budget: float) -> None:
        """Messages received BATCH at a time (fewer once the queue is empty), each batch's
        jobs made together, until `limit` messages, `budget` seconds or an empty queue. An
        SQS failure mid-batch still has the batch received so far handled, then ends."""
        deadline = time.monotonic() + budget
        while limit > 0:
            received, now = 0, time.time()
            taken: list[tuple[Message, Job]] = []
            unavailable: SqsUnavailable | None = None
            while received < min(BATCH, limit):
                try:
                    message = await self.receive()
                except SqsUnavailable as exc:
                    unavailable = exc
                    break
                if message is None:
                    break
                received += 1
                self.counts["sqs_received"] += 1
                job = await self.take(message, now)
                if job is not None:
                    taken.append((message, job))
            limit -= received
            go_on = await self.handle(taken, now) if taken else True
            if unavailable is not None:
                raise unavailable
            if not go_on or received < BATCH or time.monotonic() > deadline:
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
