"""The job options (cli/job_options.py): one per submitted field of the job model, the same
for `submit` and `schedule add`, each landing in the body under its field's name."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from scheduler.cli import job_options
from scheduler.cli.job_options import OPTIONS, SPECS, OptionError, job_body, options
from scheduler.cli.main import build_parser
from scheduler.models.fields import JobField, Kind
from scheduler.models.job import JOB_FIELDS, REQUEST_ONLY
from scheduler.models.schedule import NOT_IN_TEMPLATE

SUBMITTED = [f.name for f in JOB_FIELDS if f.submitted] + [name for name, _, _ in REQUEST_ONLY]
KINDS = {f.name: f.kind for f in JOB_FIELDS}
# A value of each kind as typed, and the body's value it gives.
TYPED: dict[Kind | None, tuple[str, Any]] = {
    Kind.TEXT: ("x", "x"),
    Kind.TIMESTAMP: ("2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z"),
    Kind.INT: ("3", 3),
    Kind.LIST: ("job-1,job-2", ["job-1", "job-2"]),
    Kind.OBJECT: ("A=1", {"A": "1"}),
    Kind.SELECTOR: ("zone=a,b", {"zone": ["a", "b"]}),
    None: ("1.5", 1.5),  # delay_secs, REQUEST_ONLY's float
}


def test_every_submitted_field_has_its_own_option() -> None:
    """A new submitted field (models/job.py) needs its entry in job_options.SPECS: its flag
    and help. Without one it gets a derived `--its-name`, but this fails until it is written."""
    missing = sorted(set(SUBMITTED) - set(SPECS))
    assert not missing, f"add these fields' options to cli/job_options.py SPECS: {missing}"
    assert not set(SPECS) - set(SUBMITTED), "SPECS names a field the job does not submit"
    assert sorted(o.field for o in OPTIONS) == sorted(SUBMITTED)


def _argv(option: job_options.Option) -> tuple[list[str], Any]:
    if option.kwargs.get("action") == "store_const":
        return [option.spec.flag], option.kwargs["const"]
    typed, value = TYPED[KINDS.get(option.field)]
    if not option.spec.flag.startswith("-"):
        return [], "echo hi"  # the positional, given below
    return [option.spec.flag, typed], value


@pytest.mark.parametrize("command", [["submit"], ["schedule", "add", "s1", "--every", "60"]])
@pytest.mark.parametrize("option", OPTIONS, ids=[o.field for o in OPTIONS])
def test_each_option_sets_its_field_from_submit_and_schedule_add(
    command: list[str], option: job_options.Option
) -> None:
    argv, value = _argv(option)
    parser = build_parser(command[0])
    if command[0] == "schedule" and option.field in NOT_IN_TEMPLATE:
        with pytest.raises(SystemExit):  # not offered: a template cannot hold it
            parser.parse_args([*command, *argv, "echo hi"])
        return
    body = job_body(parser.parse_args([*command, *argv, "echo hi"]))
    assert body == {"command": "echo hi", option.field: value}


def test_submit_and_schedule_add_take_the_same_job_options() -> None:
    def job_flags(*argv: str) -> set[str]:
        parser = build_parser(argv[0])
        for name in argv:
            parser = _sub(parser, name)
        return {
            flag
            for action in parser._actions
            if action.dest.startswith("job_")
            for flag in action.option_strings or [action.dest]
        }

    refused = {o.spec.flag for o in OPTIONS if o.field in NOT_IN_TEMPLATE}
    assert refused == {"--run-at", "--after"}
    assert job_flags("submit") - refused == job_flags("schedule", "add")
    assert "--after" in job_flags("submit") and "--priority" in job_flags("schedule", "add")


def _sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen: argparse.ArgumentParser = action.choices[name]
            return chosen
    raise KeyError(name)


def test_a_new_field_gets_an_option_read_by_its_kind() -> None:
    gpus = JobField("gpus", int, Kind.INT, False, False, True)
    zones = JobField("zones", list[str], Kind.LIST, False, False, True)
    derived = {o.field: o for o in options([*JOB_FIELDS, gpus, zones])}
    parser = argparse.ArgumentParser()
    for name in ("gpus", "zones"):
        derived[name].add_to(parser)
    args = parser.parse_args(["--gpus", "2", "--zones", "a,b", "--zones", "c"])
    assert derived["gpus"].spec.flag == "--gpus" and args.job_gpus == 2
    assert derived["zones"].read(args.job_zones) == ["a", "b", "c"]


def test_node_and_select_make_one_selector_and_none_sends_nothing() -> None:
    args = build_parser("submit").parse_args(
        ["submit", "--select", "zone=a", "--node", "n1", "--select", "gpu=1", "x"]
    )
    assert job_body(args)["node_selector"] == {"zone": "a", "gpu": "1", "node.id": "n1"}
    assert job_body(build_parser("submit").parse_args(["submit", "x"])) == {"command": "x"}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--env", "NOEQUALS"], "--env 'NOEQUALS': use NAME=VALUE"),
        (["--select", "zone"], "--select 'zone': use KEY=VALUE or KEY=VALUE,VALUE"),
    ],
)
def test_a_bad_pair_names_its_flag(argv: list[str], says: str) -> None:
    args = build_parser("submit").parse_args(["submit", *argv, "x"])
    with pytest.raises(OptionError, match=says):
        job_body(args)
