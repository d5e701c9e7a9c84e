"""A private redis-server for the tests, on a free loopback port (never the machine's own)."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import redis


def _ephemeral_ports() -> range:
    """The ports the kernel gives outgoing connections (and bind to port 0) their local end
    from: Linux's ip_local_port_range, else the IANA range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            low, high = (int(part) for part in ports.read().split())
    except (OSError, ValueError):
        low, high = 49152, 65535
    return range(low, high + 1)


@functools.cache
def _listenable_ports() -> list[int]:
    ephemeral = _ephemeral_ports()
    return [port for port in range(10_000, 65_536) if port not in ephemeral]


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range: a port the kernel picked for
    bind(0) is one it also gives every outgoing connection's local end, so any test's client
    could take it before the server the port was for binds it ("port in use", once in a few
    hundred runs of a suite that connects thousands of times)."""
    choices = _listenable_ports()
    for _ in range(1000):
        port = random.choice(choices)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port outside the ephemeral range")


@contextlib.contextmanager
def redis_server(
    *extra: str, unix_socket: bool = False, tls: TlsFiles | None = None
) -> Iterator[str]:
    """Yields its URL: redis:// on a free loopback port; with `unix_socket` unix:// on a
    socket in its data directory and no TCP port at all; with `tls` rediss:// (TLS only, and
    a client certificate asked for), the URL carrying the CA and the client's certificate."""
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (.ci/run installs it)")
    with tempfile.TemporaryDirectory(prefix="sched-redis-") as data:
        # A free port can be taken between free_port() and the server's bind (another
        # test's server or client): a server that exits at start is tried on another.
        for attempt in range(START_TRIES):
            port = free_port()
            proc, url = _start_server(binary, data, port, extra, unix_socket, tls)
            try:
                _wait_ready(url, proc)
            except ServerExited:
                if attempt + 1 == START_TRIES:
                    raise
                continue
            break
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


START_TRIES = 5


class ServerExited(RuntimeError):
    """redis-server ended while starting."""


