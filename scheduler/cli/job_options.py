"""A job's options on the command line, one definition for `scheduler submit` and `scheduler
schedule add` alike: one option per field a client may set, read from the job model (Job's
SUBMITTED fields and the request's own, REQUEST_ONLY), so a new field reaches both commands.

How an option parses comes from its field's kind (a number, text, a repeated NAME=VALUE...);
its flag and help from SPECS. A submitted field without an entry there still gets one,
`--its-name`, read by its kind; tests/cli/test_job_options.py fails until it has its entry.
Every option's value lands in the body under its field's name, or is left out when not given
(the API's default then holds: the same body as before the option existed).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from scheduler.models.fields import JobField, Kind
from scheduler.models.job import JOB_FIELDS, REQUEST_ONLY, job_number
from scheduler.models.spans import DURATION_RULE, seconds_of
from scheduler.models.wire import (
    IDEMPOTENCY_KEY_MAX,
    IDEMPOTENCY_KEY_RE,
    IDEMPOTENCY_KEY_RULE,
    not_a_job_id,
)


class OptionError(ValueError):
    """A job option's value that cannot be sent (the command says so and sends nothing)."""


def env_vars(pairs: list[str]) -> dict[str, str]:
    """NAME=VALUE pairs (--env, repeated): the env_vars."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise OptionError(f"{pair!r}: use NAME=VALUE")
        env[name] = value
    return env


def selector(pairs: list[str]) -> dict[str, str | list[str]]:
    """KEY=VALUE[,VALUE...] pairs (--select, repeated): the node_selector; several values,
    any of them."""
    found: dict[str, str | list[str]] = {}
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep or not key:
            raise OptionError(f"{pair!r}: use KEY=VALUE or KEY=VALUE,VALUE")
        allowed = values.split(",")
        found[key] = allowed if len(allowed) > 1 else values
    return found


def _items(values: list[str]) -> list[str]:
    """A list option, repeated or comma-separated (--after job-1,job-2 --after job-3)."""
    return [item for value in values for item in value.split(",") if item]


def job_ids(text: str) -> str:
    """--after's value, each of its comma-separated ids checked by the API's rule
    (models/job.py job_number): an empty one (`job-3,,job-4`) or another name is argparse's
    usage error naming it, exit 2, rather than left out or sent to be refused."""
    for item in text.split(","):
        if job_number(item) is None:
            what = not_a_job_id(item) if item else "an empty job id"
            raise argparse.ArgumentTypeError(f"{text!r}: {what}")
    return text


def seconds(text: str) -> float:
    """A length of time as people type one (--delay 90, 1h30m: models/spans.py seconds_of),
    in seconds; anything else argparse's usage error: `--delay 1h` was `invalid float
    value: '1h'`."""
    value = seconds_of(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r}: {DURATION_RULE}")
    return value


def whole_seconds(text: str) -> int:
    """`seconds`, a whole number of them (--retry-backoff 5m, --every 1h)."""
    value = seconds(text)
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r}: use whole seconds ({DURATION_RULE})")
    return int(value)


def _same(value: Any) -> Any:
    return value


# How a field of each kind is read: argparse's arguments, then the body's value from what
# argparse collected (never called for an option not given).
BY_KIND: dict[Kind, tuple[dict[str, Any], Callable[[Any], Any]]] = {
    Kind.TEXT: ({}, _same),
    Kind.TIMESTAMP: ({}, _same),
    Kind.INT: ({"type": int}, _same),
    Kind.LIST: ({"action": "append"}, _items),
    Kind.OBJECT: ({"action": "append"}, env_vars),
    Kind.SELECTOR: ({"action": "append"}, selector),
}


@dataclass(frozen=True, slots=True)
class Spec:
    """A field's option as its user sees it; `kwargs` and `read` replace its kind's."""

    flag: str
    help: str
    metavar: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    read: Callable[[Any], Any] | None = None


# One entry per submitted field (and REQUEST_ONLY's), keyed by its name. The flags are the
# ones the CLI has had since each field came, not always the field's name.
SPECS: dict[str, Spec] = {
    "command": Spec("command", "shell command, run with sh -c on the node", "command"),
    "instance_id": Spec("--instance", "run on this instance's node", "ID"),
    "deploy_url": Spec(
        "--deploy-url", "an archive's http(s) URL, unpacked in the job's dir first", "URL"
    ),
    "env_vars": Spec("--env", "an env var (repeat)", "NAME=VALUE"),
    "job_type": Spec(
        "--service",
        "a long-running service job (job_type service)",
        kwargs={"action": "store_const", "const": "service"},
    ),
    "port": Spec("--port", "the service's port", "PORT"),
    "delay_secs": Spec(
        "--delay", "run later: seconds, or 90s, 5m, 1h30m", "SECS", {"type": seconds}
    ),
    "run_at": Spec("--run-at", "run at this RFC 3339 time", "TIME"),
    "max_retries": Spec(
        "--max-retries", "retries after a failure (default: the scheduler's MAX_JOB_RETRIES)", "N"
    ),
    "retry_backoff_secs": Spec(
        "--retry-backoff",
        "wait before a retry, doubled each time (with jitter): seconds, or 30s, 5m",
        "SECS",
        {"type": whole_seconds},
    ),
    "priority": Spec("--priority", "higher runs first (default 0)", "N"),
    "after": Spec(
        "--after",
        "run once these jobs are done (repeat, or JOB_ID,JOB_ID)",
        "JOB_ID",
        {"type": job_ids},
    ),
    "cpus": Spec("--cpus", "cpus it needs of its node", "N"),
    "memory_mb": Spec("--memory-mb", "memory it needs", "MB"),
    "node_selector": Spec(
        "--select", "a node label it needs; KEY=A,B: either (repeat)", "KEY=VALUE"
    ),
    "namespace": Spec(
        "--namespace", "its namespace (default: the key's first, or `default`)", "NS"
    ),
}
# --node ID: the node_selector's node.id, the one field with a second flag.
NODE_FLAG = "--node"


@dataclass(frozen=True, slots=True)
class Option:
    """A field's option: how argparse reads it (under dest `job_<field>`, clear of the
    commands' own arguments) and how its value goes into the body."""

    field: str
    spec: Spec
    kwargs: dict[str, Any]
    read: Callable[[Any], Any]

    @property
    def dest(self) -> str:
        return f"job_{self.field}"

    def add_to(self, parser: argparse._ActionsContainer, optional: bool = False) -> None:
        kwargs = {"help": self.spec.help, "metavar": self.spec.metavar, **self.kwargs}
        if self.spec.flag.startswith("-"):
            parser.add_argument(self.spec.flag, dest=self.dest, default=None, **kwargs)
        else:  # the command: positional, as it always was (`optional`: may be left out)
            nargs: dict[str, Any] = {"nargs": "?"} if optional else {}
            parser.add_argument(self.dest, **nargs, **kwargs)
        if self.field == "node_selector":
            parser.add_argument(
                NODE_FLAG, dest="job_node", metavar="ID", help="run on this node (node.id)"
            )


def _option(name: str, kind: Kind | None) -> Option:
    derived = Spec(f"--{name.replace('_', '-')}", f"the job's {name}")
    spec = SPECS.get(name, derived)
    kwargs, read = BY_KIND[kind] if kind is not None else ({}, _same)
    return Option(name, spec, {**kwargs, **spec.kwargs}, spec.read or read)


def options(fields: Iterable[JobField] = JOB_FIELDS) -> tuple[Option, ...]:
    """An option per submitted field, in the declaration's order (the command first: the
    one positional), then REQUEST_ONLY's."""
    found = [_option(f.name, f.kind) for f in fields if f.submitted]
    found += [_option(name, None) for name, _, _ in REQUEST_ONLY]
    return tuple(sorted(found, key=lambda option: option.spec.flag.startswith("-")))


OPTIONS = options()


# The option that sets each field (not the command: positional, named as the API names it).
FLAGS = {o.field: o.spec.flag for o in OPTIONS if o.spec.flag.startswith("-")}
# The field a scheduler's error about a job starts with: `failed to decode job: priority:
# must be ...` (POST /jobs, the original's words), `invalid cpus -1: use 0 to 65536` (a batch's
# entry), `invalid job: priority: ...` (a schedule's template).
_NAMED = re.compile(
    r"(?:failed to decode job: |invalid job: )?(?:invalid )?(?P<field>[a-z_]+)(?=[: ])"
)


