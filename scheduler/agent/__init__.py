"""The reference compute agent: the poll loop, its calls to the scheduler and the registry,
running jobs and services, resource limits and deploy archives.

It speaks HTTP only: of the server it imports nothing but the wire models.
"""
