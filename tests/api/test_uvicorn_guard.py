"""scheduler/api/server.py builds on uvicorn's httptools protocol beyond what uvicorn documents
(it subclasses HttpToolsProtocol and RequestResponseCycle, overrides private methods, copies
`on_response_complete`, and its LaneCycle stands in for uvicorn's cycle). pyproject.toml caps
uvicorn to the minor version this was written against; this test fails when the installed
uvicorn differs in anything server.py relies on, naming the member and what to re-check.
deadline.py (the head deadline, on httptools and h11) and linger.py (the lingering close, on
both, with a subclass of each one's cycle) are scanned and guarded the same way.

How complete: GUARDED holds every uvicorn member server.py overrides, calls, copies, reads
or sets, each with a sha256 of its source as in uvicorn 0.55.0 (a method: its source; an
attribute: the source of every method of its uvicorn class that mentions it, so a change in
how uvicorn sets or reads it shows; a constant: its value). Kept complete by an AST scan of
server.py: every `self.X`, `super().X` and `self.protocol.X` in its classes, and the next
attribute on `flow`, `server_state`, `config` and `parser`, that names something a uvicorn
class defines (a method, or an attribute one of its methods assigns) must be listed; so must
every name server.py imports from uvicorn, and every attribute uvicorn's protocol reads off
its cycle must be one LaneCycle has. What it cannot see: a name reached through a variable
or getattr (server.py uses none), and behaviour uvicorn changes outside these members (its
Server, its event loop set-up); the lane's tests (test_lane*.py) exercise that.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Any

import httptools
import pytest
from uvicorn.config import Config
from uvicorn.protocols.http import h11_impl, httptools_impl
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.server import ServerState

from scheduler.api import deadline, linger, server
from tests.guards import member_digest, owned, value_digest

UVICORN_CLASSES: dict[str, type] = {
    "HttpToolsProtocol": httptools_impl.HttpToolsProtocol,
    "H11Protocol": h11_impl.H11Protocol,
    "RequestResponseCycle": httptools_impl.RequestResponseCycle,
    "H11Cycle": h11_impl.RequestResponseCycle,
    "FlowControl": FlowControl,
    "ServerState": ServerState,
    "Config": Config,
}
# Our classes and the uvicorn classes each stands on (LaneCycle stands in for uvicorn's cycle;
# its `self.protocol` is the protocol; deadline.HeadClock is mixed into both protocols).
OURS = {
    "OneWriteCycle": ("RequestResponseCycle",),
    "OneWriteProtocol": ("HttpToolsProtocol",),
    "LaneProtocol": ("HttpToolsProtocol",),
    "HeadClock": ("HttpToolsProtocol", "H11Protocol"),
    "HeadDeadline": ("HttpToolsProtocol",),
    "H11HeadDeadline": ("H11Protocol",),
    "Linger": ("HttpToolsProtocol", "H11Protocol"),
    "_EndsLingering": ("RequestResponseCycle", "H11Cycle"),
    "LingerCycle": ("RequestResponseCycle",),
    "H11LingerCycle": ("H11Cycle",),
}
# The modules that build on uvicorn's protocols.
SCANNED = (server, deadline, linger)
# An attribute of the protocol (or cycle) holding another uvicorn object: its class.
HOLDS = {"flow": "FlowControl", "server_state": "ServerState", "config": "Config"}

# member -> (sha256 as in uvicorn 0.55.0, what to re-check in server.py when it changes)
GUARDED: dict[str, tuple[str, str]] = {
    "Config.access_log": (
        "5c140f2cc72092e3a5911fc7f56a093ac32bb2844aca48f512aacccff9bc8085",
        "lane_off_because (with the access log, all to ASGI) and serve's start-up line",
    ),
    "Config.limit_concurrency": (
        "98e927ea97a70725a66de76e76e0ccfc06dd26ea7603d68e4b88e57b78ebc81a",
        "lane_off_because (with a concurrency limit, all to ASGI, whose 503s uvicorn answers)",
    ),
    "Config.root_path": (
        "98e927ea97a70725a66de76e76e0ccfc06dd26ea7603d68e4b88e57b78ebc81a",
        "lane_off_because (with a root path, all to ASGI)",
    ),
    "FlowControl.resume_reading": (
        "a0429d30857e8488e04dd7a9e23d464874e5c7e97d29ecc7876f6dad1545c088",
        "on_lane_response_complete",
    ),
    "FlowControl.write_paused": (
        "a2371c7b24ce59cc35662348137ca230a084329127264f339124474933ad44c6",
        "_lane_may_serve (a full write buffer goes to ASGI)",
    ),
    "H11Protocol._unset_keepalive_if_required": (
        "00a6a4e47214e68edef469a2a8f21ade722e9c6dfb2eb6c25855fbd9941cec32",
        "linger.Linger.linger (the keep-alive timer the answer armed is cancelled)",
    ),
    "H11Cycle.more_body": (
        "72b170a3356f670b05732a91f7fd3167ed1446d63dd3edb6d900dcaa35dfec59",
        "linger.H11LingerCycle: the request's body is still coming (set False at its end)",
    ),
    "H11Cycle.scope": (
        "fdfbb857879f35883cde3f190093ec26e0733239f2d9244f702ff316faff888d",
        "linger._EndsLingering.answers_early (the request's headers: its declared size)",
    ),
    "H11Cycle.send": (
        "76b4bcb0998bed0e1ba6f4ddcf5f487c03b2f22e26421a934d49af04ee33a9dc",
        "linger.H11LingerCycle.send: `connection: close` added to an early answer makes h11 "
        "close after it, through the transport (_CloseNoted stands in: write, close)",
    ),
    "H11Cycle.transport": (
        "158dbd7816a728674d491e4ead794ca4055dcda12055ce878dca6346b626763d",
        "linger._EndsLingering swaps it for _CloseNoted while the answer ends",
    ),
    "H11Protocol.app": (
        "54db383455848c47d85bbada0a7c908482a9cd704b088364880ddb1f2f56b75d",
        "deadline.H11HeadDeadline.connection_made (head_timeout_of over the loaded app)",
    ),
    "H11Protocol.conn": (
        "36147c4edf1397131673d3424230941791c6991374383f0858e7b4ef263cbacb",
        "deadline.H11HeadDeadline.data_received (their_state IDLE until a head is whole; "
        "trailing_data: a pipelined head kept unparsed)",
    ),
    "H11Protocol.connection_lost": (
        "dbb688fa2b3860005b4f7c53af5c33be1a7ac139184665008984d8935d261e91",
        "deadline.H11HeadDeadline.connection_lost (the head timer, the linger timer)",
    ),
    "H11Protocol.connection_made": (
        "6efb565ff3d36b916c29bd42330a2b99b601b48932389e396e5ac53dbef6b91c",
        "deadline.H11HeadDeadline.connection_made (the first head's clock starts)",
    ),
    "H11Protocol.cycle": (
        "39d36327c157a307bf75c27010a393d2aa6723fed80da7dee432a9e70db12bb0",
        "deadline.HeadClock.head_check (no 408 while a request is being answered); "
        "H11HeadDeadline.handle_events (the cycle it made becomes an H11LingerCycle)",
    ),
    "H11Protocol.data_received": (
        "e03b145518ca44aafc84f6f11655e54570ce724fa24854ae1287771166316a16",
        "deadline.H11HeadDeadline.data_received (every byte passes here, parsed at once, or "
        "dropped while lingering)",
    ),
    "H11Protocol.flow": (
        "464565ca16385515f62d151d8dfedee8df5bb8761746894f98fa364a918ae55f",
        "linger.Linger.linger (resume_reading: the app may have paused it)",
    ),
    "H11Protocol.handle_events": (
        "278f2d7efca279a36863817b83a4a31c0c3cff6c65bfcc28dd48dfd83d887495",
        "deadline.H11HeadDeadline: a head is parsed in data_received (their_state after it); "
        "its override: the only place uvicorn makes a cycle (and starts its task)",
    ),
    "H11Protocol.loop": (
        "dd19168f4caf6a79e15bcdbde56b00c5a3c023d67fa668097e54935145021bfa",
        "deadline.HeadClock's timer",
    ),
    "H11Protocol.on_response_complete": (
        "1fbb8f48c6a1afc4cb655ddc746495c68608d12be775ea25c9debfd1e232a96a",
        "deadline.H11HeadDeadline: the keep-alive timer bounds a pipelined half head; "
        "linger.Linger.linger runs after it and cancels that timer",
    ),
    "H11Protocol.server_state": (
        "cb6919e84e3652fa2623e119e568cbd7f25565b012d1cda356b61b2c55519f8a",
        "deadline.HeadClock.head_check (default_headers of the 408)",
    ),
    "H11Protocol.transport": (
        "7c07294dbd97d8377aa6338f4587e77c2ce722dbb66595eaf1fa2560ea79f37a",
        "deadline.HeadClock.head_check (write the 408, close)",
    ),
    "HttpToolsProtocol._start_asgi_task": (
        "8d0189e65525db4252cf68afc4d089cafa6a7065d1d39c3877354c0a0a7d504c",
        "OneWriteProtocol's and HeadDeadline's overrides (the class swaps); "
        "on_lane_response_complete's call",
    ),
    "HttpToolsProtocol._unset_keepalive_if_required": (
        "00a6a4e47214e68edef469a2a8f21ade722e9c6dfb2eb6c25855fbd9941cec32",
        "LaneProtocol's override and the lazy keep-alive timeout; linger.Linger.linger calls "
        "it (the keep-alive timer must not close a lingering connection)",
    ),
    "HttpToolsProtocol.app": (
        "193088f1a20f78f2b8c184403e5e6b4b6f43bb54aa796225bc33ce1264a8ee5a",
        "LaneProtocol._lane (find_lane over the loaded app)",
    ),
    "HttpToolsProtocol.client": (
        "c0842422c8451d2d377296004bcc52e6c33e723ef099c47f3172d51a37b07542",
        "LaneProtocol._lane_request (the peer's host: HotRequest.peer, which AGENT_NETWORKS "
        "checks and failed keys are counted against)",
    ),
    "HttpToolsProtocol.config": (
        "b2330ff3035f7658a17943f638584d5b29966f2d19fddf0d808e60b736ccafdc",
        "LaneProtocol._lane_may_serve (config.access_log)",
    ),
    "HttpToolsProtocol.connection_made": (
        "6efb565ff3d36b916c29bd42330a2b99b601b48932389e396e5ac53dbef6b91c",
        "deadline.HeadDeadline.connection_made (the first head's clock starts)",
    ),
    "HttpToolsProtocol.connection_lost": (
        "c91a4c9bf2e29c554a97418b5f3064e97f6e0ceaba3b90fc35a3460076c705ab",
        "LaneProtocol.connection_lost (idle timer), LaneCycle's disconnected/message_event, "
        "deadline.HeadDeadline.connection_lost (head timer)",
    ),
    "HttpToolsProtocol.cycle": (
        "f7a4f49e5064c66ca3e8f4a53c8a60389b0b7e70d34f250a1dfd4abbaf279b2b",
        "LaneCycle as the protocol's cycle: what the protocol reads or sets on it; "
        "deadline.HeadClock.head_check (no 408 while a request is being answered)",
    ),
    "HttpToolsProtocol.data_received": (
        "010a7ae59a5d3b1a5e7326ce246878568629d126a076d8af5ba10cab040fae43",
        "LaneProtocol._unset_keepalive_if_required (idle_since reset on each request's data), "
        "deadline.HeadDeadline.data_received (a byte between requests starts a head)",
    ),
    "HttpToolsProtocol.expect_100_continue": (
        "787abe29a0b766bfc1e14e52ff22bf2a4e1f05970dd24a5627447e755067d46b",
        "_lane_may_serve (100-continue goes to ASGI)",
    ),
    "HttpToolsProtocol.flow": (
        "e74dc8b447d738d4d76dc3093b52d741fcef68e840ac65cf5656f61eb9ce87ea",
        "_lane_may_serve (write_paused) and on_lane_response_complete (resume_reading)",
    ),
    "HttpToolsProtocol.headers": (
        "2b36b71ac79e3bd6aaca016431c691acb4e23611e6e758b716e6e1898af667fa",
        "_lane_request and _small_sized_body (the headers, lowercased, rstripped)",
    ),
    "HttpToolsProtocol.loop": (
        "7c90a3a4d5a341f478e7cc936c46a29224bc8b74d61c14c5a2d6c66649b6df30",
        "LaneCycle.run_task, read_body's deadline, the idle timer, deadline.HeadClock's timer",
    ),
    "HttpToolsProtocol.on_headers_complete": (
        "1ea8589acfad92d8ff9182775f337d98fc469e0fa39642a83195fca920f5ca96",
        "LaneProtocol.on_headers_complete: what uvicorn does there, which the lane skips; "
        "deadline.HeadDeadline.on_headers_complete (the head is whole)",
    ),
    "HttpToolsProtocol.on_message_begin": (
        "96d377fdc7c2baef943c2bd245003abc53566ddb35777e0f4c7bc754198b5457",
        "deadline.HeadDeadline.on_message_begin (a pipelined request's head clock starts)",
    ),
    "HttpToolsProtocol.on_message_complete": (
        "1fbad42dc31fc01fd4106a9885b2a2e0f6ce8d38241a3df0f615c6a8663493e0",
        "deadline.HeadDeadline.on_message_complete (the next byte starts a head)",
    ),
    "HttpToolsProtocol.on_response_complete": (
        "64e254f28e389e7614f2c828176d639174e66aa9d814a4b06624ec86ec0a5b95",
        "LaneProtocol.on_lane_response_complete, a copy of it: copy the change",
    ),
    "HttpToolsProtocol.parser": (
        "1319f3145ee36c78b73652031ad7a74ed8c08c9fb6631eb886ff59cef4f2840c",
        "LaneProtocol (get_method, get_http_version, should_keep_alive, should_upgrade)",
    ),
    "HttpToolsProtocol.pipeline": (
        "90229d7d5705172d1d6d52790e0b07b9219b6d88209dfb3b1a05e4fe954d1f33",
        "_lane_may_serve and on_lane_response_complete (pipelined requests in order)",
    ),
    "HttpToolsProtocol.scope": (
        "ebcd00f02a2da79abb0cc94b50fe1a7e525c385611a5f376092cde892ce3e1c0",
        "LaneProtocol.on_headers_complete (scope['method'], read by uvicorn after the response)",
    ),
    "HttpToolsProtocol.server_state": (
        "128f74e034f24e9857ff9bab3d4114c9b9e55f48c1ecff9cc0509595af52cd39",
        "LaneCycle.write (default_headers) and on_lane_response_complete (total_requests)",
    ),
    "HttpToolsProtocol.tasks": (
        "01fef5ae7fb94ee2336072648ca2475d6f3b11fb8c562d224a7023a0ca86d8cd",
        "LaneCycle.run_task (a graceful shutdown waits for the lane's tasks)",
    ),
    "HttpToolsProtocol.timeout_keep_alive": (
        "fe1c14d7b731e8746f21e06a8f8ccf3e6e1065d370dfc000793f63799bc62b52",
        "the lazy keep-alive timer (_idle_check)",
    ),
    "HttpToolsProtocol.timeout_keep_alive_handler": (
        "8b53bf5f2e202970f6f6c0338a5c381c66efce4e9c673b05175d858eef5fd888",
        "_idle_check, which calls it",
    ),
    "HttpToolsProtocol.transport": (
        "e888c6deca76621bdc6bf7a82f8be59b1fb8d13399ab31a24c1dc0379b3e99f8",
        "LaneCycle.write, _lane_may_serve, on_lane_response_complete",
    ),
    "HttpToolsProtocol.url": (
        "e5287101a13759b5510a2dcbade3c827c57347e6f0e8a96d54c2ae5004c30518",
        "LaneProtocol._lane_request (the raw target, parsed with httptools.parse_url)",
    ),
    "RequestResponseCycle.body": (
        "bf2945bb1e5edb7a7459a76b8733b2c9dd5f3b4624f205cba2c32e08ce0cd29c",
        "LaneCycle.body (the protocol appends to it) and LaneCycle.read_body",
    ),
    "RequestResponseCycle.chunked_encoding": (
        "c12f7709bbeac8857b43f0e6cfc846a9eaf407881a16cb39b583723c3af7e989",
        "OneWriteCycle.send (a sized, non-chunked body takes the held head)",
    ),
    "RequestResponseCycle.disconnected": (
        "8b8de25e0c963009b4481cd36d0656cdbfc3a779045c0afcf29f04b7a72e7f80",
        "OneWriteCycle.send and LaneCycle.disconnected",
    ),
    "RequestResponseCycle.expected_content_length": (
        "c12f7709bbeac8857b43f0e6cfc846a9eaf407881a16cb39b583723c3af7e989",
        "OneWriteCycle.send (the head counted into the Content-Length check)",
    ),
    "RequestResponseCycle.keep_alive": (
        "c12f7709bbeac8857b43f0e6cfc846a9eaf407881a16cb39b583723c3af7e989",
        "LaneCycle.keep_alive (the protocol's shutdown sets it); linger.LingerCycle.send "
        "clears it for an early answer (uvicorn then says `connection: close`, and closes)",
    ),
    "RequestResponseCycle.message_event": (
        "5bd7672e3075032059806e9cb88973fddb8a120350d33b07bb6b06853b34b5b1",
        "LaneCycle.message_event (_NoEvent for a bodiless request) and read_body",
    ),
    "RequestResponseCycle.more_body": (
        "bf2945bb1e5edb7a7459a76b8733b2c9dd5f3b4624f205cba2c32e08ce0cd29c",
        "LaneCycle.more_body (the protocol clears it on message complete); linger.py and "
        "LaneCycle.write read it: the request's body is still coming",
    ),
    "RequestResponseCycle.response_complete": (
        "8b8de25e0c963009b4481cd36d0656cdbfc3a779045c0afcf29f04b7a72e7f80",
        "LaneCycle.response_complete (the protocol's pipelining and shutdown read it)",
    ),
    "RequestResponseCycle.response_started": (
        "a8579bec4cd2a1781a053a6263be4e7be6203441bfa0cb9c8d33b7dbfe392fe8",
        "OneWriteCycle.send (the head is held only at the start)",
    ),
    "RequestResponseCycle.scope": (
        "a8579bec4cd2a1781a053a6263be4e7be6203441bfa0cb9c8d33b7dbfe392fe8",
        "OneWriteCycle.send (HEAD is written as uvicorn writes it); "
        "linger._EndsLingering.answers_early (the request's headers: its declared size)",
    ),
    "RequestResponseCycle.send": (
        "abdd8601b326a8da972436918d3a954e1ef39c6bf0cd9e1c1954c2e798d0bb9c",
        "OneWriteCycle.send: the head written to a stand-in transport, then the body; "
        "linger.LingerCycle.send: the close after an early answer noted by a stand-in",
    ),
    "RequestResponseCycle.transport": (
        "8b8de25e0c963009b4481cd36d0656cdbfc3a779045c0afcf29f04b7a72e7f80",
        "OneWriteCycle.send swaps it for _HeadBuffer during the start, linger._EndsLingering "
        "for _CloseNoted (write, is_closing, close) during the end",
    ),
    "STATUS_LINE": (
        "4736834f2615eee997d37ecc45d4973517ea6cacf060ceb95e4de26259d01366",
        "LaneCycle.write's status lines (byte-identical answers, test_lane.py)",
    ),
    "ServerState.default_headers": (
        "8daf3a9b4e4e424520b5f7fd00df3eeb4eed5cb7bdcd17a8a2e15fbe89c06ea8",
        "LaneCycle.write (server and date headers)",
    ),
    "ServerState.total_requests": (
        "8daf3a9b4e4e424520b5f7fd00df3eeb4eed5cb7bdcd17a8a2e15fbe89c06ea8",
        "on_lane_response_complete (--limit-max-requests counts lane requests)",
    ),
}


def digest(member: str) -> str:
    """sha256 of a member's source (tests/guards.py), or a module constant's value."""
    owner, _, name = member.rpartition(".")
    if not owner:
        return value_digest(getattr(httptools_impl, name))
    return member_digest(UVICORN_CLASSES[owner], name)


def owned_by(owner: str) -> set[str]:
    """What a uvicorn class owns, its bases' members included."""
    cls = UVICORN_CLASSES[owner]
    return {name for klass in cls.__mro__[:-1] for name in owned(klass)}


