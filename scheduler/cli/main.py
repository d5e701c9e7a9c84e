"""`scheduler` command line: one sub-command per process kind and a few operator tools."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import logging.config
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.config import ConfigError, Settings
from scheduler.config.secrets import check_secrets

Handler = Callable[[argparse.Namespace, Settings], int]
GRACEFUL_SHUTDOWN_SECS = 5

# One format for every process (serve, worker, agent, up): timestamp, level, logger, message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def log_config(level: str = "INFO") -> dict[str, Any]:
    """The logging dictConfig of every command; `serve` gives it to uvicorn too (its own
    loggers, and those of each --workers process, then print in this format on stderr)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": {"format": LOG_FORMAT}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level, "handlers": ["default"]},
        # uvicorn's records reach the root's handler; rq's use it when the root has one.
        # httpx logs every request at INFO: the registry, SNS and the agent's polls would
        # be a line each (its WARNINGs and ours say what fails).
        "loggers": {
            **{
                name: {"handlers": [], "propagate": True}
                for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
            },
            "httpx": {"level": "WARNING"},
        },
    }


def setup_logging() -> None:
    """As logging.basicConfig: nothing when the root logger already has a handler (a
    program, or pytest, that calls main() has set up its own)."""
    if not logging.getLogger().handlers:
        logging.config.dictConfig(log_config())


def hot_lane_line(http: str, access_log: bool) -> str:
    """Which path serves the hot calls, and why: logged once at start."""
    from scheduler.api.server import lane_off_because

    # serve sets neither a root path nor a concurrency limit.
    off = f"--http {http}" if http != "lane" else lane_off_because(access_log, "", None)
    if off:
        return f"hot lane off: {off}; every request goes through Starlette"
    return (
        "hot lane on: GET /jobs/{id}, the poll, POST /jobs and PATCH /jobs/{id} are served "
        "by the lane, the rest through Starlette"
    )


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from scheduler.api.app import create_app
    from scheduler.api.boundary import with_listen_address
    from scheduler.cli.lifeline import SERVE_PID_ENV, end_within, parent_death_signal
    from scheduler.cli.serve_checks import Exposure, refusal, warnings
    from scheduler.snapshot.layout import check_layout_if_reachable
    from scheduler.snapshot.restore import restore_at_process_start
    from scheduler.store.errors import LayoutChanged

    if parent_death_signal():
        # Started to end with its parent (`up`'s child): within a bound, its API processes
        # too, which uvicorn's supervisor would wait for without end (lifeline.py).
        end_within(os.getppid())
    log = logging.getLogger("scheduler.api")
    seen = Exposure.of(args.host, settings, args.insecure_no_key, args.insecure_open_agents)
    refused = refusal(seen)
    if refused:
        print(f"scheduler serve: {refused}", file=sys.stderr)
        return 2
    for line in warnings(seen):
        log.warning(line)
    # The Host names it answers (api/boundary.py), its listen address among them; in the
    # environment too, which each --workers process reads its settings from.
    allowed = with_listen_address(settings.allowed_hosts, args.host)
    os.environ["ALLOWED_HOSTS"] = allowed
    settings = dataclasses.replace(settings, allowed_hosts=allowed)
    log.info(hot_lane_line(args.http, args.access_log))

    options = {
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "access_log": args.access_log,
        "log_config": log_config(),
        # On SIGTERM uvicorn waits for running requests; a long-poll may run for up to a
        # minute, so requests still running after this are cut (clients poll again).
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECS,
        # The client's address is api/client_address.py's, from the socket's peer and
        # TRUSTED_PROXIES, on the lane and through ASGI alike: uvicorn's proxy headers (on by
        # default, trusting 127.0.0.1) would rewrite it for ASGI requests only.
        "proxy_headers": False,
    }
    options["http"] = HTTP_PROTOCOLS[args.http]
    # Before listening (and with signals still default, so SIGTERM ends a wait): the restore
    # question, and an upgrade from the layout before the hash tag, which waits while
    # processes of the old version run. Each app's lifespan then finds it answered.
    # The shard count first: a restore into another count's shards would scatter copies.
    try:
        check_layout_if_reachable(settings, log)
    except LayoutChanged as exc:
        print(f"scheduler serve: {exc}", file=sys.stderr)
        return 2
    for shard in range(settings.shards):
        restore_at_process_start(settings.for_shard(shard))
    if args.workers == 1:
        uvicorn.run(create_app(settings), **options)
    else:
        # Several processes on one port: uvicorn's supervisor starts each from the factory,
        # which reads the same environment these settings came from, in a process that ends
        # with this one (lifeline.py).
        os.environ[SERVE_PID_ENV] = str(os.getpid())
        app = "scheduler.cli.lifeline:serve_worker_app"
        uvicorn.run(app, factory=True, workers=args.workers, **options)
    return 0