def _start_server(
    binary: str,
    data: str,
    port: int,
    extra: tuple[str, ...],
    unix_socket: bool,
    tls: TlsFiles | None,
) -> tuple[subprocess.Popen[bytes], str]:
    socket_path = os.path.join(data, "redis.sock")
    if unix_socket:
        listen = ["--port", "0", "--unixsocket", socket_path, "--unixsocketperm", "700"]
    elif tls is not None:
        listen = ["--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
        listen += ["--tls-cert-file", tls.server_cert, "--tls-key-file", tls.server_key]
        listen += ["--tls-ca-cert-file", tls.ca]
    else:
        listen = ["--port", str(port), "--bind", "127.0.0.1"]
    proc = subprocess.Popen(
        [binary, *listen, "--save", "", "--appendonly", "no", "--dir", data, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"unix://{socket_path}" if unix_socket else f"redis://127.0.0.1:{port}/0"
    if tls is not None:
        url = f"rediss://127.0.0.1:{port}/0?{tls.client_query()}"
    return proc, url


@dataclass(frozen=True)
class TlsFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str

    def client_query(self) -> str:
        return urlencode(
            {
                "ssl_ca_certs": self.ca,
                "ssl_certfile": self.client_cert,
                "ssl_keyfile": self.client_key,
            }
        )


def make_tls_files(directory: str) -> TlsFiles:
    """Made with the openssl command (on Debian with the openssl package, as redis-server)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    )
    for name, san in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
        )
        extra = ["-extfile", _write(directory, f"{name}.ext", san)] if san else []
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{name}.pem",
            *extra,
        )
    path = functools.partial(os.path.join, directory)
    return TlsFiles(
        path("ca.pem"),
        path("server.pem"),
        path("server.key"),
        path("client.pem"),
        path("client.key"),
    )


def _write(directory: str, name: str, text: str) -> str:
    with open(os.path.join(directory, name), "w") as file:
        file.write(text + "\n")
    return name


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerExited(f"redis-server exited with {proc.returncode}")
        try:
            client.ping()
            return
        except redis.AuthenticationError:
            return  # up, and asking for credentials the URL does not carry
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start within 10 s")


class RestartableRedis:
    """A redis-server that a test can SIGKILL and start again on the same port, from its
    append-only file (fsynced on every write, so a restart loses nothing acknowledged)."""

    def __init__(self, data_dir: str) -> None:
        binary = shutil.which("redis-server") or shutil.which("valkey-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it)")
        self.binary = binary
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.data_dir),
                *("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_ready(self.url, self.proc)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> RestartableRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _server_binary() -> str:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (.ci/run installs it)")
    return binary


def _sentinel_command(conf: str) -> list[str]:
    # redis-sentinel is redis-server under another name: the same program with --sentinel.
    sentinel = shutil.which("redis-sentinel")
    return [sentinel, conf] if sentinel else [_server_binary(), conf, "--sentinel"]


# How long the sentinels wait for a silent primary: short, so the failover tests are quick,
# but not so short that a primary starved of CPU for a moment on this 2-core machine (under
# a test's load) is failed over (1000 ms once was, in a full run).
DOWN_AFTER_MS = 2000


class SentinelGroup:
    """A primary, its replicas and three sentinels watching them as `service`, every one a
    real process on a free loopback port. Sentinel fails over within a few seconds."""

    service = "sched-test"

    def __init__(
        self, data_dir: str, replicas: int, password: str = "", sentinel_password: str = ""
    ) -> None:
        """With `password` the servers ask for it (replicas too, of each other); with
        `sentinel_password` the sentinels ask for theirs."""
        self.data_dir = data_dir
        self.ports = [free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.password = password
        self.sentinel_password = sentinel_password
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        credentials = f":{quote(password, safe='')}@" if password else ""
        query = f"?sentinel_password={quote(sentinel_password, safe='')}"
        self.url = f"redis+sentinel://{credentials}{hosts}/{self.service}/0"
        self.url += query if sentinel_password else ""

    def _client(self, port: int) -> redis.Redis:
        """A client of a sentinel or a server of the group, with its password."""
        password = self.sentinel_password if port in self.sentinel_ports else self.password
        return redis.Redis(port=port, password=password or None, socket_timeout=1)

    def _start_server(self, port: int, *extra: str) -> None:
        data = os.path.join(self.data_dir, str(port))
        os.makedirs(data, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [
                _server_binary(),
                *("--port", str(port), "--bind", "127.0.0.1", "--dir", data),
                *("--save", "", "--appendonly", "no"),
                # Replicas sync straight over the socket, at once.
                *("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"),
                *(
                    ("--requirepass", self.password, "--masterauth", self.password)
                    if self.password
                    else ()
                ),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_ready(f"redis://127.0.0.1:{port}/0", self.procs[port])

    def _start_sentinel(self, port: int) -> None:
        conf = os.path.join(self.data_dir, f"sentinel-{port}.conf")
        with open(conf, "w") as out:
            out.write(
                f"port {port}\nbind 127.0.0.1\ndir {self.data_dir}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.ports[0]} 2\n"
                f"sentinel down-after-milliseconds {self.service} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {self.service} 4000\n"
                f"sentinel parallel-syncs {self.service} 2\n"
            )
            if self.password:
                out.write(f'sentinel auth-pass {self.service} "{self.password}"\n')
            if self.sentinel_password:
                # Asked of clients and of the other sentinels alike.
                out.write(f'requirepass "{self.sentinel_password}"\n')
                out.write(f'sentinel sentinel-pass "{self.sentinel_password}"\n')
        self.procs[port] = subprocess.Popen(
            _sentinel_command(conf), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait_ready(f"redis://127.0.0.1:{port}/0", self.procs[port])

    def start(self) -> None:
        primary, *replicas = self.ports
        self._start_server(primary)
        for port in replicas:
            self._start_server(port, "--replicaof", "127.0.0.1", str(primary))
        for port in self.sentinel_ports:
            self._start_sentinel(port)
        self.wait_settled(primary)

    def wait_settled(self, primary: int, timeout: float = 90.0) -> None:
        """Until every sentinel names `primary`, knows every live replica and the other two
        sentinels (they find each other through the primary, every 2 s). The deadline only
        bounds a failure: on a loaded machine 30 s was once too short."""
        replicas = len([p for p in self.ports if p != primary and self.alive(p)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._settled(port, primary, replicas) for port in self.sentinel_ports):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the sentinels did not settle within {timeout:g} s")

    def _settled(self, sentinel: int, primary: int, replicas: int) -> bool:
        client = self._client(sentinel)
        try:
            state = client.sentinel_master(self.service)  # type: ignore[no-untyped-call]
        except redis.RedisError:
            return False
        finally:
            client.close()
        return bool(
            int(state["port"]) == primary
            and state["num-slaves"] == replicas
            and state["num-other-sentinels"] == 2
            and "s_down" not in state["flags"]
        )

    def primary_port(self) -> int:
        """The port of the primary as the first sentinel that answers names it."""
        for port in self.sentinel_ports:
            client = self._client(port)
            try:
                address = client.sentinel_get_master_addr_by_name(self.service)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                continue
            finally:
                client.close()
            if address:
                return int(address[1])
        raise RuntimeError("no sentinel answers")

    def promoted(self, old: int) -> bool:
        """The failover from `old` is done: the sentinels name another primary, and that node
        says it is one. (Sentinel names the replica it chose as soon as it chose it, before
        the replica is told; an old primary restarted empty before then would be the
        replica's primary again, and empty it.)"""
        port = self.primary_port()
        if port == old:
            return False
        client = self._client(port)
        try:
            role = client.execute_command("ROLE")  # type: ignore[no-untyped-call]
        except redis.RedisError:
            return False
        finally:
            client.close()
        return bool(role[0] in (b"master", "master"))

    def restart(self, port: int) -> None:
        """Start a killed server again, empty, as a replica of the primary now (as an
        orchestrator would; the sentinels would make it one too, but only on their next
        look at it, up to 10 s later)."""
        self._start_server(port, "--replicaof", "127.0.0.1", str(self.primary_port()))

    def alive(self, port: int) -> bool:
        return self.procs[port].poll() is None

    def kill(self, port: int) -> None:
        self.procs[port].kill()
        self.procs[port].wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def sentinel_group(
    replicas: int = 2, password: str = "", sentinel_password: str = ""
) -> Iterator[SentinelGroup]:
    with tempfile.TemporaryDirectory(prefix="sched-sentinel-") as data:
        group = SentinelGroup(data, replicas, password, sentinel_password)
        try:
            group.start()
            yield group
        finally:
            group.stop()


@contextlib.contextmanager
def replicated_pair() -> Iterator[tuple[str, str]]:
    """A primary and one replica of it, in sync: yields (primary URL, replica URL)."""
    with redis_server() as primary:
        port = primary.rsplit(":", 1)[1].split("/")[0]
        with redis_server("--replicaof", "127.0.0.1", port) as replica:
            client = redis.Redis.from_url(replica)
            deadline = time.monotonic() + 10
            while client.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not sync within 10 s")
                time.sleep(0.05)
            client.close()
            yield primary, replica
