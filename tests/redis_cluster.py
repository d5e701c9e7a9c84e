"""A private Redis Cluster for the tests: three primaries on free loopback ports, built by
hand with CLUSTER ADDSLOTSRANGE and CLUSTER MEET (no redis-cli needed), never the machine's
own Redis. With `replicas`, each primary gets that many replicas (CLUSTER REPLICATE), and a
test can SIGKILL a node and start it again on its port and configuration file."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import redis

from tests.redis_server import free_port

SLOTS = 16384


@dataclass(frozen=True)
class ClusterNode:
    port: int
    bus_port: int
    password: str = ""  # asked of clients and of the other nodes

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password or None, socket_timeout=5)


@dataclass(frozen=True)
class Cluster:
    nodes: list[ClusterNode]  # the primaries as formed (a failover may change that)
    # replicas[i] replicates nodes[i % len(nodes)] as formed
    replicas: list[ClusterNode] = field(default_factory=list)
    # Each node's redis-server by port, and how to start it again (kill, restart).
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, compare=False)
    start: Callable[[ClusterNode], subprocess.Popen[bytes]] | None = field(
        default=None, compare=False
    )

    @property
    def url(self) -> str:
        """REDIS_URL of the cluster: every primary as a seed."""
        password = self.nodes[0].password
        credentials = f":{quote(password, safe='')}@" if password else ""
        return f"redis+cluster://{credentials}" + ",".join(node.address for node in self.nodes)

    def owner(self, slot: int) -> ClusterNode:
        """The primary serving `slot` now, as the first live node says."""
        everyone = [*self.nodes, *self.replicas]
        asked = next(node for node in everyone if self.alive(node))
        for first, last, primary, *_ in command(asked.client(), "CLUSTER SLOTS"):
            if first <= slot <= last:
                port = int(primary[1])
                return next(node for node in everyone if node.port == port)
        raise LookupError(f"slot {slot} is not served")

    def alive(self, node: ClusterNode) -> bool:
        proc = self.procs.get(node.port)
        return proc is None or proc.poll() is None

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL the node's redis-server (no snapshot, no append-only file: its data dies)."""
        proc = self.procs[node.port]
        proc.kill()
        proc.wait(timeout=10)

    def restart(self, node: ClusterNode) -> None:
        """Start a killed node again on its ports and cluster configuration file: it rejoins
        empty, and as a replica if its primary was failed over meanwhile."""
        assert self.start is not None and not self.alive(node)
        proc = self.start(node)
        self.procs[node.port] = proc
        _wait(f"port {node.port}", lambda: _ping(node, proc))

    def failed(self, node: ClusterNode) -> bool:
        """Whether every other live node flags `node` as failed (CLUSTER NODES `fail`)."""
        return all(
            "fail" in _flags(other, node)
            for other in (*self.nodes, *self.replicas)
            if other != node and self.alive(other)
        )

    def move_slot(self, slot: int, target: ClusterNode) -> None:
        """Reshard one slot with its keys to `target`, as `redis-cli --cluster reshard` does."""
        source = self.owner(slot)
        if source == target:
            return
        src, dst = source.client(), target.client()
        src_id, dst_id = _node_id(src), _node_id(dst)
        command(dst, "CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        command(src, "CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := command(src, "CLUSTER GETKEYSINSLOT", slot, 100):
            auth = ("AUTH", target.password) if target.password else ()
            command(src, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, *auth, "KEYS", *keys)
        # The target first (it bumps its config epoch, so gossip carries the new owner
        # everywhere), then the source, then the others, as the cluster specification's
        # resharding does: another order lets a node briefly take the old owner back.
        rest = [node for node in self.nodes if node not in (target, source)]
        for node in (target, source, *rest):
            command(node.client(), "CLUSTER SETSLOT", slot, "NODE", dst_id)
        self._agree(slot, target)

    def _agree(self, slot: int, target: ClusterNode, within: float = 60.0) -> None:
        """Until every primary names `target` as the slot's owner: a node's view can still
        move after its SETSLOT (gossip), and a test that follows a MOVED once (the mux) was
        sent back to the old owner by the new one (once in CI)."""
        deadline = time.monotonic() + within
        while True:
            views = {node.port: _owner_port(node, slot) for node in self.nodes if self.alive(node)}
            if set(views.values()) == {target.port}:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"slot {slot}: the nodes still disagree on its owner: {views}")
            time.sleep(0.01)


def _owner_port(node: ClusterNode, slot: int) -> int | None:
    """The port of the primary `node` says serves `slot` (None: none)."""
    with node.client() as client:
        for first, last, primary, *_ in command(client, "CLUSTER SLOTS"):
            if first <= slot <= last:
                return int(primary[1])
    return None


