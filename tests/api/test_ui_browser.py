"""The web UI in a real headless Chromium (Debian's chromium and chromium-driver; .ci/run
installs them) against a real API process with a key: login, the jobs list newest first, its
filters and paging, a job's page, the nodes page, the schedules page and its pause button,
the failed list's bulk retry."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from scheduler.api.http import UI_COOKIE
from tests.keys import API_KEY as KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix

OPERATOR = {"Authorization": f"Bearer {KEY}"}
JOBS = 55  # more than a page (50)


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    # Its nodes, registered once, stay live however long the module's tests take on a loaded
    # machine (NODE_TTL_SECS: past the default 30 s the nodes page showed them unhealthy and
    # a retry found no node).
    env = scheduler_env(
        redis_url,
        unique_prefix("ui-browser"),
        TINYAWS_API_KEY=KEY,
        AGENT_AUTH="token",
        NODE_TTL_SECS="600",
    )
    with api_replicas(1, env) as urls:
        url = urls[0]
        for node in ("node-a", "node-b"):
            body = {"id": node, "hostname": node, "cpu_count": 2}
            assert httpx.post(f"{url}/nodes/register", json=body, headers=OPERATOR).is_success
        for i in range(1, JOBS + 1):
            job = {"command": f"echo {i}", "env_vars": {"SECRET_TOKEN": "hunter2"}}
            assert httpx.post(f"{url}/jobs", json=job, headers=OPERATOR).status_code == 201
        # job-1 (on node-a) runs and finishes with output.
        for report in (
            {"status": "running"},
            {"status": "done", "exit_code": 0, "stdout": "one\n"},
        ):
            assert httpx.patch(f"{url}/jobs/job-1", json=report, headers=OPERATOR).is_success
        service = {"node_id": "node-b", "port": 8080, "pid": 77}
        assert httpx.post(f"{url}/services", json=service, headers=OPERATOR).status_code == 201
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    from tests.chromium import headless_chromium

    driver = headless_chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def ui(api: str, browser: WebDriver) -> WebDriver:
    """A browser logged in to the UI."""
    browser.get(f"{api}/ui")
    assert browser.current_url == f"{api}/ui/login"  # no cookie yet: the login form
    browser.find_element(By.ID, "key").send_keys("wrong")
    click(browser, By.ID, "login")
    assert "wrong key" in browser.page_source
    browser.find_element(By.ID, "key").send_keys(KEY)
    click(browser, By.ID, "login")
    assert browser.current_url == f"{api}/ui"  # the home: the dashboard
    return browser


def click(browser: WebDriver, by: str, value: str) -> None:
    """Click and wait for the page it loads (a click returns before a form's answer)."""
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(by, value).click()
    WebDriverWait(browser, 10).until(lambda _: not _attached(old))
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def _attached(element: object) -> bool:
    try:
        element.is_enabled()  # type: ignore[attr-defined]
    except Exception:  # StaleElementReferenceException: the old page is gone
        return False
    return True


def job_ids(browser: WebDriver) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tr td:first-child a")
    return [row.text for row in rows]


def test_jobs_newest_first_and_paged(api: str, ui: WebDriver) -> None:
    ui.get(f"{api}/ui/jobs")
    assert job_ids(ui) == [f"job-{n}" for n in range(JOBS, JOBS - 50, -1)]
    assert ui.find_element(By.CSS_SELECTOR, "body[data-refresh]")
    click(ui, By.ID, "older")
    assert job_ids(ui) == [f"job-{n}" for n in range(5, 0, -1)]
    assert not ui.find_elements(By.ID, "older")
    click(ui, By.ID, "newest")
    assert job_ids(ui)[0] == f"job-{JOBS}"


def test_filters_by_status_and_node(api: str, ui: WebDriver) -> None:
    ui.get(f"{api}/ui/jobs")
    Select(ui.find_element(By.ID, "status")).select_by_value("done")
    click(ui, By.ID, "filter")
    assert job_ids(ui) == ["job-1"]
    assert "status=done" in ui.current_url
    Select(ui.find_element(By.ID, "status")).select_by_value("")
    ui.find_element(By.ID, "node_id").send_keys("node-b")
    click(ui, By.ID, "filter")
    shown = job_ids(ui)
    assert shown and all(int(j.split("-")[1]) % 2 == 0 for j in shown)  # node-b: even jobs
    nodes = {td.text for td in ui.find_elements(By.CSS_SELECTOR, "#jobs tr td:nth-child(2)")}
    assert nodes == {"node-b"}


def fields(browser: WebDriver, table: str) -> dict[str, str]:
    """A job page's table of `table` (summary, request) as {heading: text}, in order."""
    return {
        row.find_element(By.TAG_NAME, "th").text: row.find_element(By.TAG_NAME, "td").text
        for row in browser.find_elements(By.CSS_SELECTOR, f"#{table} tr")
    }


def test_a_jobs_page_shows_its_fields_and_output(api: str, ui: WebDriver) -> None:
    ui.get(f"{api}/ui/jobs?status=done")
    click(ui, By.LINK_TEXT, "job-1")
    assert ui.current_url == f"{api}/ui/jobs/job-1"
    summary = fields(ui, "summary")
    assert list(summary)[:3] == ["status", "exit code", "ran for"]  # no reason: it is done
    assert (summary["status"], summary["node"], summary["exit code"]) == ("done", "node-a", "0")
    request = fields(ui, "request")
    assert ui.find_element(By.ID, "command").text == "echo 1"  # under the heading, once
    assert "command" not in request and "SECRET_TOKEN" in request["environment"]
    assert "" not in request.values() and "hunter2" not in ui.page_source  # set fields only
    assert ui.find_element(By.ID, "stdout").text == "one"
    assert [pre.text for pre in ui.find_elements(By.TAG_NAME, "pre")] == ["echo 1", "one"]
    assert not ui.find_elements(By.CSS_SELECTOR, "body[data-refresh]")  # final


def test_the_nodes_page_shows_health_and_queues(api: str, ui: WebDriver) -> None:
    ui.get(f"{api}/ui/nodes")
    rows = {
        cells[0].text: [c.text for c in cells[1:]]
        for row in ui.find_elements(By.CSS_SELECTOR, "#nodes tr")
        if (cells := row.find_elements(By.TAG_NAME, "td"))
    }
    assert set(rows) == {"node-a", "node-b"}
    health, seen, cpus, memory, labels, pending, running, drain = rows["node-a"]
    assert health == "healthy" and (seen == "just now" or seen.endswith(" ago"))
    assert (cpus, memory, labels) == ("2", "", "")  # registered with 2 cpus only
    assert drain == "Drain" and ui.find_element(By.ID, "drain-node-a").is_displayed()
    assert (pending, running) == (str((JOBS + 1) // 2 - 1), "0 / 1")  # job-1 is done
    assert rows["node-b"][5] == str(JOBS // 2)
    services = ui.find_element(By.ID, "services").text
    assert "svc-1 node-b running 8080 77" in services
    by_status = ui.find_element(By.ID, "by-status").text
    assert "pending 54" in by_status and "done 1" in by_status


def test_a_cancel_from_the_ui_cancels(api: str, ui: WebDriver) -> None:
    ui.get(f"{api}/ui/jobs/job-3")
    # A question first: the real button shows only once it is opened; "Keep it" keeps it.
    assert not ui.find_element(By.ID, "cancel").is_displayed()
    ui.find_element(By.ID, "cancel-ask").click()
    assert ui.find_element(By.ID, "cancel").is_displayed()
    assert "Cancel job-3?" in ui.find_element(By.ID, "cancel-confirm").text
    click(ui, By.ID, "keep")
    assert httpx.get(f"{api}/jobs/job-3", headers=OPERATOR).json()["status"] == "pending"
    assert not ui.find_element(By.ID, "cancel").is_displayed()  # the question closed again
    ui.find_element(By.ID, "cancel-ask").click()
    click(ui, By.ID, "cancel")
    assert ui.current_url == f"{api}/ui/jobs/job-3"
    summary = fields(ui, "summary")
    assert (summary["status"], summary["reason"]) == ("cancelled", "cancelled on request by admin")
    assert not ui.find_elements(By.ID, "cancel")  # a final job has no button
    job = httpx.get(f"{api}/jobs/job-3", headers=OPERATOR).json()
    assert (job["status"], job["failure_reason"]) == ("failed", "cancelled")
    ui.get(f"{api}/ui/jobs?status=failed")  # the list says why too
    row = ui.find_element(By.CSS_SELECTOR, "#jobs tr:nth-child(2)").text
    assert row.startswith("job-3 ") and " cancelled " in row and " failed " not in row
    # A failed job offers a retry: it starts over, pending.
    ui.get(f"{api}/ui/jobs/job-3")
    click(ui, By.ID, "retry")
    assert ui.current_url == f"{api}/ui/jobs/job-3"
    assert fields(ui, "summary")["status"] == "pending"
    assert ui.find_elements(By.ID, "cancel-ask")  # and it may be cancelled again


def test_the_schedules_page_lists_them_and_pauses_and_resumes(api: str, ui: WebDriver) -> None:
    for body in (
        {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Paris",
         "job": {"command": "backup", "env_vars": {"DB_PASSWORD": "hunter2"}}},
        {"name": "ticker", "every_secs": 3600, "catchup": "once", "job": {"command": "tick"}},
    ):  # fmt: skip
        assert httpx.post(f"{api}/schedules", json=body, headers=OPERATOR).status_code == 201
    ui.get(f"{api}/ui/jobs")
    click(ui, By.LINK_TEXT, "Schedules")
    assert ui.current_url == f"{api}/ui/schedules"
    names = [e.text for e in ui.find_elements(By.CSS_SELECTOR, "#schedules tr td:first-child")]
    assert names == ["nightly", "ticker"]
    nightly = ui.find_element(By.ID, "row-nightly").text
    assert "0 3 * * * Europe/Paris" in nightly and "active" in nightly
    assert "DB_PASSWORD" in nightly and "hunter2" not in ui.page_source  # names only
    assert "every 3600 s" in ui.find_element(By.ID, "row-ticker").text
    missed = ui.find_element(By.CSS_SELECTOR, "#row-ticker .catchup")
    assert (missed.text, missed.get_attribute("title")) == (
        "run once",
        "Runs it missed make one job for all of them (catchup once)",
    )

    click(ui, By.ID, "pause-ticker")
    assert ui.current_url == f"{api}/ui/schedules"
    assert "paused" in ui.find_element(By.ID, "row-ticker").text
    shown = httpx.get(f"{api}/schedules/ticker", headers=OPERATOR).json()
    assert shown["paused"] is True and "next_run_at" not in shown
    click(ui, By.ID, "resume-ticker")
    assert "active" in ui.find_element(By.ID, "row-ticker").text
    assert httpx.get(f"{api}/schedules/ticker", headers=OPERATOR).json()["paused"] is False

    # A form without the page's token (another site's) changes nothing.
    cookie = {"Cookie": f"{UI_COOKIE}={session_of(ui)}"}
    forged = httpx.post(f"{api}/ui/schedules/ticker/pause", data={"csrf": "x"}, headers=cookie)
    assert forged.status_code == 403
    assert httpx.get(f"{api}/schedules/ticker", headers=OPERATOR).json()["paused"] is False


def test_a_jobs_page_shows_its_attempts(api: str, ui: WebDriver) -> None:
    """job-5 (node-a) fails once (its output holding markup, shown as text), is retried and
    is done: two attempts below its summary, the first with its output tails; the last
    one's are the job's own output, shown once, below."""
    for report in (
        {"status": "running"},
        {"status": "failed", "exit_code": 3, "stdout": "<b>one</b>", "stderr": "boom"},
        {"status": "running"},
        {"status": "done", "exit_code": 0, "stdout": "two"},
    ):
        assert httpx.patch(f"{api}/jobs/job-5", json=report, headers=OPERATOR).is_success
    ui.get(f"{api}/ui/jobs/job-5")
    rows = [
        [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        for row in ui.find_elements(By.CSS_SELECTOR, '#attempts tr[id^="attempt-"]')
    ]
    assert [row[:2] + row[4:] for row in rows] == [
        ["1", "node-a", "3", "failed"],
        ["2", "node-a", "0", "done"],
    ]
    times = [
        [t.get_attribute("datetime") for t in row.find_elements(By.TAG_NAME, "time")]
        for row in ui.find_elements(By.CSS_SELECTOR, '#attempts tr[id^="attempt-"]')
    ]
    assert all(len(row) == 2 and row[0] <= row[1] for row in times)  # started, ended
    # The first attempt's output folded in its row: a click shows it.
    tails = ui.find_elements(By.CSS_SELECTOR, "#attempts pre")
    assert [pre.get_attribute("textContent") for pre in tails] == ["<b>one</b>", "boom"]
    assert not any(pre.is_displayed() for pre in tails)
    ui.find_element(By.CSS_SELECTOR, "#attempt-1 + tr.output summary").click()
    assert all(pre.is_displayed() for pre in tails)
    assert not ui.find_elements(By.CSS_SELECTOR, "#attempts b")  # escaped, not markup
    # The record keeps a retried attempt's stderr (as it did): the job's output, in one
    # place near the top; the last attempt's row links there instead of repeating it.
    assert ui.find_element(By.ID, "stdout").text == "two"
    assert ui.find_element(By.ID, "stderr").text == "boom"
    assert ui.find_element(By.CSS_SELECTOR, '#attempt-2 + tr.output a[href="#output"]')
    assert ui.find_element(By.ID, "output").is_displayed()  # where the link goes
    assert "shown in full above" not in ui.page_source


def test_the_failed_list_retries_its_dead_set(api: str, ui: WebDriver) -> None:
    """Three jobs out of retries fail; the failed list's button retries all three at once
    and the list comes back empty, saying so."""
    dead = []
    for _ in range(3):
        job = {"command": "exit 1", "max_retries": 0}
        job_id = httpx.post(f"{api}/jobs", json=job, headers=OPERATOR).json()["job_id"]
        for report in ({"status": "running"}, {"status": "failed", "exit_code": 1}):
            assert httpx.patch(f"{api}/jobs/{job_id}", json=report, headers=OPERATOR).is_success
        dead.insert(0, job_id)
    for node in ("node-a", "node-b"):  # live now, however long the tests before took
        beat = httpx.post(f"{api}/nodes/heartbeat", json={"id": node}, headers=OPERATOR)
        assert beat.is_success
    ui.get(f"{api}/ui/jobs?status=failed")
    assert job_ids(ui) == dead
    assert ui.find_element(By.ID, "retry-failed").text == "Retry these 3 failed jobs"
    click(ui, By.ID, "retry-failed")
    assert ui.current_url == f"{api}/ui/jobs?status=failed&retried=3"
    assert ui.find_element(By.ID, "notice").text == "Retried 3 failed job(s)."
    assert job_ids(ui) == [] and ui.find_element(By.ID, "jobs").text.endswith("no jobs")
    assert not ui.find_elements(By.ID, "retry-failed")
    for job_id in dead:
        assert httpx.get(f"{api}/jobs/{job_id}", headers=OPERATOR).json()["status"] == "pending"


# Screenshots of each page at a desktop's and a phone's width, kept after the run for a
# look (the repository ignores the directory).
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
WIDTHS = {"desktop": 1280, "phone": 390}


def ran(api: str, job: dict[str, str], *reports: dict[str, object]) -> None:
    """The agent's reports on `job`, one after the other."""
    for body in reports:
        answer = httpx.patch(f"{api}/jobs/{job['job_id']}", json=body, headers=OPERATOR)
        assert answer.is_success, answer.text


def load(browser: WebDriver, url: str) -> None:
    browser.get(url)
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def shoot(browser: WebDriver, name: str, width: int) -> None:
    """A screenshot of the whole page (Chromium's DevTools: beyond the window's height) at
    `width`, and no page wider than the screen: wide tables scroll inside their box."""
    layout = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": width, "height": min(layout["height"], 6000), "scale": 1}
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}-{width}.png").write_bytes(base64.b64decode(shot["data"]))
    wide = browser.execute_script("return document.documentElement.scrollWidth")
    assert wide <= width, (name, width, wide)


def cells(browser: WebDriver, job_id: str) -> dict[str, str]:
    """The jobs table's row of `job_id`, by heading."""
    # The headings' text as written: on a phone's width they are hidden (each card's cells
    # are labelled instead), and Selenium's .text is the visible text.
    heads = [
        th.get_attribute("textContent") or ""
        for th in browser.find_elements(By.CSS_SELECTOR, "#jobs tr th")
    ]
    for row in browser.find_elements(By.CSS_SELECTOR, "#jobs tr"):
        tds = row.find_elements(By.TAG_NAME, "td")
        if tds and tds[0].text == job_id:
            return dict(zip(heads, [td.text for td in tds], strict=True))
    raise AssertionError(f"{job_id} not listed")


def test_each_page_shows_what_operators_read_at_both_widths(api: str, ui: WebDriver) -> None:
    """A job done with its exit code, one failed after a retry, one running: the jobs list
    (attempt, exit code, run time, times on hover, counts), a search, a job's page, the failed
    list, the nodes, the schedules and a 404 inside the layout, each screenshot at 1280 and
    390 px (ARTIFACTS)."""
    post = lambda body: httpx.post(f"{api}/jobs", json=body, headers=OPERATOR).json()  # noqa: E731
    done = post({"command": "python3 train.py --epochs 3 <fast>"})
    ran(api, done, {"status": "running"}, {"status": "done", "exit_code": 0, "stdout": "ok\n"})
    failed = post({"command": "./flaky.sh", "max_retries": 1})
    ran(api, failed, {"status": "running"}, {"status": "failed", "exit_code": 3})
    ran(api, failed, {"status": "running"}, {"status": "failed", "exit_code": 4, "stderr": "boom"})
    running = post({"command": "sleep 600"})
    ran(api, running, {"status": "running"})
    nightly = {"name": "ops-nightly", "cron": "0 3 * * *", "job": {"command": "backup"}}
    assert httpx.post(f"{api}/schedules", json=nightly, headers=OPERATOR).status_code == 201
    for node in ("node-a", "node-b"):  # live now, however long the tests before took
        beat = httpx.post(f"{api}/nodes/heartbeat", json={"id": node}, headers=OPERATOR)
        assert beat.is_success

    pages = {
        "dashboard": "/ui?refresh=off",
        "dashboard-day": "/ui?window=day&refresh=off",
        "jobs": "/ui/jobs?refresh=off",
        "search": "/ui/jobs?q=TRAIN&refresh=off",
        "job": f"/ui/jobs/{failed['job_id']}?refresh=off",
        "failed": "/ui/jobs?status=failed&refresh=off",
        "nodes": "/ui/nodes?refresh=off",
        "schedules": "/ui/schedules?refresh=off",
        "not-found": "/ui/jobs/job-999999",
    }
    for width in WIDTHS.values():
        browser_width(ui, width)
        for name, path in pages.items():
            load(ui, f"{api}{path}")
            check_page(ui, name, done, failed, running)
            shoot(ui, name, width)


def test_a_long_command_shows_first_wrapped_at_both_widths(api: str, ui: WebDriver) -> None:
    """The command under the job's heading, above its summary, wrapped inside the page's
    width (a word longer than a phone's too), not again below."""
    command = (
        "python3 etl.py " + " ".join(f"--opt{i}=value{i}" for i in range(40)) + " " + "y" * 300
    )
    job = httpx.post(f"{api}/jobs", json={"command": command}, headers=OPERATOR).json()
    for width in WIDTHS.values():
        browser_width(ui, width)
        load(ui, f"{api}/ui/jobs/{job['job_id']}?refresh=off")
        pre = ui.find_element(By.ID, "command")
        assert pre.get_attribute("textContent") == command
        assert pre.location["y"] < ui.find_element(By.ID, "summary").location["y"]
        assert ui.execute_script("return arguments[0].scrollWidth", pre) <= pre.size["width"]
        assert "command" not in fields(ui, "request")
        shoot(ui, "job-long-command", width)


def test_a_delayed_and_a_pending_jobs_page_at_both_widths(api: str, ui: WebDriver) -> None:
    """A delayed job's reason says when it is due, once (not again in the request); a job
    not started says it waits once, with no empty attempts table."""
    body = {"command": "make report", "delay_secs": 600}
    delayed = httpx.post(f"{api}/jobs", json=body, headers=OPERATOR).json()["job_id"]
    body = {"command": "make report"}  # pending: the nodes' one slot each is taken
    pending = httpx.post(f"{api}/jobs", json=body, headers=OPERATOR).json()["job_id"]
    for width in WIDTHS.values():
        browser_width(ui, width)
        load(ui, f"{api}/ui/jobs/{delayed}?refresh=off")
        reason = fields(ui, "summary")["reason"]
        assert reason.startswith("due in ") and ", at " in reason and reason.endswith(" UTC")
        assert "due at" not in fields(ui, "request")
        shoot(ui, "job-delayed", width)
        load(ui, f"{api}/ui/jobs/{pending}?refresh=off")
        assert fields(ui, "summary")["status"] == "pending"
        assert ui.find_element(By.CSS_SELECTOR, "#live h2").text.startswith("Output as it runs")
        assert not ui.find_element(By.ID, "live-output").is_displayed()
        assert not ui.find_elements(By.ID, "attempts")
        shoot(ui, "job-pending", width)


def browser_width(browser: WebDriver, width: int) -> None:
    browser.set_window_size(width, 900)


def check_page(
    ui: WebDriver, name: str, done: dict[str, str], failed: dict[str, str], running: dict[str, str]
) -> None:
    """What each page of the tour must show (the DOM, as the browser built it)."""
    assert [a.text for a in ui.find_elements(By.CSS_SELECTOR, "header nav a")] == [
        "Dashboard",
        "Jobs",
        "Nodes",
        "Schedules",
    ]
    if name.startswith("dashboard"):
        check_dashboard(ui, 60 if name == "dashboard" else 96)
    elif name == "jobs":
        row = cells(ui, done["job_id"])
        assert (row["status"], row["attempt"], row["exit code"]) == ("done", "1", "0")
        assert row["ran for"].endswith(("ms", " s")) and row["command"].endswith("<fast>")
        again = cells(ui, failed["job_id"])
        assert (again["status"], again["attempt"], again["exit code"]) == ("failed", "2", "4")
        now = cells(ui, running["job_id"])
        assert now["status"] == "running" and now["ran for"].endswith(" so far")
        assert now["exit code"] == "" and now["finished"] == ""
        # The command gets the card's width on a phone, not a column of two characters.
        command = ui.find_element(By.CSS_SELECTOR, "#jobs tr:nth-child(2) td.cmd")
        assert command.size["width"] >= min(300, ui.get_window_size()["width"] * 0.4)
        label = "return getComputedStyle(arguments[0], '::before').content"
        phone = ui.execute_script("return innerWidth") <= 700
        assert ui.execute_script(label, command) == ('"command"' if phone else "none")
        created = ui.find_element(By.CSS_SELECTOR, "#jobs tr:nth-child(2) time")
        assert created.text == "just now" or created.text.endswith(" ago")
        assert created.get_attribute("title").endswith(" UTC")  # the exact time, on hover
        counts = ui.find_element(By.ID, "counts").text
        assert "running 1" in counts and "failed" in counts and "all" in counts
        assert ui.find_element(By.ID, "resume").text == "Resume refresh"
        assert not ui.find_elements(By.CSS_SELECTOR, "body[data-refresh]")
        assert ui.find_element(By.ID, "older").get_attribute("href").endswith("refresh=off")
    elif name == "search":
        assert [a.text for a in ui.find_elements(By.CSS_SELECTOR, "#jobs td:first-child a")] == [
            done["job_id"]
        ]
        assert "most recent jobs" in ui.find_element(By.ID, "searched").text
    elif name == "job":
        summary = fields(ui, "summary")
        assert list(summary)[:3] == ["status", "reason", "exit code"]
        assert (summary["status"], summary["exit code"], summary["attempts"]) == (
            "failed",
            "4",
            "2",
        )  # how many it made: not "2 of 2", as if more might come
        assert summary["reason"] == "the command exited with code 4"
        assert summary["ran for"] and summary["finished"].endswith(("ago", "just now"))
        assert ui.find_element(By.ID, "stderr").text == "boom"  # the error, at the top
        attempts = ui.find_elements(By.CSS_SELECTOR, '#attempts tr[id^="attempt-"]')
        assert [a.find_elements(By.TAG_NAME, "td")[4].text for a in attempts] == ["3", "4"]
        # On a phone's width each attempt is a card of labelled values, as the jobs list.
        phone = ui.execute_script("return window.innerWidth") <= 700
        shown = {a.value_of_css_property("display") for a in attempts}
        assert shown == ({"grid"} if phone else {"table-row"})
    elif name == "failed":
        assert cells(ui, failed["job_id"])["attempt"] == "2"
        assert ui.find_element(By.ID, "retry-failed").is_displayed()
    elif name == "nodes":
        assert "healthy" in ui.find_element(By.ID, "nodes").text
        seen = ui.find_element(By.CSS_SELECTOR, "#nodes time")
        assert seen.get_attribute("title").endswith(" UTC")
    elif name == "schedules":
        nightly = ui.find_element(By.ID, "row-ops-nightly")
        right = ui.execute_script("return arguments[0].getBoundingClientRect().right", nightly)
        assert right <= ui.execute_script("return innerWidth")  # not cut: a card on a phone
        assert "0 3 * * * UTC" in nightly.text and " in " in nightly.text  # its next run
        # The policy, as one: not "skipped" (read as runs that were skipped), nor "skip".
        assert nightly.find_element(By.CLASS_NAME, "catchup").text == "skip them"
        label = "return getComputedStyle(arguments[0], '::before').content"
        cell = nightly.find_element(By.CLASS_NAME, "catchup").find_element(By.XPATH, "..")
        phone = ui.execute_script("return innerWidth") <= 700
        assert ui.execute_script(label, cell) == ('"if runs are missed"' if phone else "none")
        assert nightly.find_element(By.TAG_NAME, "time").get_attribute("title").endswith(" UTC")
    elif name == "not-found":
        assert ui.find_element(By.ID, "error").text == "job not found"
        assert ui.find_element(By.TAG_NAME, "h1").text == "404 Not Found"


def check_dashboard(ui: WebDriver, columns: int) -> None:
    """The charts as drawn: a column per minute (the day: per 15), their values summed to the
    figures beside the chart, the tour's done, failed and running jobs among them."""

    def drawn(chart: str, name: str) -> list[str]:
        boxes = ui.find_elements(By.CSS_SELECTOR, f"#{chart} rect.col")
        assert len(boxes) == columns, chart
        return [box.get_attribute(f"data-{name}") or "" for box in boxes]

    def figure(name: str) -> str:
        return ui.find_element(By.ID, f"fig-{name}").text

    for name in ("submitted", "started", "done", "failed"):
        assert sum(int(v) for v in drawn("flow", name)) == int(figure(name)), name
    # Started counts attempts (a retry's too), the others jobs: the legend says so.
    started = ui.find_element(By.XPATH, '//b[@id="fig-started"]/parent::span').text
    assert started.startswith("attempts started") and ui.find_element(By.ID, "flow-note")
    assert int(figure("submitted")) >= JOBS and int(figure("done")) >= 1
    assert int(figure("failed")) >= 1 and int(figure("started")) >= 3
    assert int(drawn("queue", "running")[-1]) >= 1 and figure("running").endswith(" now")
    assert any(v for v in drawn("waits", "p95")) and figure("p50").startswith("≤")
    title = ui.find_element(By.CSS_SELECTOR, "#flow rect.col:last-of-type title")
    assert "submitted" in title.get_attribute("textContent")
    load = ui.find_element(By.ID, "node-load").text
    assert "node-a" in load and "node-b" in load and "healthy" in load
    # Each namespace's counts: a card of labelled values on a phone's width.
    phone = ui.execute_script("return window.innerWidth") <= 700
    rows = ui.find_elements(By.CSS_SELECTOR, "#namespaces tr[data-namespace]")
    assert rows and {row.value_of_css_property("display") for row in rows} == (
        {"grid"} if phone else {"table-row"}
    )


def session_of(browser: WebDriver) -> str:
    found: dict[str, str] = browser.get_cookie(UI_COOKIE) or {}
    return found.get("value", "")


def test_logging_out_locks_the_ui_again(api: str, browser: WebDriver) -> None:
    browser.get(f"{api}/ui/jobs")
    session = session_of(browser)
    assert httpx.get(f"{api}/ui/jobs", cookies={UI_COOKIE: session}).status_code == 200
    click(browser, By.CSS_SELECTOR, "header form button")
    browser.get(f"{api}/ui/nodes")
    assert browser.current_url == f"{api}/ui/login"
    # The session ended in Redis: its cookie, kept elsewhere, opens nothing either.
    kept = httpx.get(f"{api}/ui/jobs", cookies={UI_COOKIE: session}, follow_redirects=False)
    assert (kept.status_code, kept.headers["location"]) == (303, "/ui/login")
