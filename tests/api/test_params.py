"""The one parser of a request's parameters (scheduler/api/params.py): what it reads from a
raw query, what counts as repeated, what a handler may read, and that nothing else in the API
reads a query. The attacks over HTTP: test_security_params.py."""

from __future__ import annotations

import random
import re
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from scheduler.api.params import Query, UndeclaredParameter, parse_query, repeated
from scheduler.api.routes import TABLE

API = Path(__file__).resolve().parents[2] / "scheduler" / "api"

# raw query -> the parameters (each name's values in the query's order)
PARSED: list[tuple[bytes, dict[str, list[str]]]] = [
    (b"", {}),
    (b"node_id=n1&status=pending", {"node_id": ["n1"], "status": ["pending"]}),
    (b"node_id=n1&&status=pending&", {"node_id": ["n1"], "status": ["pending"]}),
    (b"&&&", {}),
    (b"node_id=&status", {"node_id": [""], "status": [""]}),  # empty values are kept...
    (b"a=1&a=2&a=&b", {"a": ["1", "2", ""], "b": [""]}),  # ...and counted: `a` is repeated
    (b"node_id=%6e1", {"node_id": ["n1"]}),  # a value decoded
    (b"node%5Fid=n1&%6eode_id=n2", {"node_id": ["n1", "n2"]}),  # names too: one name, twice
    (b"x=%2541", {"x": ["%41"]}),  # decoded exactly once
    (b"node_id=n+1", {"node_id": ["n 1"]}),  # "+" is a space, as Go's ParseQuery
    (b"node_id=n%2B1", {"node_id": ["n+1"]}),
    (b"n=%C3%A9", {"n": ["\u00e9"]}),  # escapes are UTF-8
    (b"n=\xc3\xa9", {"n": ["\u00c3\u00a9"]}),  # raw bytes latin-1, as Starlette reads them
    (b"n=%zz&m=%", {"n": ["%zz"], "m": ["%"]}),  # a bad escape stays as sent
    (b"a;b=1", {"a;b": ["1"]}),  # only "&" separates
    (b"a=1=2", {"a": ["1=2"]}),
    (b"=x", {"": ["x"]}),
    (b"node_id=n1%00", {"node_id": ["n1\x00"]}),
]


@pytest.mark.parametrize(("query", "expected"), PARSED, ids=[repr(q) for q, _ in PARSED])
def test_the_parser_reads_a_query_once(query: bytes, expected: dict[str, list[str]]) -> None:
    assert parse_query(query) == expected


def test_the_parser_agrees_with_parse_qs_on_random_queries() -> None:
    """The plain queries' fast path (no "%" or "+") and parse_qs read alike."""
    rng = random.Random(13)
    for _ in range(2000):
        query = "".join(rng.choice("ab=&;%+2 é") for _ in range(rng.randrange(12)))
        expected = parse_qs(query, keep_blank_values=True)
        assert parse_query(query.encode("latin-1")) == expected, query


@pytest.mark.parametrize(
    ("query", "reads", "expected"),
    [
        (b"node_id=n1&status=pending", {"node_id", "status"}, ""),
        (b"node_id=n1&node_id=", {"node_id", "status"}, "node_id"),
        (b"node_id=&node_id=", {"node_id"}, "node_id"),
        (b"node_id=n1&node%5Fid=n2", {"node_id"}, "node_id"),
        (b"status=a&node_id=n1&node_id=n2&status=b", {"node_id", "status"}, "status"),
        (b"x=1&x=2&node_id=n1", {"node_id"}, ""),  # unknown: ignored, as old clients send
        (b"x=1&x=2", set(), ""),
    ],
)
def test_repeated_names_the_first_parameter_read_given_twice(
    query: bytes, reads: set[str], expected: str
) -> None:
    assert repeated(parse_query(query), reads) == expected


def test_a_handler_reads_only_what_its_route_declares() -> None:
    query = Query(parse_query(b"node_id=n1&wait=&role=x"), frozenset({"node_id", "wait"}))
    assert (query.get("node_id"), query.given("node_id")) == ("n1", True)
    assert (query.get("wait"), query.given("wait")) == ("", True)  # empty: as absent to get
    with pytest.raises(UndeclaredParameter):
        query.get("role")  # sent, but not the route's: reading it is a bug
    with pytest.raises(UndeclaredParameter):
        query.given("status")


def test_every_declared_name_is_a_plain_parameter_name() -> None:
    """What Method.reads declares is compared with decoded names: no "%", "+", "&" or "="."""
    for entry in TABLE.entries:
        for method in entry.methods.values():
            for name in method.reads:
                assert re.fullmatch(r"[a-z_]+", name), (entry.path, name)


# Nothing in the API reads a query but the parser: a second reading (Starlette's
# request.query_params gives the last value, the door read the first) was the leak.
READERS = re.compile(r"query_params|parse_qsl?\b|query_string|\.query\b")
ALLOWED = {
    "params.py": {"parse_qs"},  # the parser itself
    "http.py": {"query_string"},  # the door hands the raw query to the parser
    "server.py": {".query"},  # the lane's protocol hands the raw query to Lane.route
    "metrics.py": {"query_string"},  # the label's raw query to the parser (request_label)
    "ui_forms.py": {"parse_qs"},  # a posted form's body, not the query
}


def test_nothing_else_in_the_api_reads_a_query() -> None:
    found = {
        (path.name, match)
        for path in sorted(API.glob("*.py"))
        for match in READERS.findall(path.read_text())
        if match not in ALLOWED.get(path.name, set())
    }
    assert found == set()
