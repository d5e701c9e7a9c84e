"""The Lua of a job's place, generated from the table (places.py PLACES): `PLACES_LUA`, an
include file of the scripts' library (library.py GENERATED_FILES).

A move is the hot path of every transition, so it is written out per pair of statuses
(`MOVES[old][new]`): only the commands that pair may need, each behind the checks of the
nodes alone (whether it is on one, whether it stays on it), no status compared at run time.
Entering a place is written out per status (`ENTERS`). A status no row names (a newer
version's) takes the general form, which compares statuses as it goes (`move_any`,
`enter_any`)."""

from __future__ import annotations

from scheduler.store.scripts.places import ROWS, Index, Score

# The Lua of each score, of the job's number `n`, `job` and the time `at`.
_SCORE_LUA = {Score.NUMBER: "n", Score.QUEUE: "queue_score(n, job.priority)", Score.AT: "at"}
Group = list[Index]


def _groups() -> list[Group]:
    """The indexes by key: one key's entries (a node's queue and its other statuses' indexes)
    share a command, differing only in score."""
    groups: dict[tuple[str, tuple[str, ...]], Group] = {}
    for row in ROWS.values():
        for index in (*row.on_node, *row.on_none):
            found = groups.setdefault((index.key, index.args), [])
            if index not in found:
                found.append(index)
    return list(groups.values())


def _key(index: Index, status: str, node: str) -> str:
    values = {
        "status": status,
        "node": node,
        "schedule": "job.schedule",
        "namespace": '(job.namespace or "")',
    }
    if not index.args:
        return f"K.{index.key}"
    return f"K.{index.key}({', '.join(values[arg] for arg in index.args)})"


def _entry(group: Group, status: str) -> Index | None:
    """The index of `group` a job in `status` is in (on a node or not), if any."""
    row = ROWS[status]
    return next((index for index in group if index in (*row.on_node, *row.on_none)), None)


def _in(group: Group, status: str, node: str) -> list[str] | None:
    """Whether a job in `status` on `node` (a Lua variable) is in `group`'s index: None for
    never, else the conditions (none: always)."""
    row = ROWS[status]
    on_node = any(index in row.on_node for index in group)
    on_none = any(index in row.on_none for index in group)
    if not on_node and not on_none:
        return None
    where = [] if on_node and on_none else [f'{node} {"~=" if on_node else "=="} ""']
    only = group[0].only.value
    return [only, *where] if only else where


def _all(conditions: list[str]) -> str:
    return " and ".join(conditions)


def _unless(given: list[str], kept: list[str]) -> list[str]:
    """`given` and not `kept`, where kept's node test follows from the given one's and "from
    == to" (a node compared with one that is not "" is not "" either)."""
    if "from == to" in kept:
        kept = [c for c in kept if c not in ('to ~= ""', 'from ~= ""')]
    if len(kept) == 1 and _comparison(kept[0]):
        a, op, b = kept[0].split(" ", 2)
        return [*given, f"{a} {'~=' if op == '==' else '=='} {b}"]
    return [*given, f"not ({_all(kept)})"]


def _comparison(condition: str) -> bool:
    """Whether `condition` is one `a == b` or `a ~= b` (its negation flips the operator);
    anything more (and, or, parentheses: Only.OVER_QUOTA's) is negated whole."""
    parts = condition.split(" ")
    return len(parts) == 3 and parts[1] in ("==", "~=") and "(" not in condition


def _guarded(conditions: list[str], statement: str, indent: str = "  ") -> str:
    if not conditions:
        return f"{indent}{statement}"
    return f"{indent}if {_all(conditions)} then {statement} end"


def _add(group: Group, status: str, node: str, call: str, score: str | None = None) -> str:
    index = group[0]
    key = _key(index, status, node)
    if index.score is Score.COUNT:
        return ""  # written by its own code (the count): entered there
    if index.score is Score.MEMBER:
        return f'{call}("SADD", {key}, id)'
    return f'{call}("ZADD", {key}, {score}, id)'


def _remove(group: Group, status: str, node: str) -> str:
    key = _key(group[0], status, node)
    command = {Score.MEMBER: "SREM", Score.COUNT: "HDEL"}.get(group[0].score, "ZREM")
    return f'redis.call("{command}", {key}, id)'


def _score_of(group: Group, status: str) -> str:
    entry = _entry(group, status)
    return _SCORE_LUA.get(entry.score, "") if entry else ""


