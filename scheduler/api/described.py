"""What a route's method takes and answers, as the route table declares it (routes.TABLE,
`Method.body` and `Method.answers`), for its OpenAPI description (openapi.py).

A body or an answer is a type msgspec describes (a Struct, or a list or dict of one): the
description is generated from the very models the endpoints decode and encode, so a field
added to one appears in it with no second edit. Anything else is a media type: plain text,
a stream of Server-Sent Events, an HTML page, a redirect, nothing (204). The helpers below
keep the table's declarations short.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
EVENTS = "text/event-stream; charset=utf-8"  # as Starlette sends it
HTML = "text/html; charset=utf-8"
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True)
class Answer:
    """One status's answer: its body's `model` in `media` (None: no body), and the headers
    worth naming (name -> what it says)."""

    description: str
    model: Any = None
    media: str = JSON
    headers: Mapping[str, str] = field(default_factory=dict)
    # A stream's events that carry a model as their `data`: event name -> model.
    events: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Body:
    """A request's body: its `model` in `media`; `required` False when it may be empty."""

    model: Any
    media: str = JSON
    required: bool = True


def json(model: Any, description: str = "") -> Answer:
    """A JSON answer: `model` encoded (the description defaults to the model's name)."""
    return Answer(description or _named(model), model)


def got(model: Any, description: str = "", status: int = 200) -> dict[int, Answer]:
    """One JSON answer: `model` at `status`."""
    return {status: json(model, description)}


def text(description: str, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(description, str, TEXT, headers or {})


def stream(description: str, **events: Any) -> Answer:
    """A stream of Server-Sent Events (api/follow.py), `events` the models of their `data`
    by event name."""
    return Answer(description, str, EVENTS, events=events)


def page(description: str) -> Answer:
    return Answer(description, str, HTML)


def redirect(description: str) -> Answer:
    """A 303 See Other: the browser goes to `Location` with a GET."""
    return Answer(description, None, "", {"Location": "where the browser goes next"})


def empty(description: str) -> Answer:
    return Answer(description, None, "")


DONE = {204: empty("done")}


def body(model: Any, required: bool = True) -> Body:
    return Body(model, JSON, required)


def form(model: Any) -> Body:
    """A posted HTML form (urlencoded): `model` names its fields."""
    return Body(model, FORM)


def _named(model: Any) -> str:
    """`Job`, `a list of Job`, `Node by id`: how a JSON answer is named by default."""
    args: tuple[Any, ...] = getattr(model, "__args__", ())
    origin = getattr(model, "__origin__", None)
    if origin is list and args:
        return f"a list of {_named(args[0])}"
    if origin is dict and len(args) == 2:
        return f"{_named(args[1])} by id"
    return str(getattr(model, "__name__", model))
