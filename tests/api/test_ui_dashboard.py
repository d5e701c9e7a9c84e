"""The dashboard, /ui (issue 28), through the API: a known sequence of jobs (submitted,
claimed, done, failed) drawn in its charts, each column's values in data attributes and a
<title>, the window's totals beside each chart; the day's window; the nodes' load."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from tests.conftest import ClientFactory, register, report, submit


def attributes(page: str, chart: str, name: str) -> list[str]:
    """data-<name> of every column of the chart `chart`, in order."""
    svg = re.search(rf'<svg id="{chart}".*?</svg>', page, re.S)
    assert svg, chart
    return re.findall(rf' data-{name}="([^"]*)"', svg.group(0))


def figure(page: str, name: str) -> str:
    found = re.search(rf'<b id="fig-{name}">([^<]*)</b>', page)
    assert found, name
    return found.group(1)


def drive(api: TestClient) -> None:
    """Three jobs on n1 (capacity 2): one done, one failed, one running; one waiting."""
    register(api, "n1")
    ids = [submit(api, command=f"echo {i}")["job_id"] for i in range(4)]
    for job_id, ending in zip(ids, ("done", "failed", None), strict=False):
        assert report(api, job_id, "running").status_code == 200
        if ending:
            assert report(api, job_id, ending, exit_code=int(ending == "failed")).status_code == 200


def test_the_dashboard_draws_a_known_sequence_of_jobs(make_client: ClientFactory) -> None:
    api = make_client(max_jobs_per_node=2, max_job_retries=0)
    drive(api)
    page = api.get("/ui").text
    # Summed over the columns (the steps may straddle a minute), and the window's figures.
    for name, count in (("submitted", 4), ("started", 3), ("done", 1), ("failed", 1)):
        assert sum(int(v) for v in attributes(page, "flow", name)) == count, name
        assert figure(page, name) == str(count)
    assert len(attributes(page, "flow", "submitted")) == 60  # a column a minute
    # The gauges' last column is now's live count: 1 pending (queued), 1 running.
    assert attributes(page, "queue", "queued")[-1] == "1"
    assert attributes(page, "queue", "running")[-1] == "1"
    assert (figure(page, "queued"), figure(page, "running")) == ("1 now", "1 now")
    # Named by the statuses it counts, not `waiting` (a status of its own).
    assert (
        'pending + delayed <b id="fig-queued">' in page and "<h2>Pending and running</h2>" in page
    )
    # Three first claims, each within a generous bound of its submit; p50 <= p95.
    p50 = [v for v in attributes(page, "waits", "p50") if v]
    p95 = [v for v in attributes(page, "waits", "p95") if v]
    assert p50 and p95 and float(p50[-1]) <= float(p95[-1]) <= 300
    assert figure(page, "p50").startswith("≤ ")
    # Each column says its values on hover.
    assert re.search(
        r"<title>\d\d:\d\d: submitted \d+, attempts started \d+, done \d+, failed \d+", page
    )
    # n1 runs 1 of its 2.
    assert re.search(r'data-running="1" data-capacity="2"', page)
    assert "1 / 2" in page


def test_started_says_it_counts_attempts_where_the_others_count_jobs(
    make_client: ClientFactory,
) -> None:
    """One job failed twice (a retry allowed): one job submitted and failed, as the jobs list
    counts it, and two attempts started. "started 2" beside "failed 1" read as two jobs."""
    api = make_client(max_job_retries=1)
    register(api, "n1")
    job_id = submit(api, command="false")["job_id"]
    for _ in range(2):
        assert report(api, job_id, "running").status_code == 200
        assert report(api, job_id, "failed", exit_code=1).status_code == 200
    page = api.get("/ui").text
    figures = {name: figure(page, name) for name in ("submitted", "started", "failed")}
    assert figures == {"submitted": "1", "started": "2", "failed": "1"}
    assert '> attempts started <b id="fig-started">' in page
    assert "jobs per minute" not in page and ">per minute</div>" in page
    assert "attempts started counts every start, a retry's too" in page
    listed = api.get("/ui/jobs").text
    assert re.search(r'id="count-failed" href="[^"]*">failed 1</a>', listed)  # the same job


def test_failed_counts_endings_where_the_tab_counts_jobs_and_the_page_says_so(
    make_client: ClientFactory,
) -> None:
    """A job failed, retried by hand and failed again, and a cancelled one: the dashboard's
    failed counts three endings, the jobs list's failed tab the two jobs failed now."""
    client = make_client(max_job_retries=0)
    register(client, "n1")
    job_id = submit(client, command="false")["job_id"]
    for attempt in range(2):
        if attempt:
            assert client.post(f"/jobs/{job_id}/retry").status_code == 200
        assert report(client, job_id, "running").status_code == 200
        assert report(client, job_id, "failed", exit_code=1).status_code == 200
    cancelled = submit(client, command="sleep 60")["job_id"]
    assert client.delete(f"/jobs/{cancelled}").status_code == 200
    page = client.get("/ui").text
    assert figure(page, "failed") == "3"
    assert "a cancelled job ends failed, and a job retried by hand counts each time" in page
    assert "tabs count the jobs in each status now" in page
    listed = client.get("/ui/jobs").text
    assert re.search(r'id="count-failed" href="[^"]*">failed 2</a>', listed)


def test_the_day_draws_a_column_per_quarter_hour(client: TestClient) -> None:
    drive(client)
    page = client.get("/ui", params={"window": "day"}).text
    assert len(attributes(page, "flow", "submitted")) == 96
    assert sum(int(v) for v in attributes(page, "flow", "submitted")) == 4
    assert 'id="window-day"' in page and 'class="current" id="window-day"' in page
    # The pause keeps the window.
    assert 'href="/ui?window=day&amp;refresh=off"' in page


def y_ticks(page: str, chart: str) -> list[str]:
    """The values on the y axis of `chart`, top to bottom."""
    found = re.search(rf'<div class="yaxis" id="{chart}-y">(.*?)</div>', page)
    assert found, chart
    return re.findall(r"<span>([^<]*)</span>", found.group(1))


def test_each_chart_has_values_on_its_y_axis(make_client: ClientFactory) -> None:
    """At its three grid lines: the top (a round number over the highest value), half, 0;
    the waits' at the longest bucket, the middle one's bound and 0."""
    api = make_client(max_jobs_per_node=2, max_job_retries=0)
    drive(api)  # 4 submitted in the window, 2 a minute at most: the flow's top is 2 or 5
    page = api.get("/ui").text
    top = max(int(v) for name in ("submitted", "started") for v in attributes(page, "flow", name))
    flow = y_ticks(page, "flow")
    assert float(flow[0]) >= top and float(flow[1]) == float(flow[0]) / 2 and flow[2] == "0"
    assert y_ticks(page, "queue") == ["1", "0.5", "0"]  # 1 pending, 1 running at most
    assert y_ticks(page, "waits") == ["&gt; 30 min", "5 s", "0"]  # escaped
    assert y_ticks(api.get("/ui?window=day").text, "flow")[2] == "0"


def test_an_empty_deployment_draws_empty_charts(client: TestClient) -> None:
    page = client.get("/ui").text
    assert set(attributes(page, "flow", "failed")) == {"0"}
    assert set(attributes(page, "waits", "p95")) == {""}
    assert figure(page, "p95") == "-" and "no nodes" in page
