"""The benchmarks that need nothing but this machine still run (figures are not checked: a
benchmark's figures are its output, not a test's). script_cost.py once broke unnoticed when
a script gained an argument. Each runs as `python -m benchmarks.<name>` from the root, on
the shared harness (benchmarks/harness.py): none patches sys.path or starts a Redis of its
own."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import makespan_plan as makespan

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def run_benchmark(name: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _code_strings(tree: ast.Module) -> list[str]:
    """The string constants of a module but its docstrings (prose may name a server)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _misdeeds(path: Path) -> list[str]:
    """What a benchmark module does that only the harness may: patch the import path,
    import the suite's Redis servers, or name a Redis binary to start."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [
        f"sys.path at line {node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    if path.name == "harness.py":
        return found
    servers_of_the_suite = ("tests.redis_server", "tests.redis_cluster")
    for node in ast.walk(tree):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        found += [
            f"imports {name} at line {node.lineno}"  # type: ignore[attr-defined]
            for name in names
            if name in servers_of_the_suite
        ]
    servers = ("redis-server", "valkey-server", "redis_server", "redis_cluster")
    found += [f"names {text!r}" for text in _code_strings(tree) if text.startswith(servers)]
    return found


def test_the_rule_sees_a_patch_and_a_private_server(tmp_path: Path) -> None:
    """The check below can fail: it finds each thing it forbids."""
    script = tmp_path / "bad.py"
    script.write_text(
        '"""Starts a redis-server."""\n'
        "import subprocess, sys\n"
        "from tests.redis_server import redis_server\n"
        "sys.path.insert(0, '.')\n"
        "subprocess.Popen(['redis-server', '--port', '0'])\n"
    )
    assert [what.split(" at ")[0] for what in _misdeeds(script)] == [
        "sys.path",
        "imports tests.redis_server",
        "names 'redis-server'",
    ]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_benchmark_patches_the_path_or_starts_its_own_redis(path: Path) -> None:
    assert _misdeeds(path) == []


MODULES = [path.stem for path in SCRIPTS if path.name != "__init__.py"]


@pytest.mark.parametrize("name", MODULES)
def test_each_benchmark_imports_and_answers_help(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Imported as the package's module; one with a command line prints its usage."""
    module = importlib.import_module(f"benchmarks.{name}")
    if not hasattr(module, "main"):
        return
    monkeypatch.setattr(sys, "argv", [f"benchmarks.{name}", "--help"])
    with pytest.raises(SystemExit) as ended:
        module.main()
    assert ended.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


def test_lane_cost_prints_each_case() -> None:
    lines = run_benchmark("lane_cost", "--requests", "50", "--repeats", "2")
    assert [line.split("  ")[0] for line in lines] == [
        "GET /jobs/{id}",
        "poll, at capacity",
        "poll, finds a job",
    ]
    assert all("µs of the API's Python per request" in line for line in lines)


def test_script_cost_prints_each_script() -> None:
    lines = run_benchmark("script_cost", "--jobs", "30")
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
    header, *lines = run_benchmark("script_instructions", "--jobs", "5")
    assert "instructions/call" in header
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
    assert all(float(line.split()[-1]) > 0 for line in lines)


def test_life_commands_counts_each_step_of_a_life() -> None:
    """MONITOR's commands of create, the poll, running and done, counted by name."""
    header, *lines = run_benchmark("life_commands", "--stored", "5")
    assert "commands" in header
    totals = {line.split(",")[0]: int(line.split()[-1]) for line in lines if ", all " in line}
    assert list(totals) == ["create", "poll", "running", "done", "life"]
    assert all(count > 0 for count in totals.values())
    assert totals["life"] == sum(totals[step] for step in ("create", "poll", "running", "done"))


def test_lua_profile_counts_each_step_by_function() -> None:
    """The scripts' Lua replayed outside Redis (lua5.1, lua-cjson): each step's VM
    instructions by function, its body and the life's; the replay ran every command."""
    lines = run_benchmark("lua_profile", "--stored", "5", "--top", "3")
    titles = [line.split("  ")[0].split(" (")[0] for line in lines if "VM instr" in line]
    assert titles == ["create", "poll", "running", "done", "life"]
    totals = [int(line.split()[-2]) for line in lines if line.startswith("all but the prelude")]
    assert len(totals) == 5 and all(t > 0 for t in totals) and totals[-1] == sum(totals[:-1])
    assert any(line.startswith("(body)") for line in lines)