def in_option_terms(message: str) -> str:
    """A scheduler's error about a job's field said of the option that sets it, as the user
    typed it (`--priority: must be an integer between -1000 and 1000`); any other as it is."""
    named = _NAMED.match(message)
    if named is None or named["field"] not in FLAGS:
        return message
    return FLAGS[named["field"]] + message[named.end() :]


# The fields a job has one of at most: when it runs (later, at a time, once others are done).
ONE_OF = ("delay_secs", "run_at", "after")


def add_job_options(
    parser: argparse._ActionsContainer,
    optional_command: bool = False,
    omit: Iterable[str] = (),
) -> None:
    """Every job option but those of the fields `omit`, for a command that makes jobs;
    `optional_command`: the command may be left out (`submit --from FILE` reads each job's
    from the file)."""
    left_out = set(omit)
    # Ways of saying when, one a job (models/job.py stamped): refused here, naming the flags.
    when = [o for o in OPTIONS if o.field in ONE_OF and o.field not in left_out]
    group = parser.add_mutually_exclusive_group() if len(when) > 1 else parser
    for option in OPTIONS:
        if option in when[:1]:  # side by side: the usage shows [--delay | --run-at | --after]
            for each in when:
                each.add_to(group, optional_command)
        elif option.field not in left_out and option not in when:
            option.add_to(parser, optional_command)


