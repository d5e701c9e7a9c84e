"""Usage errors the CLI says itself, before sending anything (exit 2, argparse's form): a
command typed unquoted, options that do not go together, a value that cannot be one."""

from __future__ import annotations

import pytest

from scheduler.cli.job_options import job_body
from scheduler.cli.main import build_parser, main


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The last line `scheduler ARGV...` says on stderr, once it exited 2 with nothing on
    stdout."""
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, ""), err
    return err.splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["submit", "echo", "hi"],
            "scheduler submit: error: unrecognized arguments: hi "
            "(quote the command: scheduler submit 'echo hi')",
        ),
        (
            ["submit", "ls", "-la", "/tmp", "--wait"],
            "scheduler submit: error: unrecognized arguments: -la /tmp "
            "(quote the command: scheduler submit 'ls -la /tmp')",
        ),
        (
            ["schedule", "add", "nightly", "--every", "60", "echo", "hi"],
            "scheduler schedule add: error: unrecognized arguments: hi "
            "(quote the command: scheduler schedule add NAME ... 'echo hi')",
        ),
    ],
)
def test_a_command_typed_unquoted_is_told_how_to_quote_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """argparse took the first word as the command and said the rest were `scheduler`'s
    own unrecognized arguments, with the top-level usage."""
    assert usage_error(capsys, *argv) == said


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # A mistyped option is not a command to quote.
        (["submit", "echo hi", "--wiat"], "scheduler: error: unrecognized arguments: --wiat"),
        # Nor is its value: quoting both made them the command's (`make test --priorty 5`).
        (
            ["submit", "make test", "--priorty", "5"],
            "scheduler submit: error: unrecognized arguments: --priorty 5 "
            "(did you mean --priority?)",
        ),
        (
            ["submit", "make test", "--retyr-backoff=5"],
            "scheduler submit: error: unrecognized arguments: --retyr-backoff=5 "
            "(did you mean --retry-backoff?)",
        ),
        (
            ["submit", "make test", "--zzz", "5"],
            "scheduler: error: unrecognized arguments: --zzz 5",
        ),
        (["list", "extra"], "scheduler: error: unrecognized arguments: extra"),
    ],
)
def test_other_unrecognized_arguments_are_said_as_argparse_says_them(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert usage_error(capsys, *argv) == said


@pytest.mark.parametrize(
    ("when", "said"),
    [
        (
            ["--delay", "10", "--run-at", "2026-12-24T06:00:00Z"],
            "--run-at: not allowed with --delay",
        ),
        (
            ["--run-at", "2026-12-24T06:00:00Z", "--delay", "10"],
            "--delay: not allowed with --run-at",
        ),
        (["--after", "job-1", "--delay", "3"], "--delay: not allowed with --after"),
        (
            ["--run-at", "2026-12-24T06:00:00Z", "--after", "job-1"],
            "--after: not allowed with --run-at",
        ),
    ],
)
def test_two_ways_of_saying_when_are_refused_naming_the_flags(
    capsys: pytest.CaptureFixture[str], when: list[str], said: str
) -> None:
    """The API's refusal named its fields (`use run_at or delay_secs, not both`), after a
    round trip; the flags the user typed are one of a kind, as the usage shows them."""
    first, second = said.split(": not allowed with ")
    expected = f"scheduler submit: error: argument {first}: not allowed with argument {second}"
    assert usage_error(capsys, "submit", "true", *when) == expected


def test_the_usage_shows_the_ways_of_saying_when_as_one_of(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    assert "[--run-at TIME | --after JOB_ID | --delay SECS]" in usage


@pytest.mark.parametrize(
    ("after", "said"),
    [
        ("job-3,,job-4", "'job-3,,job-4': an empty job id"),
        ("job-3,", "'job-3,': an empty job id"),
        ("", "'': an empty job id"),
        ("job-3,jb-4", "'job-3,jb-4': 'jb-4' is not a job id like job-42"),
        ("3", "'3': '3' is not a job id like job-42"),
        ("job-3 job-4", "'job-3 job-4': 'job-3 job-4' is not a job id like job-42"),
    ],
)
def test_after_refuses_what_is_not_a_job_id_naming_it(
    capsys: pytest.CaptureFixture[str], after: str, said: str
) -> None:
    """`--after job-3,,job-4` was sent as job-3 and job-4, the empty id left out."""
    argv = ["submit", "true", "--after", "job-1", "--after", after]
    assert usage_error(capsys, *argv) == f"scheduler submit: error: argument --after: {said}"


def test_after_takes_ids_repeated_or_comma_separated() -> None:
    args = build_parser("submit").parse_args(
        ["submit", "true", "--after", "job-1,job-2", "--after", "job-3"]
    )
    assert job_body(args)["after"] == ["job-1", "job-2", "job-3"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["submit", "true", "--delay", "1x"],
            "scheduler submit: error: argument --delay: '1x': use seconds (90) or a length "
            "such as 90s, 5m, 1h30m, 2d",
        ),
        (["submit", "true", "--delay", "-5"], "argument --delay: '-5': use seconds (90)"),
        (["submit", "true", "--retry-backoff", "1.5"], "'1.5': use whole seconds"),
        (
            ["schedule", "add", "n", "--every", "0s", "true"],
            "argument --every: must be at least 1 s",
        ),
        (
            ["schedule", "add", "n", "--every", "5 m", "true"],
            "argument --every: '5 m': use seconds",
        ),
    ],
)
def test_a_length_of_time_the_cli_cannot_read_says_how_to_write_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """`--delay 1h` was `invalid float value: '1h'` (it is 3600 s now); what is still not a
    length says how to write one."""
    assert said in usage_error(capsys, *argv)


def test_schedule_every_takes_a_length_in_units() -> None:
    args = build_parser().parse_args(["schedule", "add", "n", "--every", "1h30m", "true"])
    assert args.every == 5400