def test_stored_state_bench_prints_each_phase_and_ratio() -> None:
    argv = ["--delayed", "200", "--schedules", "20", "--calls", "20", "--runs", "2"]
    title, header, *lines = run_benchmark("stored_state_bench", *argv)
    assert title == "empty store against 200 delayed + 20 schedules"
    assert "empty µs/call" in header and "stored commands" in header
    assert [line.split("  ")[0].strip() for line in lines] == [
        "CREATE_JOB, pending",
        "CREATE_JOB, delayed",
        "POLL, finds a job",
        "PROMOTE_DUE, none due",
        "PROMOTE_DUE, 10 due",
        "DUE_SCHEDULES, none due",
    ]
    for line in lines:
        # empty µs, stored µs, their ratio; empty commands, stored commands, their ratio
        _, _, _, empty, stored, _ = (float(figure) for figure in line.split()[-6:])
        # The same Redis commands per call whatever is stored: the work is bounded. (Up to
        # one more in the run: the dashboard's series sets a minute's expiry on its first
        # write, and a run may cross a minute.)
        assert abs(empty - stored) < 0.5, line


def test_schedules_bench_prints_each_case() -> None:
    header, *lines = run_benchmark("schedules_bench", "--stored", "50", "--runs", "2")
    assert "ms per run" in header
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
    header, *lines = run_benchmark("refused_report_cost", *argv, "--before", "HEAD")
    assert header.rstrip().endswith("before / after")
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
    assert all(float(line.split()[-1]) > 0 for line in lines)


def test_placement_cost_prints_each_case() -> None:
    """Against HEAD as "before": the smoke run checks it runs, not what it finds."""
    argv = ["--jobs", "50", "--calls", "10", "--nodes", "4,5,6", "--against", "HEAD"]
    header, *lines = run_benchmark("placement_cost", *argv)
    assert "HEAD µs/call" in header and header.rstrip().endswith("ratio")
    cases = ["submit", "poll", "submit, asks 1 cpu", "submit, names a node"]
    cases += ["submit, fits no node", "submit, nodes full"]
    cases.append("placement pass, 200 waiting")
    assert [line.split("  ")[0].strip() for line in lines] == [
        f"{case}, {count} nodes" for count in (4, 5, 6) for case in cases
    ]
    for line in lines:
        for figure in line.split()[-3:]:  # ours, HEAD's, the ratio
            float(figure)


def test_drain_cost_prints_each_case() -> None:
    lines = run_benchmark("drain_cost", "--queued", "0", "5", "--nodes", "2")
    assert [line.split(":")[0].strip() for line in lines] == [
        "0 queued on the node",
        "5 queued on the node",
    ]
    assert "5 moved, 0 unplaced, 0 stayed" in lines[1]


def test_large_job_cost_prints_each_call_and_the_slow_ones() -> None:
    """Tiny and against HEAD as "before": the smoke run checks it runs, not what it finds
    (whether a call is over 1 ms depends on the machine's load)."""
    argv = ["--scale", "0.01", "--small-lives", "5", "--lives", "1", "--rounds", "1"]
    lines = run_benchmark("large_job_cost", *argv, "--against", "HEAD")
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
    assert "commands" in lines[2] and lines[2].rstrip().endswith("HEAD / ours")
    table = lines[3 : 3 + len(kinds)]
    assert [line.split("  ")[0] for line in table] == kinds
    assert all(" µs " in line for line in table)
    rest = lines[3 + len(kinds) :]
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
    lines = run_benchmark("life_cost", *argv)
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
    lines = run_benchmark("shard_cost", "--lives", "20", "--rounds", "1")
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
    header, *lines = run_benchmark("script_bounds", "--scale", "0.005")
    assert "longest" in header and "done in" in header
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
    assert "10 nodes; placed on w0 " in lines[19] and "none; the pass placed 100" in lines[19]
    assert "26 of 26 failed" in lines[0] and "last link failed" in lines[2]
    assert "6 of 6 failed" in lines[3] and "5 moved" in lines[5] and "5 pruned" in lines[8]


