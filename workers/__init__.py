"""Background work on rq: timeout sweep, SQS ingestion, SNS publishing, SQLite snapshot.

`scheduler worker` runs `workers.worker.run`: an rq worker on the deployment's queues plus a
trigger thread (`workers.schedule`) that enqueues each periodic task once per period.
"""
