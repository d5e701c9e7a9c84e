"""`scheduler drain NODE` and `scheduler undrain NODE` (docs/GUIDE.md, Drain), through
scheduler.client's `Client`, printing what moved."""

from __future__ import annotations

import argparse
from typing import TextIO

from scheduler.cli.client import _common, _handler, print_json
from scheduler.client import Client


def drain(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    node = client.drain(args.node_id)
    if args.json:
        print_json(node, out)
        return 0
    out.write(
        f"drained {args.node_id} (by {node.drained_by or ''}): "
        f"{node.moved} job(s) moved, {node.unplaced} unplaced, {node.stayed} stayed\n"
    )
    if node.unplaced:
        out.write(
            "the unplaced jobs wait for a node that fits them (scheduler status shows their "
            "pending_reason); they are placed as soon as one has room\n"
        )
    if node.stayed:
        out.write(
            "the jobs that stayed (bound to an instance there, or past one call's 1000) start "
            "nowhere until the node is undrained (drain again to move the rest)\n"
        )
    return 0


def undrain(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    node = client.undrain(args.node_id)
    if args.json:
        print_json(node, out)
    elif node.undrained:
        out.write(f"undrained {args.node_id}: it takes new jobs again\n")
    else:
        out.write(f"{args.node_id} was not drained\n")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("drain", help="no new job goes to NODE; its queued jobs move to other nodes")
    p.add_argument("node_id", metavar="NODE", help="the node's id")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(drain))

    p = sub.add_parser("undrain", help="NODE takes new jobs again")
    p.add_argument("node_id", metavar="NODE", help="the node's id")
    _common(p, poll=False)
    p.set_defaults(handler=_handler(undrain))