def used_by_server() -> set[str]:
    """Every uvicorn member server.py, deadline.py and linger.py reach, as "Class.name" (or
    "NAME" for a constant of httptools_impl)."""
    used: set[str] = set()
    # What each uvicorn class owns, read once (its methods' source parsed): once per
    # attribute of the scanned classes, the scan took 15 s of CPU.
    owners = {name: owned_by(name) for name in UVICORN_CLASSES}
    for module in SCANNED:
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("uvicorn"):
                for alias in node.names:
                    used.add(alias.name if alias.name not in UVICORN_CLASSES else "")
            if isinstance(node, ast.ClassDef):
                for base in OURS.get(node.name, (None,)):
                    used |= _used_in_class(node, base, owners)
    return used - {""}


def _used_in_class(node: ast.ClassDef, base: str | None, owners: dict[str, set[str]]) -> set[str]:
    used: set[str] = set()
    for attr in ast.walk(node):
        if not isinstance(attr, ast.Attribute):
            continue
        owner = _owner_of(attr.value, base, node.name)
        if owner is not None and attr.attr in owners[owner]:
            used.add(f"{owner}.{attr.attr}")
    return used


def _owner_of(value: ast.expr, base: str | None, cls: str) -> str | None:
    """The uvicorn class whose member `value.<attr>` is, if any."""
    if isinstance(value, ast.Name) and value.id == "self":
        return base
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return base if value.func.id == "super" else None
    if isinstance(value, ast.Attribute):
        if value.attr == "protocol" and cls == "LaneCycle":
            return "HttpToolsProtocol"
        holder = _owner_of(value.value, base, cls) or (
            "HttpToolsProtocol" if cls == "LaneCycle" else None
        )
        if holder is not None and value.attr in HOLDS:
            return HOLDS[value.attr]
    return None


