"""The wire models (CONTRACT 2.2), one module per job: a job and its fields (job.py), read
from the declaration by fields.py; the registry's nodes and services (registry.py); and the
wire's own rules, Go-style decoding, ids and timestamps (wire.py)."""
