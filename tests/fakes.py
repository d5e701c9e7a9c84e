"""Real HTTP fakes of the tiny-aws SQS, SNS and registry services (CONTRACT 5, 6, 2.6), for
tests.

Each runs an http.server in a daemon thread on a free 127.0.0.1 port, and has knobs the tests
turn: SQS's visibility timeout (30 s in the original), lost acks, outages; SNS's failing,
slow or stopped periods. They record what they were sent.

    with FakeSQS(visibility_secs=1) as sqs:   # sqs.url, sqs.send(body), sqs.remaining()
    with FakeSNS() as sns:                    # sns.url, sns.published, sns.failing = 500
    with FakeRegistry() as reg:               # reg.nodes["n1"] = "healthy", reg.listing
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs

from tests.redis_server import free_port

Json = Any
T = TypeVar("T")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.connections: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Cut the kept-alive connections too, or a stopped service would go on answering."""
        for conn in list(self.connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a killed worker, a client timeout) is expected here.
        pass


class FakeService:
    """An http.server in a thread; subclasses implement `handle(method, path, body)`."""

    def __init__(self) -> None:
        self.port = free_port()
        self.lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        raise NotImplementedError

    def start(self) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle's algorithm and delayed ACKs
            # every response would wait ~40 ms.
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload = service.handle(self.command, self.path, body)
                self.send_response(status)
                if payload:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (clients then get connection refused); `start` again to recover."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.drop_connections()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _json(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


@dataclass
class _Message:
    id: str
    body: Json  # a string in the real service; anything here, to test bad messages
    visible_after: float = 0.0
    receive_count: int = 0
    deleted: bool = False


@dataclass
class SqsLog:
    receives: int = 0
    deliveries: list[str] = field(default_factory=list)  # message ids handed out
    acks: list[str] = field(default_factory=list)  # DELETEs that took effect
    lost_acks: list[str] = field(default_factory=list)  # DELETEs the fake dropped


class FakeSQS(FakeService):
    """Queue semantics of CONTRACT 5 (one queue is enough: the scheduler uses `jobs`)."""

    def __init__(self, visibility_secs: float = 30.0) -> None:
        super().__init__()
        self.visibility_secs = visibility_secs
        self.messages: list[_Message] = []
        self.next_id = 1
        self.log = SqsLog()
        self.lose_acks = 0  # the next N DELETEs answer 500 and delete nothing...
        self.stall_secs = 0.0  # ...after holding the request this long
        self.stalled = 0  # requests being held right now
        self.failing: int | None = None  # every request answers this status
        self.empty_reply: bytes | None = None  # receive answers this instead of a message
        self.delay_secs = 0.0  # hold every request this long (a hung service)

    def __enter__(self) -> FakeSQS:
        self.start()
        return self

    def send(self, body: Json) -> str:
        with self.lock:
            message = _Message(f"msg-{self.next_id}", body)
            self.next_id += 1
            self.messages.append(message)
            return message.id

    def wipe(self) -> None:
        """As a wiped SQS database: no messages, and ids start again at msg-1."""
        with self.lock:
            self.messages.clear()
            self.next_id = 1

    def remaining(self) -> int:
        with self.lock:
            return sum(1 for m in self.messages if not m.deleted)

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        time.sleep(self.delay_secs)
        if self.failing is not None:
            return self.failing, b"sqs is failing\n"
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/health":
            return 200, _json({"status": "healthy", "service": "sqs"})
        if len(parts) == 3 and parts[0] == "queues" and parts[2] == "messages":
            if method == "POST":
                text = json.loads(body or b"{}").get("body") or ""
                if not text:
                    return 400, b"body required\n"
                return 201, _json({"id": self.send(text)})
            if method == "GET":
                return 200, self._receive()
        if method == "DELETE" and len(parts) == 4 and parts[2] == "messages":
            return self._delete(parts[3])
        return 404, b"404 page not found\n"

    def _receive(self) -> bytes:
        now = time.monotonic()
        with self.lock:
            self.log.receives += 1
            if self.empty_reply is not None:
                return self.empty_reply
            for message in self.messages:
                if not message.deleted and message.visible_after <= now:
                    message.receive_count += 1
                    message.visible_after = now + self.visibility_secs
                    self.log.deliveries.append(message.id)
                    return _json(
                        {
                            "id": message.id,
                            "body": message.body,
                            "receive_count": message.receive_count,
                        }
                    )
        return b"null\n"

    def _delete(self, message_id: str) -> tuple[int, bytes]:
        with self.lock:
            lose = self.lose_acks > 0
            if lose:
                self.lose_acks -= 1
                self.log.lost_acks.append(message_id)
                self.stalled += 1
        if lose:
            time.sleep(self.stall_secs)
            with self.lock:
                self.stalled -= 1
            return 500, b"ack lost\n"
        with self.lock:
            for message in self.messages:
                if message.id == message_id:
                    message.deleted = True
            self.log.acks.append(message_id)
        return 204, b""


@dataclass(frozen=True)
class Publish:
    topic: str
    body: bytes  # the request body exactly as sent

    @property
    def event(self) -> Json:
        return json.loads(json.loads(self.body)["message"])