def test_uvicorn_is_the_version_the_lane_was_written_against() -> None:
    changed = [
        f"{member}: changed in this uvicorn; re-check {what}"
        for member, (expected, what) in sorted(GUARDED.items())
        if digest(member) != expected
    ]
    assert not changed, "\n".join(changed)


def test_every_uvicorn_member_server_py_uses_is_guarded() -> None:
    missing = sorted(used_by_server() - set(GUARDED))
    assert not missing, f"add to GUARDED (with what to re-check): {missing}"


def test_lane_cycle_has_every_attribute_uvicorns_protocol_reads_off_its_cycle() -> None:
    source = textwrap.dedent(inspect.getsource(httptools_impl.HttpToolsProtocol))
    read = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "cycle"
    }
    assert read <= set(server.LaneCycle.__slots__)
    assert {f"RequestResponseCycle.{name}" for name in read} <= set(GUARDED)


def test_the_httptools_parser_calls_are_its_documented_api() -> None:
    """httptools is used through its README's API only (parse_url, HttpRequestParser's
    get_method, get_http_version, should_keep_alive, should_upgrade): no cap needed."""
    parser = httptools.HttpRequestParser(object())
    for name in ("get_method", "get_http_version", "should_keep_alive", "should_upgrade"):
        assert callable(getattr(parser, name))
    assert httptools.parse_url(b"/jobs?a=1").query == b"a=1"


