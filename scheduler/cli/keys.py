"""`scheduler key add|list|revoke|audit`: named keys (docs/SECURITY.md, Named keys) from the command
line, through scheduler.client's `Client`; each an admin's call (TINYAWS_API_KEY, or a named
admin key). `add` prints the key alone on stdout, so `$(scheduler key add ...)` takes it: it
is shown this once, and the scheduler keeps only its hash; how to use it goes to stderr.
`list` is a table that never shows a key; `--json` prints the scheduler's JSON."""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from scheduler.cli.client import _common, _handler, print_json
from scheduler.cli.output import table
from scheduler.cli.refusals import ClientError
from scheduler.client import Client, Unreachable
from scheduler.models.access_key import AUDIT_PAGE, ROLES


def add(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    try:
        made = client.add_key(args.name, args.role, args.namespace)
    except Unreachable as exc:
        if not exc.maybe_done:
            raise
        # Never sent again (client/keys.py): made or not, its key is gone with the answer.
        raise ClientError(
            f"error: {exc}\nhint: `scheduler key list` shows whether {args.name} was made; "
            f"if it was, its key was lost with the answer: revoke it and add it again"
        ) from None
    if args.json:
        print_json(made, out)
    else:
        out.write(f"{made.key}\n")
    out.flush()
    err.write(
        f"made key {made.name} ({made.role.value}{_limited(made.namespaces)}): it is shown "
        "this once and never again, keep it now\n"
        "use it as TINYAWS_API_KEY=<key> (the CLI, scheduler.client) or as the header "
        "`Authorization: Bearer <key>`\n"
    )
    return 0


def _limited(namespaces: list[str]) -> str:
    return f", namespaces {', '.join(namespaces)}" if namespaces else ""


def created(at: float) -> str:
    """When a key was made, as the API writes its timestamps: `2026-12-06T10:15:03Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def list_keys(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    found = client.named_keys()
    if args.json:
        print_json(found, out)
        return 0
    rows = [("NAME", "ROLE", "NAMESPACES", "CREATED", "CREATED BY")]
    rows += [
        (k.name, k.role.value, ",".join(k.namespaces) or "*", created(k.created_at), k.created_by)
        for k in found
    ]
    table(rows, out)
    return 0


def revoke(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    client.revoke_key(args.name)
    out.write(
        f"revoked key {args.name}: it stops working (every API replica refuses it within "
        "KEYRING_REFRESH_SECS, 1 s by default)\n"
    )
    return 0


def audit(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    found = client.audit(args.limit)
    if args.json:
        print_json(found, out)
        return 0
    rows = [("AT", "BY", "ACTION", "NAME", "ROLE")]
    rows += [(created(e.at), e.by, e.action, e.name, e.role) for e in found]
    table(rows, out)
    return 0


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the key's name: 1 to 64 of a-z 0-9 . _ -")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("key", help="named API keys with roles: scheduler key add|list|revoke")
    actions = p.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="add, list, revoke, audit"
    )

    a = actions.add_parser(
        "add", help="make a named key: scheduler key add NAME --role ROLE (shown once)"
    )
    _name(a)
    a.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="what the key may do, each role what the one before it may and more: reader "
        "(reads), submitter (jobs), operator (nodes, schedules), admin (keys)",
    )
    a.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="limit the key to this namespace's jobs and schedules (again for more; the "
        "first is where its jobs go when they name none); without it, every namespace",
    )
    _common(a, poll=False)
    a.set_defaults(handler=_handler(add))

    a = actions.add_parser("list", help="every named key: name, role, created, created by")
    _common(a, poll=False)
    a.set_defaults(handler=_handler(list_keys))

    a = actions.add_parser("audit", help="the newest admin calls: who made or revoked which key")
    a.add_argument(
        "--limit",
        type=int,
        default=AUDIT_PAGE,
        help=f"at most this many, newest first (default {AUDIT_PAGE})",
    )
    _common(a, poll=False)
    a.set_defaults(handler=_handler(audit))

    a = actions.add_parser("revoke", help="the key stops working: scheduler key revoke NAME")
    _name(a)
    _common(a, poll=False, json_option=False)
    a.set_defaults(handler=_handler(revoke))
