"""GET /openapi.json: an OpenAPI 3.1 description of every route of the route table
(routes.TABLE), generated from it and from the msgspec models its methods declare they take
and answer (routing.Method: `reads`, `body`, `answers`; described.py), so a new field or
route appears in it with no second edit. The schemas are msgspec's JSON Schema (2020-12,
OpenAPI 3.1's dialect), as `msgspec.json.schema_components` writes them; the query
parameters' meanings are openapi_params.py's.

Every entry is described, served or not: those served only with the built-in registry
(REGISTRY_URL unset) or with METRICS=on say so. Who may call each method is its Access:
`security` names the key (bearer), a node's token, or the web UI's session cookie; `x-role`
the least role a named key needs (Method.role, docs/SECURITY.md). The
document is built and encoded once per process, on first request.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from scheduler.api.described import HTML, JSON, TEXT, Answer, Body
from scheduler.api.openapi_params import PATH, QUERY, Param
from scheduler.api.routing import UI_PREFIX, Access, Entry, Method, RouteTable, Served
from scheduler.api.ui_session import UI_COOKIE

OPENAPI = "3.1.0"
REF = "#/components/schemas/{name}"
PACKAGE = "tinyaws-scheduler"
Schemas = dict[Any, dict[str, Any]]  # a model -> its schema (a $ref for a Struct)

SECURITY_SCHEMES = {
    "key": {
        "type": "http",
        "scheme": "bearer",
        "description": "TINYAWS_API_KEY. With no key set, nothing is asked for.",
    },
    "nodeToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A node's token (POST /nodes/register's `token`), with AGENT_AUTH=token.",
    },
    "uiSession": {
        "type": "apiKey",
        "in": "cookie",
        "name": UI_COOKIE,
        "description": "The web UI's session, set by POST /ui/login.",
    },
}
Requirement = dict[str, list[str]]
KEY: Requirement = {"key": []}
TOKEN: Requirement = {"nodeToken": []}
OPEN: Requirement = {}
# Who may call, as OpenAPI says it: any one of the list (`{}`: nothing asked).
SECURITY: dict[Access, list[Requirement]] = {
    Access.ANYONE: [],
    Access.KEY: [KEY],
    Access.AGENT: [OPEN, TOKEN, KEY],
    Access.POLL: [KEY, OPEN, TOKEN],
    Access.OWN_SERVICES: [KEY, OPEN, TOKEN],
    Access.UI: [{"uiSession": []}],
}
AGENTS = "open with AGENT_AUTH=open (the default), else the node's token or the key"
ACCESS_NOTES = {
    Access.ANYONE: "Anyone may call it.",
    Access.KEY: "Needs the key (when one is set).",
    Access.AGENT: f"An agent's call: {AGENTS}.",
    Access.POLL: f"The agent's poll (node_id and status=pending, no paging) is an agent's "
    f"call, {AGENTS}; any other listing needs the key.",
    Access.OWN_SERVICES: f"With node_id, an agent's own list: {AGENTS}; else the key's.",
    Access.UI: "The web UI's: needs the login's session cookie (with no key set, none); a "
    "browser without one is sent to the login form.",
}
# An AGENT call no one else may make, whatever AGENT_AUTH (Method.anyone_in_open_mode).
NODE_OR_KEY = "The key, or the node's own token for its own node, whatever AGENT_AUTH."
SERVED_NOTES: dict[Served, str] = {
    "always": "",
    "registry": " Served with the built-in registry only (REGISTRY_URL unset).",
    "metrics": " Served with METRICS=on only.",
}
ERROR = Answer(
    "an error, as plain text (a body that does not decode: its field and rule in "
    "X-Error-Detail too)",
    str,
    TEXT,
    {"X-Error-Detail": "what a body that did not decode got wrong"},
)
UI_ERROR = Answer("an error, as a page of the UI", str, HTML)
REFUSED = {
    401: Answer("no key, or a wrong one", str, TEXT),
    429: Answer("too many wrong keys from this address", str, TEXT, {"Retry-After": "seconds"}),
}
TO_LOGIN = {303: Answer("no live session: to the login form", headers={"Location": "/ui/login"})}
INFO = (
    "The scheduler's HTTP API, generated from its route table and models. Errors are plain "
    "text. With TINYAWS_API_KEY set, every call needs it as a bearer token but those the "
    "route says otherwise (docs/SECURITY.md)."
)


def version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:  # run from a source tree not installed
        return "0+unknown"


def document(table: RouteTable, root_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 description of every entry of `table`, served under `root_path`
    (uvicorn's --root-path, behind a proxy that strips it: the paths a client calls start
    with it)."""
    schemas, components = _schemas(table)
    paths: dict[str, dict[str, Any]] = {}
    for entry in table.entries:
        item = paths.setdefault(entry.route.path_format, {})
        for name, method in entry.methods.items():
            item[name.lower()] = operation(entry, method, schemas)
    return {
        "openapi": OPENAPI,
        "info": {"title": "tiny-aws scheduler", "version": version(), "description": INFO},
        "servers": [{"url": root_path or "/"}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": SECURITY_SCHEMES},
        "security": [KEY],
    }


@functools.cache
def encoded(table: RouteTable, root_path: str) -> bytes:
    """`document` as JSON, built once per table and root path (neither changes: the root path
    is the server's setting, never a request's)."""
    return msgspec.json.encode(document(table, root_path)) + b"\n"


async def openapi_json(request: Request) -> Response:
    # routes.TABLE names this endpoint: imported when first called, not at import.
    from scheduler.api.routes import TABLE

    return Response(encoded(TABLE, request.scope.get("root_path", "")), media_type=JSON)


def _models(table: RouteTable) -> Iterator[Any]:
    """Every model a method takes or answers (a stream's events' too)."""
    for entry in table.entries:
        for method in entry.methods.values():
            if method.body is not None:
                yield method.body.model
            for answer in _answers(method):
                yield from (answer.model, *answer.events.values())


def _schemas(table: RouteTable) -> tuple[Schemas, dict[str, Any]]:
    """Each model's schema, and the components they refer to, from msgspec."""
    models = list(dict.fromkeys(m for m in (str, *_models(table)) if m is not None))
    found, components = msgspec.json.schema_components(models, ref_template=REF)
    return dict(zip(models, found, strict=True)), components


def _answers(method: Method) -> Iterator[Answer]:
    for answer in method.answers.values():
        yield from answer if isinstance(answer, tuple) else (answer,)


def operation(entry: Entry, method: Method, schemas: Schemas) -> dict[str, Any]:
    endpoint = method.endpoint
    found: dict[str, Any] = {
        "operationId": f"{endpoint.__module__.rsplit('.', 1)[-1]}.{endpoint.__name__}",
        "summary": method.summary,
        "description": _access_note(method) + SERVED_NOTES[entry.served],
        "tags": [_tag(method)],
        "parameters": parameters(entry, method),
        "responses": responses(entry, method, schemas),
        "security": SECURITY[method.access] if method.anyone_in_open_mode else [TOKEN, KEY],
    }
    if method.body is not None:
        found["requestBody"] = request_body(method.body, schemas)
    if method.access is not Access.ANYONE:
        found["x-role"] = method.role.value
    return found


def _access_note(method: Method) -> str:
    said = ACCESS_NOTES[method.access] if method.anyone_in_open_mode else NODE_OR_KEY
    if method.access is Access.ANYONE:
        return said
    return f"{said} A named key needs the role {method.role.value} or above (x-role)."


def parameters(entry: Entry, method: Method) -> list[dict[str, Any]]:
    """The path's parameters, then the query's (`Method.reads`), by name."""
    path = [_parameter(name, "path", PATH[name]) for name in entry.route.param_convertors]
    return path + [_parameter(name, "query", QUERY[name]) for name in sorted(method.reads)]


def _parameter(name: str, where: str, param: Param) -> dict[str, Any]:
    schema, description = param
    found = {"name": name, "in": where, "description": description, "schema": schema}
    return found | {"required": True} if where == "path" else found


def request_body(body: Body, schemas: Schemas) -> dict[str, Any]:
    return {"required": body.required, "content": {body.media: {"schema": schemas[body.model]}}}


def responses(entry: Entry, method: Method, schemas: Schemas) -> dict[str, Any]:
    """The method's answers by status; then what any method of its Access may answer (a
    refused key, the UI's way to its login), and `default`, any error (under /ui a page of
    the UI, whoever refused: ui_errors.py)."""
    found: dict[str, Any] = {}
    for status, answer in method.answers.items():
        found[str(status)] = response(answer if isinstance(answer, tuple) else (answer,), schemas)
    ui = method.access is Access.UI
    refused = {} if method.access is Access.ANYONE else TO_LOGIN if ui else REFUSED
    for status, answer in refused.items():
        found.setdefault(str(status), response((answer,), schemas))
    found["default"] = response((UI_ERROR if entry.label == UI_PREFIX else ERROR,), schemas)
    return found


def response(answers: tuple[Answer, ...], schemas: Schemas) -> dict[str, Any]:
    """One status's response: its media types (several: a choice the request makes)."""
    found: dict[str, Any] = {"description": "; or ".join(a.description for a in answers)}
    content = {a.media: _media(a, schemas) for a in answers if a.model is not None}
    if content:
        found["content"] = content
    headers = {name: said for a in answers for name, said in a.headers.items()}
    if headers:
        found["headers"] = {
            name: {"description": said, "schema": {"type": "string"}}
            for name, said in headers.items()
        }
    return found


def _media(answer: Answer, schemas: Schemas) -> dict[str, Any]:
    found: dict[str, Any] = {"schema": schemas[answer.model]}
    if answer.events:  # an extension: each event's data, by event name
        found["x-events"] = {name: schemas[model] for name, model in answer.events.items()}
    return found


def _tag(method: Method) -> str:
    """The operation's group: the module serving it (`ui` for the web UI's modules)."""
    module = method.endpoint.__module__.rsplit(".", 1)[-1]
    return "ui" if method.access is Access.UI or module.startswith("ui") else module