def test_guess_flood_prints_each_size_and_the_bound() -> None:
    header, *lines = run_benchmark("guess_flood", "--sizes", "100,200")
    assert "walking / heap" in header
    assert [line.split("addresses")[0].strip() for line in lines] == ["100", "200", "20000"]
    assert lines[-1].endswith("the bar holds 10000")


def test_nodes_scrape_cost_prints_each_page() -> None:
    lines = run_benchmark("nodes_scrape_cost", "--nodes", "20", "--jobs", "2", "--scrapes", "1")
    assert lines[0] == "20 nodes, 16 labels each, 2 jobs"
    assert [line.split()[:2] for line in lines[1:]] == [["this", "/metrics"], ["this", "/ui/nodes"]]
    assert all("Redis CPU" in line for line in lines[1:])


def test_makespan_ideal_counts_the_dead_node_until_it_died() -> None:
    """The makespan benchmark's ideal (its pure parts; the run itself takes minutes)."""
    assert makespan.speeds(4) == [1.0, 0.75, 0.5, 0.25]
    work = makespan.works(50, 0.1, 1.5, seed=40)
    assert work == makespan.works(50, 0.1, 1.5, seed=40) and 0.1 <= min(work) <= max(work) <= 1.5
    # 4 s of work, capacity 1.5/s until node 0 dies at 1 s (1.5 done), then 0.5/s: 1 + 5.
    assert makespan.ideal([1, 1, 1, 1], [1, 0.5], 1, dead=0, died_at=1).secs == 6
    assert makespan.ideal([1, 1, 1, 1], [1, 0.5], 1, dead=0, died_at=3).secs == 4 / 1.5
    # One long job: no split of it runs faster than on the fastest node.
    assert makespan.ideal([3], [1, 1], 2, dead=1, died_at=9).secs == 3


Step = tuple[str, str, str, float, str]  # job, status, node, at, "old status@old node"


def _events(steps: list[Step]) -> list[makespan.Event]:
    """The events of `steps`, numbered in their order."""
    return [
        makespan.Event(number, job, status, node, at, *old.split("@"))
        for number, (job, status, node, at, old) in enumerate(steps)
    ]


def test_makespan_timeline_finds_idle_nodes_lost_runs_and_faults() -> None:
    """Two nodes of one slot; n0 dies at t=3 running j1, with j3 queued behind it; n1 sits
    idle from 2 to 6 (its queue empty, j3 waiting on n0) until the sweep moves both."""
    story: list[Step] = [
        ("j1", "pending", "n0", 0, "@"),
        ("j2", "pending", "n1", 0, "@"),
        ("j3", "pending", "n0", 0, "@"),
        ("j2", "running", "n1", 1, "pending@n1"),
        ("j1", "running", "n0", 1, "pending@n0"),
        ("j2", "done", "n1", 2, "running@n1"),
        ("j1", "pending", "n1", 6, "running@n0"),
        ("j3", "pending", "n1", 6, "pending@n0"),
        ("j3", "running", "n1", 7, "pending@n1"),
        ("j3", "done", "n1", 8, "running@n1"),
        ("j1", "running", "n1", 8, "pending@n1"),
        ("j1", "done", "n1", 9, "running@n1"),
    ]
    events = _events(story)
    work = {"j1": 1.0, "j2": 1.0, "j3": 1.0}
    line = makespan.timeline(events, work, ["n0", "n1"], 1, dead="n0", died_at=3)
    assert line.problems == [] and line.makespan == 9
    n0, n1 = line.nodes["n0"], line.nodes["n1"]
    assert (n0.done, n0.lost, n1.done, n1.lost) == (0, 1, 3, 0)
    assert (n0.longest_idle, n0.free_slot_secs) == (1, 1)  # 0-1: j2 waited on n1
    assert (n1.longest_idle, n1.free_slot_secs) == (4, 5)  # 0-1 and 2-6
    assert n1.work / n1.busy == 1.0
    twice = _events([*story, ("j2", "done", "n1", 10, "running@n1")])
    moved = _events([*story[:5], ("j2", "pending", "n0", 2, "running@n1"), *story[5:]])
    assert makespan.timeline(twice, work, ["n0", "n1"], 1, "n0", 3).problems == [
        "j2: ended ['done', 'done'], not once done"
    ]
    assert makespan.timeline(moved, work, ["n0", "n1"], 1, "n0", 3).problems == [
        "j2: left running on n1 for pending",
        "j2: ran 1 times, 1 of them lost",
    ]


