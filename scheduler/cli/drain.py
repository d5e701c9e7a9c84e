"""`scheduler drain NODE` and `scheduler undrain NODE` (docs/GUIDE.md, Drain): POST
/nodes/{id}/drain and /undrain with the key, through the client's `Client`, printing what
moved. HTTP only, as the client."""

from __future__ import annotations

import argparse
from typing import Any, TextIO
from urllib.parse import quote

from scheduler.cli.client import Client, ClientError, _common, _handler, _print_json


def _post(client: Client, node_id: str, action: str) -> dict[str, Any]:
    path = f"/nodes/{quote(node_id, safe='')}/{action}"
    response = client.request("POST", path, headers={"Content-Type": "application/json"})
    if response.status_code >= 400:
        raise ClientError(f"{action} failed {response.status_code}: {response.text.rstrip()}")
    answer = response.json()
    if not isinstance(answer, dict):
        raise ClientError(f"decode: the scheduler did not answer {action} with the node")
    return answer


def drain(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    node = _post(client, args.node_id, "drain")
    if args.json:
        _print_json(node, out)
        return 0
    out.write(
        f"drained {args.node_id} (by {node.get('drained_by', '')}): "
        f"{node.get('moved', 0)} job(s) moved, {node.get('unplaced', 0)} unplaced, "
        f"{node.get('stayed', 0)} stayed\n"
    )
    if node.get("unplaced"):
        out.write(
            "the unplaced jobs wait for a node that fits them (scheduler status shows their "
            "pending_reason); they are placed as soon as one has room\n"
        )
    if node.get("stayed"):
        out.write(
            "the jobs that stayed (bound to an instance there, or past one call's 1000) start "
            "nowhere until the node is undrained (drain again to move the rest)\n"
        )
    return 0


def undrain(args: argparse.Namespace, client: Client, out: TextIO, err: TextIO) -> int:
    node = _post(client, args.node_id, "undrain")
    if args.json:
        _print_json(node, out)
    elif node.get("undrained"):
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
