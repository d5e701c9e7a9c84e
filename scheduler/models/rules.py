"""What a request body must be, said from the models' own constraints (issue 38): a body that
does not decode is answered `field: rule`, as `priority: must be an integer between -1000 and
1000`, `priorty: unknown field (did you mean priority?)` or `body: not valid JSON (...)`.

msgspec checks a body against a Struct's types and their Meta bounds and says what it found in
its own words (``Expected `int` <= 1000 - at `$.priority` ``). `explain` reads the field from
that message and says the rule from the field's declared type (msgspec.inspect), so a bound is
written once, in the model, and every decoder of a body (wire.decode_go_style, wire.decode_with)
says it the same way, on both fronts. Only a refused body pays for the wording: a body that
decodes costs what it did.
"""

from __future__ import annotations

import difflib
import functools
import re

import msgspec
import msgspec.inspect as mi

# A pattern's rule in words, where a model gives them (`in_words`): said instead of the regex.
_PATTERN_WORDS: dict[str, str] = {}


def in_words(pattern: str, words: str) -> str:
    """`pattern`, whose rule a refused value is told as `words` ("1 to 63 characters of a-z
    0-9 -, ..."), not as the regex."""
    _PATTERN_WORDS[pattern] = words
    return pattern


# msgspec's messages: what it expected (and got), then where (absent at the top level).
_AT = re.compile(r"(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.S)
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]*)`")
_MISSING = re.compile(r"Object missing required field `(?P<name>[^`]*)`")
_GOT = re.compile(r"Expected `[^`]*`, got `(?P<got>[^`]*)`")
_TOP = re.compile(r"\.(?P<name>[^.\[]+)")  # a path's first field: `.env_vars[...]` -> env_vars
_MALFORMED = re.compile(r"JSON is malformed: (?P<why>.*) \(byte (?P<byte>\d+)\)")
# JSON's kinds (msgspec's `got`, and a Python value's type) as a message says them.
_KINDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "NoneType": "null",
    "array": "an array",
    "list": "an array",
    "object": "an object",
    "dict": "an object",
}
_INT64 = (-(2**63), 2**63 - 1)


def explain(exc: msgspec.ValidationError, kind: object) -> str:
    """msgspec's refusal of a body as `kind` (a Struct), said as `field: rule`."""
    found = _AT.fullmatch(str(exc))
    assert found is not None  # the pattern matches any text
    what, path = found["what"], found["path"] or ""
    top = _TOP.match(path)
    unknown, missing = _UNKNOWN.fullmatch(what), _MISSING.fullmatch(what)
    if unknown:
        return _unknown(path[1:], unknown["name"], () if path else _names(kind))
    if missing:
        return f"{_joined(path[1:], missing['name'])}: required"
    got = _GOT.match(what)
    said = f", got {_KINDS.get(got['got'], got['got'])}" if got else ""
    if top is None:  # the body itself
        return f"body: must be a JSON object{said}" if got else what
    field = top["name"]
    rule = _rules(kind).get(field)
    if rule is None:  # a field of a nested struct: msgspec's own words
        return f"{path[1:]}: {what}"
    if said and path != f".{field}":  # inside the field: say where (`env_vars[...]`)
        said += f" at {path[1:]}"
    return f"{field}: must be {rule}{said}"


def not_json(exc: Exception, body: bytes) -> str:
    """The refusal of a body that is not JSON at all (msgspec.DecodeError, or the Go-style
    fallback's ValueError)."""
    if not body.strip():
        return "body: empty (send a JSON object)"
    text = str(exc)
    malformed = _MALFORMED.fullmatch(text)
    if malformed:
        return f"body: not valid JSON ({malformed['why']} at byte {malformed['byte']})"
    if text == "Input data was truncated":
        return "body: not valid JSON (it ends inside a value)"
    return f"body: not valid JSON ({text})"


def not_an_object(value: object) -> str:
    """The refusal of a body that is JSON but not an object."""
    name = type(value).__name__
    return f"body: must be a JSON object, got {_KINDS.get(name, name)}"


NESTED_TOO_DEEPLY = "body: JSON nested too deeply"


# The names users bring from other schedulers and job systems (Slurm, Kubernetes, Celery,
# Nomad, GitHub Actions, cron), no spelling of ours: each hinted as the field it means, where
# the model decoded has that field. None for a field no body has: `timeout` (a job's limit is
# the deployment's JOB_TIMEOUT_SECS), `node` (a job's is node_selector's node.id, which the
# field's prefix already hints).
BROUGHT = {
    "cmd": "command",
    "script": "command",
    "retries": "max_retries",
    "max_attempts": "max_retries",
    "backoff": "retry_backoff_secs",
    "retry_delay": "retry_backoff_secs",
    "environment": "env_vars",
    "env": "env_vars",
    "delay": "delay_secs",
    "countdown": "delay_secs",
    "eta": "run_at",
    "begin": "run_at",
    "start_at": "run_at",
    "scheduled_at": "run_at",
    "labels": "node_selector",
    "selector": "node_selector",
    "constraints": "node_selector",
    "depends_on": "after",
    "dependencies": "after",
    "needs": "after",
    "memory": "memory_mb",
    "mem": "memory_mb",
    "cpu": "cpus",
    "ncpus": "cpus",
    "type": "job_type",
    "url": "deploy_url",
    "interval": "every_secs",
    "schedule": "cron",
    "tz": "timezone",
    "suspend": "paused",
    "template": "job",
}


def _unknown(where: str, name: str, known: tuple[str, ...]) -> str:
    name = name[:64]  # the client's text: bounded in the answer
    # Another scheduler's name for one of ours, a misspelling, or a field's first word
    # (`node` for node_selector, as the CLI's --node).
    brought = BROUGHT.get(name, "")
    close = (
        ([brought] if brought in known else [])
        or difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        or [field for field in known if field.startswith(f"{name}_")][:1]
    )
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{_joined(where, name)}: unknown field{hint}"


def _joined(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


@functools.cache
def _names(kind: object) -> tuple[str, ...]:
    info = mi.type_info(kind)
    return tuple(f.encode_name for f in info.fields) if isinstance(info, mi.StructType) else ()


@functools.cache
def _rules(kind: object) -> dict[str, str]:
    """Each field of `kind`: what its value must be (read once per Struct)."""
    info = mi.type_info(kind)
    if not isinstance(info, mi.StructType):
        return {}
    return {f.encode_name: rule(f.type) for f in info.fields}


def rule(t: mi.Type) -> str:
    """What a value of type `t` must be, as a phrase after "must be"."""
    return _noun(t, plural=False)


def _noun(t: mi.Type, plural: bool) -> str:
    while isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        kept = [m for m in t.types if not isinstance(m, mi.NoneType)]
        return " or ".join(_noun(m, plural) for m in kept)
    if isinstance(t, mi.IntType):
        if (t.ge, t.le) == _INT64:
            return "64-bit integers" if plural else "a 64-bit integer"
        return ("integers" if plural else "an integer") + _range(t.ge, t.le, t.gt, t.lt)
    if isinstance(t, mi.FloatType):
        return ("numbers" if plural else "a number") + _range(t.ge, t.le, t.gt, t.lt)
    if isinstance(t, mi.StrType):
        words = _PATTERN_WORDS.get(t.pattern or "")
        matching = f" of {words}" if words else f" matching {t.pattern}" if t.pattern else ""
        return (
            ("strings" if plural else "a string") + matching + _length(t.max_length, "characters")
        )
    if isinstance(t, mi.BoolType):
        return "booleans" if plural else "true or false"
    if isinstance(t, mi.ListType):
        bound = f"at most {t.max_length} " if t.max_length is not None else ""
        return ("lists of " if plural else "a list of ") + bound + _noun(t.item_type, True)
    if isinstance(t, mi.DictType):
        return ("objects of " if plural else "an object of ") + _noun(t.value_type, True)
    if isinstance(t, mi.StructType | mi.TypedDictType | mi.DataclassType):
        return "objects" if plural else "an object"
    if isinstance(t, mi.EnumType):
        return "one of " + ", ".join(str(member.value) for member in t.cls)
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(str(value) for value in t.values)
    return "JSON values" if plural else "a JSON value"


def _range(ge: float | None, le: float | None, gt: float | None, lt: float | None) -> str:
    low = _number(ge) if ge is not None else None
    high = _number(le) if le is not None else None
    if low is not None and high is not None:
        return f" between {low} and {high}"
    parts = [
        f"at least {low}" if low is not None else "",
        f"greater than {_number(gt)}" if gt is not None else "",
        f"at most {high}" if high is not None else "",
        f"less than {_number(lt)}" if lt is not None else "",
    ]
    said = " and ".join(p for p in parts if p)
    return f" {said}" if said else ""


def _length(most: int | None, unit: str) -> str:
    return f" of at most {most} {unit}" if most is not None else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