def default_workers() -> int:
    """One API process per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _workers(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _default_port() -> int:
    raw = os.environ.get("PORT", "")
    try:
        return int(raw) if raw else 9001
    except ValueError:
        raise ConfigError(f"PORT: {raw!r} is not a valid int") from None


# uvicorn's HTTP implementations by `serve --http` (scheduler/api/server.py): lane is
# one-write serving the hot calls without ASGI (api/lane.py); one-write is httptools writing
# each response in one syscall instead of two. Each with the head deadline (api/deadline.py):
# uvicorn's own protocols hold a connection that never sends a whole head for ever.
HTTP_PROTOCOLS = {
    "lane": "scheduler.api.server:LaneProtocol",
    "one-write": "scheduler.api.server:OneWriteProtocol",
    "httptools": "scheduler.api.deadline:HeadDeadline",
    "h11": "scheduler.api.deadline:H11HeadDeadline",
}


def add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API (default port 9001, or $PORT)")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="listen address (default 127.0.0.1; another needs TINYAWS_API_KEY or "
        "--insecure-no-key)",
    )
    serve.add_argument(
        "--insecure-no-key",
        action="store_true",
        help="listen beyond loopback without TINYAWS_API_KEY: anyone who reaches it runs "
        "commands (also SERVE_INSECURE_NO_KEY=1)",
    )
    serve.add_argument(
        "--insecure-open-agents",
        action="store_true",
        help="with AGENT_AUTH=open, serve the agent calls beyond loopback to any network (no "
        "AGENT_NETWORKS): anyone who reaches it takes jobs and their env_vars (also "
        "SERVE_INSECURE_OPEN_AGENTS=1)",
    )
    serve.add_argument("--port", type=int, default=None, help="listen port (default $PORT or 9001)")
    serve.add_argument(
        "--log-level", default="info", help="uvicorn's log level (default info; up: warning)"
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument(
        "--workers",
        type=_workers,
        default=default_workers(),
        help="API processes sharing the port (default: one per core)",
    )
    serve.add_argument(
        "--http",
        choices=sorted(HTTP_PROTOCOLS),
        default="lane",
        help="uvicorn's HTTP implementation (default lane: httptools, the hot calls served "
        "without ASGI, each response in one write)",
    )
    serve.set_defaults(handler=_serve)


# Each sub-command lives in its own module, which exposes `add_parser(sub)`; the parser's
# defaults carry `handler(args, settings) -> exit code`.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "scheduler.cli.agent",
    "scheduler.cli.snapshot",
    "scheduler.cli.client",
    "scheduler.cli.cancel",
    "scheduler.cli.listing",
    "scheduler.cli.retry",
    "scheduler.cli.drain",
    "scheduler.cli.schedules",
    "scheduler.cli.keys",
    "scheduler.cli.quotas",
    "scheduler.cli.up",
    "scheduler.cli.worker",
    "scheduler.cli.watch",
)


# Which module a sub-command lives in: `scheduler submit` imports the client only, not the
# agent, the snapshot or redis (a third of the CLI's start-up, measured with -X importtime).
COMMAND_MODULES = {
    "agent": "scheduler.cli.agent",
    "snapshot": "scheduler.cli.snapshot",
    "restore": "scheduler.cli.snapshot",
    "submit": "scheduler.cli.client",
    "status": "scheduler.cli.client",
    "list": "scheduler.cli.listing",
    "cancel": "scheduler.cli.cancel",
    "nodes": "scheduler.cli.listing",
    "retry": "scheduler.cli.retry",
    "drain": "scheduler.cli.drain",
    "undrain": "scheduler.cli.drain",
    "schedule": "scheduler.cli.schedules",
    "key": "scheduler.cli.keys",
    "namespace": "scheduler.cli.quotas",
    "up": "scheduler.cli.up",
    "worker": "scheduler.cli.worker",
    "logs": "scheduler.cli.watch",
    "events": "scheduler.cli.watch",
}


# The commands whose processes hold the door's secrets: a key or join key too weak to be
# hopeless to guess stops them at start (config/secrets.py). The client sends any key it has.
KEY_HOLDERS = frozenset({"serve", "worker", "up"})


# The command-line client's modules: they send the key.
CLIENT_MODULES = frozenset(
    {
        "scheduler.cli.client",
        "scheduler.cli.cancel",
        "scheduler.cli.listing",
        "scheduler.cli.retry",
        "scheduler.cli.drain",
        "scheduler.cli.schedules",
        "scheduler.cli.keys",
        "scheduler.cli.quotas",
        "scheduler.cli.watch",
    }
)


def add_help(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "help", help="show this help, or a command's: scheduler help list, help schedule add"
    )
    p.add_argument("topic", nargs="*", metavar="COMMAND", help="a command's name (and action)")
    p.set_defaults(handler=None)


def _sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(args: argparse.Namespace) -> int:
    """`scheduler help [COMMAND [ACTION]]`: the parser's help, as `scheduler COMMAND [ACTION]
    --help`."""
    topic: list[str] = args.topic
    parser = build_parser(topic[0] if topic else "")
    for depth, name in enumerate(topic):
        choices = _sub_commands(parser)
        if name not in choices:
            known = " ".join(topic[:depth])
            where = f"`scheduler help {known}`" if known else "`scheduler help`"
            print(
                f"scheduler help: no command {' '.join(topic[: depth + 1])!r}; {where} lists them",
                file=sys.stderr,
            )
            return 2
        parser = choices[name]
    parser.print_help()
    return 0


# The installed distribution, whose version `scheduler --version` prints.
DISTRIBUTION = "tinyaws-scheduler"


def version() -> str:
    """The installed package's version (pyproject's), or why there is none."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"unknown ({DISTRIBUTION} is not installed)"


def build_parser(command: str = "") -> argparse.ArgumentParser:
    """The parser of every sub-command, or of `command` alone (and serve, help) when it is
    one."""
    parser = argparse.ArgumentParser(prog="scheduler", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="one of these; `scheduler help COMMAND` shows its options",
    )
    add_serve(sub)
    add_help(sub)
    only = COMMAND_MODULES.get(command)
    for name in SUBCOMMAND_MODULES:
        if only is None or name == only:
            importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else "")
    args, extra = parser.parse_known_args(argv)
    if extra:  # as parse_args, but a command typed unquoted is told how to quote it
        from scheduler.cli.job_options import unrecognized_hint

        message = f"unrecognized arguments: {' '.join(extra)}"
        hint = unrecognized_hint(args, extra)
        if hint:
            args.usage_error(message + hint)  # the sub-command's usage, exit 2
        parser.error(message)
    if args.command == "help":
        return _help(args)
    try:
        settings = Settings.from_env()
        if args.command in KEY_HOLDERS:
            check_secrets(settings)
        if getattr(args, "port", 0) is None:
            args.port = _default_port()
    except ConfigError as exc:
        print(f"scheduler: configuration error: {exc}", file=sys.stderr)
        return 2
    # argv[0], not args.command: `submit`'s own argument is named command.
    if argv and COMMAND_MODULES.get(argv[0], "") in CLIENT_MODULES:
        from scheduler.client.session import with_session_key

        # The key of a `scheduler up` session at that address, when TINYAWS_API_KEY is unset.
        url = getattr(args, "scheduler_url", "") or settings.scheduler_url
        settings = with_session_key(settings, url)
    handler: Handler = args.handler
    return handler(args, settings)


if __name__ == "__main__":
    sys.exit(main())
