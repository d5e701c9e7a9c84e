"""Background work on rq: timeout sweep, SQS ingestion, SNS publishing, SQLite snapshot.

`scheduler worker` runs `workers.worker.run`: an rq worker on the deployment's queues plus a
trigger thread (`workers.schedule`) that enqueues each periodic task once per period.

Importing this package fixes rq's key prefix first (rq_prefix.py): every rq import of the
project is below here, so rq cannot be imported with another one by accident.
"""

from workers.rq_prefix import pin_rq_prefix

pin_rq_prefix()
