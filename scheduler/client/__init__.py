"""The scheduler's Python client (docs/CLIENT.md): `Client` (blocking) and `AsyncClient`
(asyncio), their errors and what they answer.

    from scheduler.client import Client

    with Client.from_env() as client:
        job = client.submit("echo hello")
        print(client.wait(job.job_id, timeout=60).stdout)
"""

from scheduler.client.aio import AsyncClient
from scheduler.client.blocking import Client
from scheduler.client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    SchedulerError,
    TooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    Unprocessable,
    Unreachable,
    WaitTimeout,
)
from scheduler.client.models import (
    BatchEntry,
    EventItem,
    EventsDropped,
    JobEvent,
    LogEvent,
    Logs,
    Schedule,
)
from scheduler.models.access_key import KeyMade, KeyView, Role
from scheduler.models.attempt import Attempt
from scheduler.models.batch import Made, Refused
from scheduler.models.event import Event
from scheduler.models.job import Job
from scheduler.models.log import Dropped, Ended, Output, Status
from scheduler.models.queue_place import QueuePlace
from scheduler.models.quota import NamespaceView, Quota, Use
from scheduler.models.registry import Node, NodeDrained, NodeUndrained
from scheduler.models.retry import RetryAnswer

__all__ = [
    "ApiError",
    "AsyncClient",
    "Attempt",
    "BadRequest",
    "BatchEntry",
    "Client",
    "Conflict",
    "Dropped",
    "Ended",
    "Event",
    "EventItem",
    "EventsDropped",
    "Forbidden",
    "Job",
    "JobEvent",
    "KeyMade",
    "KeyView",
    "LogEvent",
    "Logs",
    "Made",
    "NamespaceView",
    "Node",
    "NodeDrained",
    "NodeUndrained",
    "NotFound",
    "Output",
    "QueuePlace",
    "Quota",
    "Refused",
    "RetryAnswer",
    "Role",
    "Schedule",
    "SchedulerError",
    "Status",
    "TooLarge",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "Unreachable",
    "Use",
    "WaitTimeout",
]
