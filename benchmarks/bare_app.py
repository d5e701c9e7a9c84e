"""The ceiling of the stack: Starlette on uvicorn answering constant JSON, no Redis."""

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

BODY = b'{"job_id":"job-1","node_id":"n1","command":"echo hi","status":"pending"}\n'


async def constant(request: Request) -> Response:
    await request.body()
    return Response(BODY, media_type="application/json")


app = Starlette(routes=[Route("/{path:path}", constant, methods=["GET", "POST", "PATCH"])])
