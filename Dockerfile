# One image for every process of the scheduler: the API (`scheduler serve`), the worker
# (`scheduler worker`), the dashboard (`rq-dashboard`) and the reference agent
# (`scheduler agent`). docker-compose.yml picks the command.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
COPY workers ./workers
RUN pip install ".[dashboard]" \
    && useradd --system --uid 10001 --home-dir /var/lib/scheduler --create-home scheduler \
    && mkdir -p /var/lib/scheduler/snapshot /var/lib/scheduler/agent \
    && chown scheduler:scheduler /var/lib/scheduler/snapshot /var/lib/scheduler/agent
# (The snapshot and agent-state volumes' mount points exist in the image, so Docker gives a new
# volume its owner; a mount point Docker has to create would be root's, and the worker and the
# agent could not write.)

# Not root: the agent then limits jobs with rlimits (cgroups need a writable hierarchy).
USER scheduler
WORKDIR /var/lib/scheduler
EXPOSE 9001
CMD ["scheduler", "serve", "--host", "0.0.0.0", "--port", "9001"]
