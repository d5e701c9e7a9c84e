"""The HTTP API: the Starlette app, the built-in registry's routes and the HTTP plumbing.

Handlers decode, call the store, encode. Depends on store, nodes and snapshot (the restore
at start), never the other way round.
"""
