"""`scheduler namespace quota|list`: the namespaces' quotas (docs/GUIDE.md, Quotas) from the
command line, through scheduler.client's `Client`. `quota NS` shows NS's quota; with limits
it changes those and keeps the others (PATCH: merged on the server, in one step), `--clear`
removes it: an admin's call (TINYAWS_API_KEY, or a named admin key). `list` is any key's (a
key limited to namespaces lists those). `--json` prints the scheduler's JSON."""

from __future__ import annotations

import argparse
from typing import TextIO

from scheduler.cli.client import _common, _handler, print_json
from scheduler.cli.output import table
from scheduler.cli.refusals import ClientError
from scheduler.client import Client
from scheduler.models.quota import Quota

LIMITS = Quota.__struct_fields__  # each an option: --running, --memory-mb, ...


def current_quota(client: Client, namespace: str) -> Quota:
    """The namespace's quota now (none: Quota())."""
    found = [view.quota for view in client.namespaces() if view.name == namespace]
    return found[0] if found else Quota()


def set_quota(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    given = {name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None}
    if args.clear and given:
        raise ClientError("error: --clear removes every limit: give no other")
    if args.clear:
        quota = client.set_quota(args.namespace)
    elif given:
        quota = client.change_quota(args.namespace, **given)
    else:
        quota = current_quota(client, args.namespace)
    if args.json:
        print_json(quota, out)
    else:
        out.write(f"namespace {args.namespace}: quota {quota.said()}\n")
    return 0


def _of(used: int, limit: int) -> str:
    return f"{used}/{limit}" if limit else str(used)


def list_namespaces(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    found = client.namespaces()
    if args.json:
        print_json(found, out)
        return 0
    rows = [("NAMESPACE", "RUNNING", "PENDING", "CPUS", "MEMORY_MB", "WAITING_QUOTA")]
    for view in found:
        quota, use = view.quota, view.use
        rows.append(
            (
                view.name,
                _of(use.running, quota.running),
                _of(use.pending, quota.pending),
                _of(use.cpus, quota.cpus),
                _of(use.memory_mb, quota.memory_mb),
                str(use.over_quota),
            )
        )
    table(rows, out)
    return 0


def _limit(parser: argparse.ArgumentParser, name: str, what: str) -> None:
    parser.add_argument(
        f"--{name.replace('_', '-')}",
        dest=name,
        type=int,
        metavar="N",
        help=f"at most N {what} (0: no limit; left out: as it is)",
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("namespace", help="namespaces' quotas: scheduler namespace quota|list")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="quota, list")

    a = actions.add_parser(
        "quota",
        help="show or change a namespace's quota: scheduler namespace quota NS [--running N] "
        "[--cpus N] ... (the limits given change, the others stay; --clear: no quota)",
    )
    a.add_argument("namespace", metavar="NS", help="the namespace (`default`: the default's)")
    _limit(a, "running", "jobs running (or cancelling) at once")
    _limit(a, "pending", "jobs pending, delayed or waiting (a submit past it is refused)")
    _limit(a, "cpus", "cpus asked by its running jobs")
    _limit(a, "memory_mb", "MB of memory asked by its running jobs")
    a.add_argument("--clear", action="store_true", help="remove the quota (every limit)")
    _common(a, poll=False)
    a.set_defaults(handler=_handler(set_quota))

    a = actions.add_parser("list", help="the namespaces, each with its use and quota (used/limit)")
    _common(a, poll=False)
    a.set_defaults(handler=_handler(list_namespaces))
