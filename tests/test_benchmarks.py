"""The benchmarks that need nothing but this machine still run (figures are not checked: a
benchmark's figures are its output, not a test's). script_cost.py once broke unnoticed when
a script gained an argument."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_lane_cost_prints_each_case() -> None:
    lines = run_benchmark("benchmarks/lane_cost.py", "--requests", "50", "--repeats", "2")
    assert [line.split("  ")[0] for line in lines] == [
        "GET /jobs/{id}",
        "poll, at capacity",
        "poll, finds a job",
    ]
    assert all("µs of the API's Python per request" in line for line in lines)


def test_script_cost_prints_each_script() -> None:
    lines = run_benchmark("benchmarks/script_cost.py", "--jobs", "30")
    assert [line.split("  ")[0].strip() for line in lines] == [
        "(a script: return 1)",
        "CREATE_JOB",
        "POLL, finds a job",
        "TRANSITION -> running",
        "POLL, node at capacity",
        "TRANSITION -> failed",
        "TRANSITION -> running",
        "TRANSITION -> done",
    ]


def test_script_instructions_prints_each_phase() -> None:
    """The deterministic count (callgrind) of the same phases as script_cost.py."""
    lines = run_benchmark("benchmarks/script_instructions.py", "--jobs", "5")
    assert [line.split("  ")[0].strip() for line in lines] == [
        "CREATE_JOB",
        "POLL, finds a job",
        "TRANSITION, running",
        "POLL, at capacity",
        "TRANSITION, failed, retried",
        "TRANSITION, running again",
        "TRANSITION, done",
        "CANCEL_JOB, finished",
    ]
    assert all(float(line.split()[-2]) > 0 for line in lines)


def test_stored_state_bench_prints_each_phase_and_ratio() -> None:
    argv = ["--delayed", "200", "--schedules", "20", "--calls", "20", "--runs", "2"]
    lines = run_benchmark("benchmarks/stored_state_bench.py", *argv)
    phases = [
        "CREATE_JOB, pending",
        "CREATE_JOB, delayed",
        "POLL, finds a job",
        "PROMOTE_DUE, none due",
        "PROMOTE_DUE, 10 due",
        "DUE_SCHEDULES, none due",
    ]
    assert [line.split("  ")[0].strip() for line in lines] == [p for p in phases for _ in "ers"]
    for name, empty, stored, ratio in zip(
        phases, lines[::3], lines[1::3], lines[2::3], strict=True
    ):
        assert empty.endswith("empty store") and stored.endswith("200 delayed + 20 schedules")
        assert "stored / empty:" in ratio, name
        # The same Redis commands per call whatever is stored: the work is bounded. (Up to
        # one more in the run: the dashboard's series sets a minute's expiry on its first
        # write, and a run may cross a minute.)
        commands = [float(line.split("µs/call")[1].split()[0]) for line in (empty, stored)]
        assert abs(commands[0] - commands[1]) < 0.5, (name, commands)


def test_schedules_bench_prints_each_case() -> None:
    lines = run_benchmark("benchmarks/schedules_bench.py", "--stored", "50", "--runs", "2")
    assert [line.split(",")[0].split(":")[0].strip() for line in lines] == [
        "nothing due",
        "nothing due",
        "nothing due",
        "10 due",
        "10 due",
        "10 due",
    ]


def test_refused_report_cost_prints_each_case() -> None:
    """Against HEAD as "before": the smoke run checks it runs, not what it finds."""
    argv = ["--env-bytes", "20000", "--output-bytes", "1000", "--calls", "2", "--runs", "1"]
    lines = run_benchmark("benchmarks/refused_report_cost.py", *argv, "--before", "HEAD")
    assert [line.split("  ")[0] for line in lines] == [
        f"{script}, {case}"
        for script in ("CHECK_REPORT", "TRANSITION")
        for case in (
            "stranger, the job",
            "stranger, no such job",
            "n2's token, n1's job",
            "n2's token, no such job",
            "n1's token, its job (allowed)",
        )
    ]
    assert all("before / after: " in line for line in lines)


def test_placement_cost_prints_each_case() -> None:
    """Against HEAD as "before": the smoke run checks it runs, not what it finds."""
    argv = ["--jobs", "50", "--calls", "10", "--nodes", "4,5,6", "--against", "HEAD"]
    lines = run_benchmark("benchmarks/placement_cost.py", *argv)
    cases = ["submit", "poll", "submit, asks 1 cpu", "submit, names a node"]
    cases += ["submit, fits no node", "submit, nodes full"]
    cases.append("placement pass, 200 waiting")
    assert [line.split("  ")[0].strip() for line in lines] == [
        f"{case}, {count} nodes" for count in (4, 5, 6) for case in cases
    ]
    assert all("ratio" in line for line in lines)


def test_drain_cost_prints_each_case() -> None:
    lines = run_benchmark("benchmarks/drain_cost.py", "--queued", "0", "5", "--nodes", "2")
    assert [line.split(":")[0].strip() for line in lines] == [
        "0 queued on the node",
        "5 queued on the node",
    ]
    assert "5 moved, 0 unplaced, 0 stayed" in lines[1]


def test_large_job_cost_prints_each_call_and_the_slow_ones() -> None:
    """Tiny and against HEAD as "before": the smoke run checks it runs, not what it finds
    (whether a call is over 1 ms depends on the machine's load)."""
    argv = ["--scale", "0.01", "--small-lives", "5", "--lives", "1", "--rounds", "1"]
    lines = run_benchmark("benchmarks/large_job_cost.py", *argv, "--against", "HEAD")
    kinds = [
        "POST /jobs",
        "poll",
        "PATCH running",
        "PATCH done, outputs",
        "GET /jobs/{id}",
        "GET /jobs/{id}/attempts",
        "PATCH failed, requeued",
        "poll, requeued",
        "PATCH running, requeued",
        "PATCH failed, no retry left",
        "POST /jobs/{id}/retry",
        "poll, retried",
        "PATCH running, retried",
        "DELETE /jobs/{id}, running",
    ]
    assert lines[0].startswith("big job: submit body ")
    assert lines[1].startswith("Redis time of each call on the big job, alone")
    table = lines[2 : 2 + len(kinds)]
    assert [line.split("  ")[0] for line in table] == kinds
    assert all(" µs " in line and "HEAD / ours " in line for line in table)
    rest = lines[2 + len(kinds) :]
    assert rest[0].startswith("INFO commandstats")
    for name in ("ours", "HEAD"):
        gets = [
            line for line in rest if line.startswith(f"GET /jobs/{{id}} on the big job, {name}:")
        ]
        assert len(gets) == 1 and "one Redis command in " in gets[0]
        slow = [
            line
            for line in rest
            if line.startswith(f"slow calls (over 1 ms) among normal traffic, {name}: ")
        ]
        assert len(slow) == 1 and "small lives beside the big ones" in slow[0]


def test_life_cost_prints_each_row() -> None:
    """Against HEAD as "before", both sections: the smoke run checks it runs, not what it
    finds (a job's life, a heartbeat and a poll, each against its floor; then the gap split
    by the featured floor and the floors over HTTP)."""
    argv = ["--stored", "50", "--lives", "20", "--rounds", "1", "--against", "HEAD"]
    lines = run_benchmark("benchmarks/life_cost.py", *argv)
    metrics = ["in scripts", "Redis CPU", "Redis CPU, main", "all commands"]
    rows = [f"{phase}, {metric}" for phase in ("life", "heartbeat", "poll") for metric in metrics]
    for section in ("plain", "features"):
        start = next(i for i, line in enumerate(lines) if line.startswith(f"{section}: 50 stored"))
        assert "ours µs" in lines[start + 1] and "HEAD µs" in lines[start + 1]
        table = lines[start + 2 : start + 2 + len(rows)]
        assert [line.split("  ")[0].strip() for line in table] == rows
        for line in table:
            # ours, floor, ratio, bar, verdict; HEAD's figure, ratio, verdict; ours / HEAD
            *figures, ours_verdict, head, head_ratio, head_verdict, ours_head = line.split()[-9:]
            assert ours_verdict in ("pass", "over") and head_verdict in ("pass", "over")
            for figure in (*figures, head, head_ratio, ours_head):
                float(figure)  # a number, whatever it is
        split = start + 2 + len(rows)
        assert lines[split].startswith(f"{section}, the gap split: ")
        assert "featured µs" in lines[split + 1] and "feat http µs" in lines[split + 1]
        table = lines[split + 2 : split + 2 + len(rows)]
        assert [line.split("  ")[0].strip() for line in table] == rows
        for line in table:
            # featured, ours/featured, featured/floor; floor http, featured http,
            # ours/featured http, featured http/floor http, floor http/floor
            for figure in line.split()[-8:]:
                float(figure)
    assert len(lines) == 2 * 2 * (2 + len(rows))


@pytest.mark.cluster
def test_shard_cost_prints_each_primary() -> None:
    """On its own three-primary cluster: the smoke run checks it runs, not what it finds
    (a life's cost on each primary, sharded, in turn and alone)."""
    lines = run_benchmark("benchmarks/shard_cost.py", "--lives", "20", "--rounds", "1")
    assert lines[0].startswith("3-primary Redis Cluster, 20 lives of each subject a round")
    assert lines[1].startswith("sharded: shard 0 on p")
    assert "in scripts: sharded" in lines[2] and "Redis CPU: sharded" in lines[2]
    table = lines[3:7]
    labels = [f"p{i}, its own lives" for i in range(3)] + ["sum of the primaries"]
    assert [line.split("  ")[0].strip() for line in table] == labels
    for line in table:
        # share; then of each metric: sharded, in turn, ratio, alone, ratio
        figures = line.split()[-11:]
        assert figures[0].endswith("%")
        for figure in figures[1:]:
            float(figure)  # a number, whatever it is
    assert lines[7].startswith("Redis CPU ceiling: sharded ")
    assert len(lines) == 8


def test_script_bounds_prints_each_scenario() -> None:
    """Each worst case the API accepts, tiny (issue 36): its longest call, and its work done."""
    lines = run_benchmark("benchmarks/script_bounds.py", "--scale", "0.005")
    assert [line.split("  ")[0].strip() for line in lines] == [
        "graph cancel",
        "graph failed",
        "chain cancel",
        "large waiters",
        "large retry",
        "large drain",
        "large promote",
        "large sweep",
        "large prune",
        "bulk retry",
        "retry crowded",
        "drain",
        "delete node",
        "create after",
        "ui search",
        "sweep timeouts",
        "promote due",
        "restore rebuild",
        "restore",
        "wide selector",
    ]
    assert all(" longest " in line for line in lines)
    assert "10 nodes; placed on w0 " in lines[19] and "none; the pass placed 100" in lines[19]
    assert "26 of 26 failed" in lines[0] and "last link failed" in lines[2]
    assert "6 of 6 failed" in lines[3] and "5 moved" in lines[5] and "5 pruned" in lines[8]


def test_guess_flood_prints_each_size_and_the_bound() -> None:
    lines = run_benchmark("benchmarks/guess_flood.py", "--sizes", "100,200")
    assert [line.split("addresses")[0].strip() for line in lines] == ["100", "200", "20000"]
    assert lines[-1].endswith("the bar holds 10000")


def test_nodes_scrape_cost_prints_each_page() -> None:
    lines = run_benchmark(
        "benchmarks/nodes_scrape_cost.py", "--nodes", "20", "--jobs", "2", "--scrapes", "1"
    )
    assert lines[0] == "20 nodes, 16 labels each, 2 jobs"
    assert [line.split()[:2] for line in lines[1:]] == [["this", "/metrics"], ["this", "/ui/nodes"]]
    assert all("Redis CPU" in line for line in lines[1:])
