"""The `scheduler` command: serve, worker, agent, up, the snapshot commands and the HTTP
client commands (submit, status, list)."""
