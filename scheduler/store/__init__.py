"""Redis, by job: every key (keys.py), every Lua script with its call (scripts/), what their
refusals raise (errors.py), the job stores that run them (jobs.py for the API's asyncio,
sync_store.py for the workers and the command line), and how Redis is reached
(connection/: discovery, the multiplexed connection, long-poll wake-ups, blocking clients).

Depends on the wire models and the placement rule; nothing here speaks HTTP.
"""