def test_client_overhead_prints_each_call_and_the_ratios() -> None:
    lines = run_benchmark("client_overhead", "--calls", "20", "--rounds", "2")
    assert [line.split("  ")[0] for line in lines[2:6]] == [
        "GET /jobs/{id}, client.job",
        "GET /jobs/{id}, raw httpx",
        "POST /jobs, client.submit",
        "POST /jobs, raw httpx",
    ]
    assert [line.split(":")[0] for line in lines[6:]] == ["GET /jobs/{id}", "POST /jobs"]


def test_key_check_prints_each_case() -> None:
    """Against HEAD as today's API: the smoke run checks it runs, not what it finds."""
    argv = ["--calls", "20", "--rounds", "2", "--lane-requests", "20"]
    argv += ["--requests", "20", "--e2e-rounds", "1"]
    lines = run_benchmark("key_check", *argv, "--before", "HEAD")
    labels = [line.split("  ")[0] for line in lines if not line.startswith(("#", " "))]
    assert labels == [
        "today's rule, the admin key",
        "today's rule, a wrong key",
        "door, admin key, 0 named keys",
        "door, admin key, 1000 named keys",
        "door, a named key of 1",
        "door, a named key of 10",
        "door, a named key of 1000",
        "door, wrong key, 0 named keys",
        "door, wrong key, 1000 named keys",
        "door, wrong tka_ key, 1000 named",
        "an empty call",
        "lane, the admin key",
        "lane, a named submitter of 1000",
        "HEAD, the admin key",
        "now, the admin key",
        "now, a named submitter",
        "now, a named reader",
        "now, a named submitter / admin",
        "now, a named reader / admin",
    ]


def test_each_life_ablation_fits_the_library_and_changes_it() -> None:
    """Each part taken out rewrites the library's text (a change of the scripts that a part
    no longer fits fails here, not as a figure of nothing); `nothing` leaves it as it is."""
    from benchmarks import life_ablation
    from benchmarks.script_instructions import _library

    code = _library()
    for name in life_ablation.VARIANTS:
        changed = life_ablation.variant_library(code, name) != code
        assert changed == (name != "nothing"), name
    with pytest.raises(ValueError, match="matches nothing"):
        life_ablation.Rewrite("no such text", "").apply(code, "a part")


def test_life_ablation_prints_each_part_taken_out() -> None:
    """The life counted as it is, then without each part asked for (callgrind)."""
    lines = run_benchmark(
        "life_ablation", "--stored", "5", "--lives", "2", "--parts", "nothing,events"
    )
    assert lines[0].startswith("a life as it is: ")
    rows = {line.split("  ")[0]: line.split() for line in lines[2:4]}
    assert list(rows) == ["nothing", "events"]
    assert json.loads(lines[-1])["life"] > 0  # (two lives are too few for their figures)


def test_life_functions_ranks_redis_functions_and_reads_callgrind_dumps(tmp_path: Path) -> None:
    """The life's Redis functions by cost (callgrind); a dump read as callgrind writes it,
    names given once and a call's cost counted to its callee, not to its caller's own."""
    from benchmarks.life_functions import read_dump

    lines = run_benchmark("life_functions", "--stored", "5", "--lives", "2", "--top", "3")
    assert lines[0].startswith("a life: ")
    ranked = lines.index(next(line for line in lines if line.startswith("the functions")))
    assert len(lines) - ranked - 1 == 3
    dump = tmp_path / "cg.1"
    dump.write_text(
        "events: Ir\nfn=(1) caller\n1 10\ncfn=(2) callee\ncalls=1 0\n2 30\n+1 5\n"
        "fn=(2)\n3 30\nfn=(1)\n4 1\n"
    )
    costs = read_dump(str(dump))
    assert costs.own == {"caller": 16, "callee": 30}
    assert costs.called == {"callee": 30}
    assert costs.total == 46