def command(client: redis.Redis, *args: Any) -> Any:
    """A raw command (redis-py's execute_command is untyped)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _node_id(client: redis.Redis) -> str:
    return str(command(client, "CLUSTER MYID").decode())


def _flags(asked: ClusterNode, node: ClusterNode) -> set[str]:
    """`node`'s flags in `asked`'s CLUSTER NODES (myself, master, slave, fail?, fail...)."""
    entry = command(asked.client(), "CLUSTER NODES").get(node.address, {})
    return set(entry.get("flags", "").split(","))


def _free_node(password: str) -> ClusterNode:
    # The bus port is set explicitly: the default (port + 10000) may be taken or out of range.
    return ClusterNode(free_port(), free_port(), password)


def _wait(what: str, check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if callable(check) and check():
                return
        except redis.ConnectionError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"redis cluster: {what} not within {timeout} s")


def _start(binary: str, node: ClusterNode, data: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            binary,
            *("--port", str(node.port), "--bind", "127.0.0.1", "--dir", data),
            *("--cluster-enabled", "yes", "--cluster-port", str(node.bus_port)),
            *("--cluster-config-file", f"nodes-{node.port}.conf"),
            *("--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no"),
            # A replica syncs at once, not after the default 5 s wait for others to join.
            *("--repl-diskless-sync-delay", "0"),
            *(
                ("--requirepass", node.password, "--masterauth", node.password)
                if node.password
                else ()
            ),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _form(nodes: list[ClusterNode]) -> None:
    share = SLOTS // len(nodes)
    for index, node in enumerate(nodes):
        last = SLOTS - 1 if index == len(nodes) - 1 else (index + 1) * share - 1
        command(node.client(), "CLUSTER ADDSLOTSRANGE", index * share, last)
    for node in nodes[1:]:
        command(nodes[0].client(), "CLUSTER MEET", "127.0.0.1", node.port, node.bus_port)

    def formed() -> bool:
        return all(
            node.client().cluster("INFO")["cluster_state"] == "ok"
            and len(node.client().cluster("NODES")) == len(nodes)
            for node in nodes
        )

    _wait("cluster_state:ok on every node", formed)


@contextlib.contextmanager
def redis_cluster(
    primaries: int = 3, password: str = "", replicas: int = 0, extra: tuple[str, ...] = ()
) -> Iterator[Cluster]:
    """With `password`, every node asks for it; `replicas` per primary; `extra` options for
    every node's redis-server."""
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (.ci/run installs it)")
    nodes: list[ClusterNode] = []
    procs: dict[int, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="sched-cluster-") as data:
        try:
            for _ in range(primaries * (1 + replicas)):
                node, proc = _start_node(binary, password, data, nodes, extra)
                nodes.append(node)
                procs[node.port] = proc
            _form(nodes[:primaries])
            _add_replicas(nodes[:primaries], nodes[primaries:])
            yield Cluster(
                nodes[:primaries],
                nodes[primaries:],
                procs,
                lambda node: _start(binary, node, data, *extra),
            )
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                proc.wait(timeout=10)


def _add_replicas(primaries: list[ClusterNode], replicas: list[ClusterNode]) -> None:
    """replicas[i] replicates primaries[i % len(primaries)], each once it knows of it."""
    for replica in replicas:
        command(primaries[0].client(), "CLUSTER MEET", "127.0.0.1", replica.port, replica.bus_port)
    everyone = [*primaries, *replicas]
    for index, replica in enumerate(replicas):
        primary_id = _node_id(primaries[index % len(primaries)].client())

        def knows(r: ClusterNode = replica, wanted: str = primary_id) -> bool:
            known = command(r.client(), "CLUSTER NODES").values()
            return any(entry["node_id"] == wanted for entry in known)

        _wait(f"{replica.address} knowing its primary", knows)
        command(replica.client(), "CLUSTER REPLICATE", primary_id)

    def replicating() -> bool:
        return all(
            replica.client().info("replication").get("master_link_status") == "up"
            for replica in replicas
        ) and all(
            node.client().cluster("INFO")["cluster_state"] == "ok"
            and len(node.client().cluster("NODES")) == len(everyone)
            for node in everyone
        )

    _wait("every replica synced and known to all", replicating)


NODE_START_TRIES = 5


def _start_node(
    binary: str, password: str, data: str, others: list[ClusterNode], extra: tuple[str, ...]
) -> tuple[ClusterNode, subprocess.Popen[bytes]]:
    """A node on free ports, started and answering. A free port can be taken between
    free_port() and the server's bind (another test's server or client): a node that exits
    at start is tried again on other ports."""
    taken = {port for other in others for port in (other.port, other.bus_port)}
    for attempt in range(NODE_START_TRIES):
        node = _free_node(password)
        if {node.port, node.bus_port} & taken or node.port == node.bus_port:
            continue
        proc = _start(binary, node, data, *extra)
        try:
            _wait(f"port {node.port}", lambda n=node, p=proc: _ping(n, p))
        except NodeExited:
            if attempt + 1 == NODE_START_TRIES:
                raise
            continue
        return node, proc
    raise RuntimeError(f"no cluster node started in {NODE_START_TRIES} tries")


class NodeExited(RuntimeError):
    """A cluster node's redis-server ended while starting (its port was taken)."""


def _ping(node: ClusterNode, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise NodeExited(f"redis-server (cluster node {node.port}) exited with {proc.returncode}")
    return bool(node.client().ping())