@pytest.mark.parametrize("member", ["HttpToolsProtocol.nothing_like_this", "NO_SUCH_CONSTANT"])
def test_a_member_uvicorn_does_not_have_is_an_error_not_a_pass(member: str) -> None:
    with pytest.raises((KeyError, AttributeError)):
        digest(member)


def test_a_changed_member_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    def on_response_complete(self: Any) -> None:
        self.server_state.total_requests += 2

    protocol = httptools_impl.HttpToolsProtocol
    monkeypatch.setattr(protocol, "on_response_complete", on_response_complete)
    assert (
        digest("HttpToolsProtocol.on_response_complete")
        != GUARDED["HttpToolsProtocol.on_response_complete"][0]
    )


def test_the_scan_sees_what_server_py_reaches() -> None:
    used = used_by_server()
    assert {
        "STATUS_LINE",
        "HttpToolsProtocol.pipeline",  # self.pipeline in LaneProtocol
        "HttpToolsProtocol._start_asgi_task",  # super()._start_asgi_task
        "HttpToolsProtocol.tasks",  # self.protocol.tasks in LaneCycle
        "ServerState.default_headers",  # self.protocol.server_state.default_headers
        "FlowControl.write_paused",  # self.flow.write_paused
        "RequestResponseCycle.expected_content_length",  # in OneWriteCycle
    } <= used
