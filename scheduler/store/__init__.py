"""Redis: the key layout, the Lua scripts, the typed calls that run them, the job stores
(asyncio for the API, blocking for the workers) and the multiplexed connection.

Depends on the wire models and the placement rule; nothing here speaks HTTP.
"""
