"""A store operation, declared once (store/ops/): where it runs (its `Route`) and what it
sends there, as a program that does no I/O. The program is a generator: it yields a step
(a script `Call`, a plain `Command`, several sent `Together`, another `Op` routed on its own,
or `All` of them at once) and is sent the step's reply (or has its error thrown in); what it
returns is the operation's value. An executor (executor.py) drives it: the API's asyncio
store over one shard or many, or the workers' blocking store. So an operation is written
once whichever process runs it and however many shards the deployment has, and its reply
becomes a value in one place, its program. (The shape is sans-I/O, as h11 and h2 keep a
protocol apart from its sockets.)"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, TypeAlias, TypeVar

from scheduler.config import Settings
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import Call
from scheduler.store.shards import Layout, Numbering

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Command:
    """A plain Redis command on the operation's shard (a GET, an MGET, an HLEN)."""

    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Together:
    """Steps on this shard sent back to back (one round trip where the connection pipelines);
    their replies in order. `tolerant`: a step that fails has its error as its reply, and the
    others theirs (a bulk submit's jobs fail each alone: driving.in_step); else the first
    error is the whole step's."""

    steps: Sequence[Call[Any] | Command]
    tolerant: bool = False


@dataclass(frozen=True, slots=True)
class All:
    """Operations routed each on its own, run at once; their values in order."""

    ops: Sequence[Op[Any]]


Step: TypeAlias = "Call[Any] | Command | Together | All | Op[Any]"
# An operation's program: yields steps, is sent their replies, returns its value.
Steps: TypeAlias = Generator[Step, Any, T]


@dataclass(frozen=True, slots=True)
class Home:
    """Shard 0: what is the deployment's own (sessions, logins, request metrics, schedules),
    and the operations that only route others (they yield `Op`s of their own)."""


@dataclass(frozen=True, slots=True)
class OfJob:
    job_id: str


@dataclass(frozen=True, slots=True)
class OfNode:
    node_id: str


@dataclass(frozen=True, slots=True)
class OfService:
    service_id: str


@dataclass(frozen=True, slots=True)
class OnShard:
    index: int


@dataclass(frozen=True, slots=True)
class Each:
    """Every shard at once, their values merged by `merge` (one shard's value is the value:
    every merge here gives it back unchanged). `tolerant`: a shard that fails gives its
    exception as its value, so an outage of one stops no other's answer."""

    merge: Callable[[list[Any]], Any]
    tolerant: bool = False


@dataclass(frozen=True, slots=True)
class Placed:
    """A new job's shard, found by trying shards in turn (shard_placement.py): `make(here)`
    is the operation on one shard, `here` the placement's part there. `job`: the new job (its
    dependencies pin its shard), None for a placement alone; `dedup`: its idempotency key."""

    make: Callable[[Placement], Op[Any]]
    placement: Placement
    job: Any = None
    dedup: Any = None


@dataclass(frozen=True, slots=True)
class PlacedEach:
    """New jobs' shards, each found as its `Placed` would find it alone (its dependencies'
    shard, the live shards in turn, its key's walk), every shard's jobs of a round sent in one
    round trip (shard_placement.py placed_each). The value: each job's, or its error."""

    items: Sequence[Placed]


Route: TypeAlias = Home | OfJob | OfNode | OfService | OnShard | Each | Placed | PlacedEach


@dataclass(frozen=True, slots=True)
class Op(Generic[T_co]):
    """One store operation, ready to run: its route and its program (given the shard)."""

    route: Route
    program: Callable[[Shard], Steps[T_co]] = field(repr=False)
    name: str = ""


@dataclass(slots=True)
class Shard:
    """What a program knows of the shard it runs on, and of the deployment's layout (to
    route the operations it yields). The layout and the numberings are set once the
    layout record is read (shard_layout.py)."""

    settings: Settings
    keys: Keys
    index: int = 0
    layout: Layout = field(default_factory=Layout)
    numbering: Numbering = field(default_factory=Numbering)
    service_numbering: Numbering = field(default_factory=Numbering)

    @property
    def count(self) -> int:
        return self.layout.count


