"""The real API as a module-level ASGI app (settings from the environment), for servers that
take an import path rather than a factory."""

from scheduler.api.app import create_app

app = create_app()