def _pair(old: str, new: str) -> list[str]:
    """MOVES[old][new]'s body: the job from `old` on node `from` to `new` on node `to`."""
    lines = []
    if ROWS[old].holds:
        stays = ["to ~= from"] if ROWS[new].holds else []
        lines.append(_guarded(['from ~= ""', *stays], "unhold(from, id, job)"))
    for group in _groups():
        was, now = _in(group, old, "from"), _in(group, new, "to")
        same_key = "status" not in group[0].args or old == new
        node_kept = ["from == to"] if "node" in group[0].args else []
        if was is not None:
            # out, unless the new place keeps the same entry
            kept = [c for c in now if c not in was] + node_kept if now is not None else None
            if kept is None or not same_key:
                lines.append(_guarded(was, _remove(group, f'"{old}"', "from")))
            elif kept:
                remove = _remove(group, f'"{old}"', "from")
                lines.append(_guarded(_unless(was, kept), remove))
        add = _add(group, f'"{new}"', "to", "redis.call", _score_of(group, new))
        if now is not None and add:
            kept = [c for c in was if c not in now] + node_kept if was is not None else None
            if kept is None or not same_key:
                lines.append(_guarded(now, add))
            elif kept:
                lines.append(_guarded(_unless(now, kept), add))
    if ROWS[new].holds:
        moved = ["to ~= from"] if ROWS[old].holds else []
        lines.append(_guarded(['to ~= ""', *moved], "hold(to, id, job)"))
    # Its namespace's use (quota.lua), once the indexes say where it is: its running count.
    if ROWS[old].runs and not ROWS[new].runs:
        lines.append("  ns_release(job)")
    if ROWS[new].runs and not ROWS[old].runs:
        lines.append("  ns_use(job)")
    return lines


# Each function of a table takes the arguments of them all: luacheck's unused ones are not
# findings there.
_ALL_ARGS = "-- luacheck: push ignore 212"


def _moves() -> str:
    out = [_ALL_ARGS, "local MOVES = {"]
    for old in ROWS:
        out.append(f"  {old} = {{")
        for new in ROWS:
            body = [f"  {line}" for line in _pair(old, new)]
            head = f"    {new} = function(id, n, job, old, from, new, to, at)"
            out += [head, *[f"  {line}" for line in body], "    end,"]
        out.append("  },")
    return "\n".join([*out, "}", "-- luacheck: pop"])


def _enters() -> str:
    out = [_ALL_ARGS, "local ENTERS = {"]
    for status in ROWS:
        out.append(f"  {status} = function(id, n, job, status, node, at, write)")
        for group in _groups():
            place = _in(group, status, "node")
            add = _add(group, f'"{status}"', "node", "write", _score_of(group, status))
            if place is not None and add:
                out.append(_guarded(place, add, "    "))
        if ROWS[status].holds:
            out.append('    if node ~= "" then hold(node, id, job) end')
        if ROWS[status].runs:
            out.append("    ns_use(job)")
        out.append("  end,")
    return "\n".join([*out, "}", "-- luacheck: pop"])


# The general forms: statuses compared at run time, for a status no row names.
def _member(group: Group, status: str, node: str) -> str:
    """The Lua condition: a job in place (`status`, `node`) is in `group`'s index."""
    alternatives = []
    for s in ROWS:
        conditions = _in(group, s, node)
        if conditions is not None:
            alternatives.append(_all([f'{status} == "{s}"', *conditions]))
    return "(" + " or ".join(f"({a})" for a in alternatives) + ")" if alternatives else "false"


def _score_any(group: Group, status: str) -> str:
    scores = {s: _score_of(group, s) for s in ROWS if _entry(group, s)}
    special = {s: v for s, v in scores.items() if v != "n"}
    if len(set(scores.values())) <= 1:
        return next(iter(scores.values()), "n")
    tests = " or ".join(f'{status} == "{s}"' for s in special)
    (value,) = set(special.values())
    return f"(({tests}) and {value} or n)"


def _move_any() -> str:
    lines = [
        "local function move_any(id, n, job, old, from, new, to, at)",
        '  local held, holds = HOLDS[old] and from ~= "", HOLDS[new] and to ~= ""',
        "  if held and not (holds and to == from) then unhold(from, id, job) end",
    ]
    for group in _groups():
        same = [f"{a} == {b}" for arg, a, b in _PLACE_ARGS if arg in group[0].args]
        kept = _all(["was", "is", *same])
        add = _add(group, "new", "to", "redis.call", _score_any(group, "new"))
        lines += [
            "  do",
            f"    local was, is = {_member(group, 'old', 'from')}, {_member(group, 'new', 'to')}",
            f"    if was and not ({kept}) then {_remove(group, 'old', 'from')} end",
        ]
        if add:
            lines.append(f"    if is and not ({kept}) then {add} end")
        lines.append("  end")
    lines += [
        "  if holds and not (held and to == from) then hold(to, id, job) end",
        "  if RUNS[old] and not RUNS[new] then ns_release(job) end",
        "  if RUNS[new] and not RUNS[old] then ns_use(job) end",
        "end",
    ]
    return "\n".join(lines)


# The place's parts an index key may name, as a move's old and new place call them.
_PLACE_ARGS = (("status", "old", "new"), ("node", "from", "to"))


