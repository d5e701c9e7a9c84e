"""A request's query parameters, read once (issue 22): one parser (`parse_query`) turns the raw
query into the request's parameters, and the key rule (http.BearerAuth, through
RouteTable.access), every handler and the hot lane read that one result. Two readings of one
query were a leak: the door read the first `node_id`, the handler the last, so
`GET /services?node_id=n1&node_id=` passed the door as n1's list and was answered with every
node's services.

On the ASGI path the door (http.ParamsDoor) parses the query once, refuses a parameter the
route reads given more than once (400, before the key rule and any Redis work), and leaves
the result in the scope (`PARAMS`) as a `Query`; handlers read it with `param(request, name)`.
Why the scope and not a cached function: the door must parse before the key rule anyway (the
rule reads the query), and a per-request value in the scope is the ASGI way to hand it on
(as Starlette's AuthenticationMiddleware hands on `scope["user"]`); a cache keyed by the raw
query would be shared across requests and bounded by guesswork. The hot lane parses with the
same function (routing.Hot.takes) and hands any query with a repeated name to ASGI, whose door
answers it.

The reading is Go's `url.ParseQuery` with `Query().Get`, as the original's: pairs split on
`&`, names and values percent-decoded exactly once (`+` a space), an empty value as absent,
unknown parameters ignored (old clients may send extras). What Go does not have: a parameter
that a route reads, given more than once, is a 400 naming it. Each route declares what it
reads (routing.Method.reads, in routes.TABLE), and `Query.get` refuses a name its route did
not declare, so the check covers every parameter a handler reads.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request

Params = dict[str, list[str]]
PARAMS = "tinyaws.params"  # the scope's key of the request's Query (set by http.ParamsDoor)


def parse_query(query: bytes) -> Params:
    """The request's parameters from its raw query: each name with its values in the query's
    order, as parse_qs(keep_blank_values=True) reads the query decoded as latin-1 (as
    Starlette decodes it; percent-escapes are UTF-8). A plain query (no "%" or "+", as the
    agents send) is split without parse_qs, whose cost was a tenth of a poll's Python time:
    there is nothing to decode."""
    if not query:
        return {}
    text = query.decode("latin-1")
    if "%" in text or "+" in text:
        return parse_qs(text, keep_blank_values=True)
    params: Params = {}
    for pair in text.split("&"):
        if pair:
            name, _, value = pair.partition("=")
            params.setdefault(name, []).append(value)
    return params


def repeated(params: Params, reads: Collection[str]) -> str:
    """The first parameter of `reads` given more than once ("" if none): an empty value
    counts, so `node_id=n1&node_id=` is refused, not read as n1 by one reader and as no node
    by another."""
    for name, values in params.items():
        if len(values) > 1 and name in reads:
            return name
    return ""


def given_twice(name: str) -> str:
    """The 400's message (http.ParamsDoor)."""
    return f'parameter "{name}" given more than once'


class UndeclaredParameter(LookupError):
    """A handler read a parameter its route does not declare: a bug (a 500), which the
    route table's tests find on every route."""


@dataclass(frozen=True, slots=True)
class Query:
    """A request's parameters as its route reads them: `reads` is what the route declares
    (routing.Method.reads), each a single value (a repeated one was refused at the door)."""

    values: Params
    reads: Collection[str] = ()
    # The path the route table matches (routing.route_path: uvicorn's root path taken off),
    # which every door after ParamsDoor decides on.
    path: str = ""

    def get(self, name: str) -> str:
        """The parameter's value, "" without one (Go's Query().Get: empty is as absent)."""
        values = self.values.get(self._declared(name))
        return values[0] if values else ""

    def given(self, name: str) -> bool:
        """Whether the query names the parameter, even with an empty value (`wait=` is a
        bad wait, not no wait)."""
        return self._declared(name) in self.values

    def _declared(self, name: str) -> str:
        if name not in self.reads:
            raise UndeclaredParameter(f"{name!r} is not among the route's reads (routes.TABLE)")
        return name


def query_of(request: Request) -> Query:
    """The request's Query, as the door (http.ParamsDoor) left it."""
    found: Query = request.scope[PARAMS]
    return found


def param(request: Request, name: str) -> str:
    """A parameter the request's route reads: its value, "" without one."""
    return query_of(request).get(name)
