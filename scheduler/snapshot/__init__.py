"""The durable SQLite snapshot of the jobs: writing it, restoring Redis from it, and the
file itself. Depends on store."""