def _enter_any() -> str:
    lines = ["local function enter_any(id, n, job, status, node, at, write)"]
    for group in _groups():
        add = _add(group, "status", "node", "write", _score_any(group, "status"))
        if add:
            lines.append(f"  if {_member(group, 'status', 'node')} then {add} end")
    lines += [
        '  if HOLDS[status] and node ~= "" then hold(node, id, job) end',
        "  if RUNS[status] then ns_use(job) end",
        "end",
    ]
    return "\n".join(lines)


def _leave() -> str:
    lines = [
        "local function leave_place(id, job)",
        "  local status, node = job.status, job.node_id",
        '  if HOLDS[status] and node ~= "" then unhold(node, id, job) end',
    ]
    for group in _groups():
        remove = _remove(group, "status", "node")
        lines.append(f"  if {_member(group, 'status', 'node')} then {remove} end")
    return "\n".join([*lines, "  if RUNS[status] then ns_release(job) end", "end"])


def _enter_namespace() -> str:
    """`enter_namespace(id, n, job)`: a job into the indexes of its place keyed by its
    namespace, and no other (the upgrade to namespaces: ops.upkeep.index_namespaces)."""
    lines = [
        "local function enter_namespace(id, n, job)",
        '  local status, node = job.status, job.node_id or ""  -- luacheck: no unused',
    ]
    for group in _groups():
        add = _add(group, "status", "node", "redis.call", _score_any(group, "status"))
        if "namespace" in group[0].args and add:
            lines.append(f"  if {_member(group, 'status', 'node')} then {add} end")
    return "\n".join([*lines, "end"])


def _queue_of() -> str:
    """`queue_of(job)`: the key of the queue a job's place holds it in (an index scored
    QUEUE: a node's pending jobs, the unplaced, a namespace's waiting for quota), or nil."""
    lines = ["local function queue_of(job)", "  local status, node = job.status, job.node_id"]
    for group in _groups():
        for status in ROWS:
            entry, conditions = _entry(group, status), _in(group, status, "node")
            if entry is not None and entry.score is Score.QUEUE and conditions is not None:
                test = _all([f'status == "{status}"', *conditions])
                lines.append(f"  if {test} then return {_key(group[0], 'status', 'node')} end")
    return "\n".join([*lines, "  return nil", "end"])


def _leave_fixed() -> str:
    removals = [f"  {_remove(group, '', '')}" for group in _groups() if not group[0].args]
    return "\n".join(["local function leave_fixed(id)", *removals, "end"])


_HOLDS = ", ".join(f"{status} = true" for status, row in ROWS.items() if row.holds)
_RUNS = ", ".join(f"{status} = true" for status, row in ROWS.items() if row.runs)

# An include file of the library (library.py GENERATED_FILES): its include lines first.
PLACES_LUA = f"""--- @include "keys"
--- @include "hold"
--- @include "unhold"
--- @include "ns_use"
--- @include "ns_release"

-- Job number n's score in a node's queue (its pending index, which POLL reads from the
-- lowest) and among the unplaced jobs: higher priority first, by number within one. Exact
-- as a double for |priority| <= 1000 (models.MAX_PRIORITY) and n < 2^42; priority 0 (nil:
-- none) scores n itself, the original's FIFO.
local function queue_score(n, priority)
  local p = tonumber(priority) or 0
  if p == 0 then return n end  -- as given (number_of's text: a command takes it unformatted)
  return n - p * 4398046511104
end

-- The statuses in which a job holds what it asks on its node (places.py PLACES).
local HOLDS = {{{_HOLDS}}}

-- The statuses in which a job counts against its namespace's quota (places.py PLACES runs).
local RUNS = {{{_RUNS}}}

-- A job from its place to another (status `new` on node `to`), for any statuses.
{_move_any()}

-- The same per pair of statuses, MOVES[old][new]: only what that pair may change.
{_moves()}

-- A job from its place to status `new` on node `to` ("": none): out of the indexes only the
-- old place has, into those only the new one has; `at` scores an entry by time.
local function move_place(id, n, job, new, to, at)
  local old, from = job.status, job.node_id
  local moves = MOVES[old]
  local move = moves and moves[new] or move_any
  move(id, n, job, old, from, new, to, at)
  job.status, job.node_id = new, to
end

-- A job into every index of its place, any status; per status, ENTERS[status].
{_enter_any()}

{_enters()}

-- A job into every index of its place, each entry a `write(command, key, score?, id)`.
local function enter_place(id, n, job, at, write)
  local status = job.status
  local enter = ENTERS[status] or enter_any
  enter(id, n, job, status, job.node_id, at, write)
end

-- A job out of every index of its place.
{_leave()}

-- A job out of every index keyed by nothing of its place, whatever its place.
{_leave_fixed()}

-- A job into the indexes of its place keyed by its namespace alone (an earlier version's job).
{_enter_namespace()}

-- The queue a job waits in, in its place's order (the poll's, the placement pass's), or nil.
{_queue_of()}
"""