# Every declared operation's program, by name ("<module>.<function>").
OPERATIONS: dict[str, Callable[..., Any]] = {}


def operation(
    route: Callable[P, Route],
) -> Callable[[Callable[Concatenate[Shard, P], Steps[T]]], Callable[P, Op[T]]]:
    """Declares a store operation: `route(*args)` says where it runs; the decorated function,
    given the shard and the same arguments, is its program. Declaring a name twice fails."""

    def declare(program: Callable[Concatenate[Shard, P], Steps[T]]) -> Callable[P, Op[T]]:
        name = f"{program.__module__.rsplit('.', 1)[-1]}.{program.__name__}"
        if name in OPERATIONS:
            raise ValueError(f"the store operation {name} is declared twice")
        OPERATIONS[name] = program

        @functools.wraps(program)
        def bound(*args: P.args, **kwargs: P.kwargs) -> Op[T]:
            return Op(route(*args, **kwargs), lambda shard: program(shard, *args, **kwargs), name)

        return bound

    return declare


def home(*_: Any, **__: Any) -> Route:
    return Home()


def by_job(job_id: str, *_: Any, **__: Any) -> Route:
    return OfJob(job_id)


def by_node(node_id: str, *_: Any, **__: Any) -> Route:
    return OfNode(node_id)


def by_service(service_id: str, *_: Any, **__: Any) -> Route:
    return OfService(service_id)


def each(merge: Callable[[list[Any]], Any], tolerant: bool = False) -> Callable[..., Route]:
    """The route of an operation asked of every shard, merged by `merge`."""
    return lambda *_, **__: Each(merge, tolerant)


def placed(
    make: Callable[[Placement], Op[T]], placement: Placement, job: Any = None, dedup: Any = None
) -> Op[T]:
    """A new job's operation, on the shard its `Placed` route finds; unsharded, `make`'s
    program with the whole placement (what an executor of one shard runs)."""
    made = make(placement)
    return Op(Placed(make, placement, job, dedup), made.program, made.name)


def placed_each(items: Sequence[Placed], abreast: Callable[[Shard], Steps[list[Any]]]) -> Op[Any]:
    """New jobs' operation, each job on the shard its `Placed` route finds (`PlacedEach`);
    unsharded, `abreast`: their programs with their whole placements, in step on the one
    shard (driving.in_step)."""
    return Op(PlacedEach(items), abreast, "placed_each")


def on_shard(index: int, op: Op[T]) -> Op[T]:
    """`op` sent to one shard by number (a coordinator's piece of a cross-shard operation)."""
    return Op(OnShard(index), op.program, op.name)


def run(call: Call[T]) -> Steps[T]:
    """A script call as a step: `x = yield from run(call)` reads as its value, typed."""
    reply: T = yield call
    return reply


def send(*args: Any) -> Steps[Any]:
    """A plain command on this shard as a step."""
    return (yield Command(args))


def together(*steps: Call[Any] | Command) -> Steps[list[Any]]:
    replies: list[Any] = yield Together(steps)
    return replies


def nested(op: Op[T]) -> Steps[T]:
    """Another operation, routed on its own (its shard may not be this one's)."""
    value: T = yield op
    return value


def at_once(ops: Sequence[Op[T]]) -> Steps[list[T]]:
    values: list[T] = yield All(ops)
    return values


def call_op(call: Call[T], route: Route | None = None) -> Op[T]:
    """A lone script call as an operation (on shard 0 unless told): the calls that are their
    script alone (UI sessions, failed logins, request metrics, the layout record)."""

    def program(_: Shard) -> Steps[T]:
        return (yield from run(call))

    return Op(route or Home(), program, call.script.name)