def unrecognized_hint(args: argparse.Namespace, extra: list[str]) -> str:
    """What to do about the words argparse left over, for a command that takes a job's:
    a command of several words typed unquoted (`scheduler submit echo hi`: `hi` an argument
    of no option): ` (quote the command: scheduler submit 'echo hi')`, as for `ls -la /tmp`;
    a long option mistyped (`--priorty 5`, whose value is left over too: quoting would make
    both the command's): ` (did you mean --priority?)` when one is close, else ""."""
    command = getattr(args, "job_command", None)  # the positional's dest (Option.dest)
    prog: str = getattr(args, "job_prog", "")
    if not command or not prog:
        return ""
    typed = [word.split("=", 1)[0] for word in extra if word.startswith("--")]
    if typed:  # a long option: the user meant one, not a word of the command
        flags = [*FLAGS.values(), NODE_FLAG]
        close = [m for word in typed for m in difflib.get_close_matches(word, flags, 1, 0.75)]
        return f" (did you mean {close[0]}?)" if close else ""
    if all(word.startswith("-") for word in extra):
        return ""
    return f" (quote the command: {prog} {shlex.quote(' '.join([command, *extra]))})"


def job_body(args: argparse.Namespace) -> dict[str, Any]:
    """The job's fields the options gave (the POST /jobs body); OptionError for a value that
    cannot be one."""
    body: dict[str, Any] = {}
    for option in OPTIONS:
        given = getattr(args, option.dest, None)
        if given is not None:
            try:
                body[option.field] = option.read(given)
            except OptionError as exc:
                raise OptionError(f"{option.spec.flag} {exc}") from None
    node = getattr(args, "job_node", None)
    if node:
        body["node_selector"] = {**body.get("node_selector", {}), "node.id": node}
    return body


def idempotency_key(key: str, adds: str = "") -> str:
    """--idempotency-key's KEY, checked before any request by the scheduler's own rule
    (models/wire.py), as sent: with `adds`, the most a batch adds to it for one of its
    requests; OptionError for a key the scheduler would refuse ("": none, a new one)."""
    if key and not IDEMPOTENCY_KEY_RE.fullmatch(key + adds):
        rule = IDEMPOTENCY_KEY_RULE.format(most=IDEMPOTENCY_KEY_MAX - len(adds))
        raise OptionError(f"--idempotency-key {key!r}: {rule}")
    return key