class FakeSNS(FakeService):
    """Topic publish of CONTRACT 6, recording every publish request it received."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[Publish] = []  # requests answered 200
        self.refused = 0  # requests answered `failing`
        self.failing: int | None = None  # answer this status instead of publishing
        self.delay_secs = 0.0  # hold each publish this long before answering
        self.in_flight = 0
        self.lose_publishes = 0  # the next N publishes are held, then answered 500, unrecorded
        self.stall_secs = 0.0
        self.stalled = 0

    def __enter__(self) -> FakeSNS:
        self.start()
        return self

    def events(self) -> list[Json]:
        with self.lock:
            return [p.event for p in self.published]

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/health":
            return 200, _json({"status": "healthy", "service": "sns"})
        if method == "POST" and len(parts) == 3 and parts[0] == "topics" and parts[2] == "publish":
            return self._publish(parts[1], body)
        return 404, b"404 page not found\n"

    def _publish(self, topic: str, body: bytes) -> tuple[int, bytes]:
        with self.lock:
            lose = self.lose_publishes > 0
            if lose:
                self.lose_publishes -= 1
                self.stalled += 1
        if lose:
            time.sleep(self.stall_secs)
            with self.lock:
                self.stalled -= 1
            return 500, b"publish lost\n"
        with self.lock:
            if self.failing is not None:
                self.refused += 1
                return self.failing, b"sns is failing\n"
            try:
                message = json.loads(body)["message"]
            except (ValueError, KeyError, TypeError):
                message = ""
            if not isinstance(message, str) or not message:
                return 400, b"message required\n"
            self.in_flight += 1
            delay = self.delay_secs
        time.sleep(delay)
        with self.lock:
            self.in_flight -= 1
            self.published.append(Publish(topic, body))
        return 200, _json({"delivered": 0})


def eventually(check: Callable[[], T], timeout: float = 20.0, interval: float = 0.05) -> T:
    """Poll `check` until it returns a truthy value (returned) or `timeout` passes (fails with
    the last value): how tests wait for background work without fixed sleeps."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s; last value: {value!r}")
        time.sleep(interval)


class FakeRegistry(FakeService):
    """The registry calls the scheduler and its agents make (CONTRACT 2.6, 3.2, 4.1).

    GET /nodes (?role=) answers the node map: `nodes` (id -> status), each node with its
    `fields` merged in, plus the nodes agents registered (POST /nodes/register) once `listing`
    is true: a test decides when the registry shows them. An agent's heartbeat, DELETE and
    GET /instances ([]) are answered; GET /instances/{id} from `instances` (id -> node id,
    running). With `failing` set, the node map call answers that status with an empty JSON
    object. `seen` records (method, path) of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, str] = {}
        self.fields: dict[str, dict[str, Json]] = {}
        self.instances: dict[str, str] = {}
        self.failing = 0
        self.registered: dict[str, dict[str, Json]] = {}  # by id: the agent's registration
        self.listing = True
        self.seen: list[tuple[str, str]] = []

    def __enter__(self) -> FakeRegistry:
        self.start()
        return self

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        with self.lock:
            self.seen.append((method, path))
            route, _, query = path.partition("?")
            if method == "GET" and route == "/nodes":
                if self.failing:
                    return self.failing, b"{}"
                return 200, _json(self._node_map(parse_qs(query).get("role", [""])[0]))
            if method == "POST" and route in ("/nodes/register", "/nodes/heartbeat"):
                return self._agent_call(route, json.loads(body or b"{}"))
            if method == "DELETE" and route.startswith("/nodes/"):
                self.registered.pop(route.removeprefix("/nodes/"), None)
                return 204, b""
            if method == "GET" and route == "/instances":
                return 200, _json([])
            return self._instance(route.removeprefix("/instances/"))

    def _node_map(self, role: str) -> dict[str, Json]:
        statuses = dict(self.nodes)
        if self.listing:
            statuses.update(dict.fromkeys(self.registered, "healthy"))
        nodes = {
            node_id: {
                "id": node_id,
                "role": "compute",
                "status": status,
                **self.registered.get(node_id, {}),
                **self.fields.get(node_id, {}),
            }
            for node_id, status in statuses.items()
        }
        return {k: node for k, node in nodes.items() if not role or node["role"] == role}

    def _agent_call(self, route: str, node: dict[str, Json]) -> tuple[int, bytes]:
        node_id = str(node.get("id", ""))
        if route == "/nodes/register":
            self.registered[node_id] = {**node, "status": "healthy"}
            return 201, _json(self.registered[node_id])
        if node_id not in self.registered:
            return 404, b"node not found\n"
        return 200, _json(self.registered[node_id])

    def _instance(self, instance_id: str) -> tuple[int, bytes]:
        if instance_id in self.instances:
            node_id = self.instances[instance_id]
            return 200, _json({"id": instance_id, "node_id": node_id, "status": "running"})
        return 404, b"not found\n"


def ending_number(rclient: Any, keys: Any, job_id: str) -> int:
    """The event number of `job_id`'s ending (its SNS outbox entry's too), from the shard's
    stream of job events (GET /events): its last event."""
    for _, fields in reversed(rclient.xrange(keys.events, "-", "+")):
        if fields[b"job"].decode() == job_id:
            return int(fields[b"n"])
    raise AssertionError(f"no event of {job_id}")
