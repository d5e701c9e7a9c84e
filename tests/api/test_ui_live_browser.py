"""The job page's live output (issue 39; api/ui_live.py) in a real headless Chromium (Debian's
chromium and chromium-driver) against a real API process with a key, logged in by its form:
a running job's page shows what the agent sends (POST /jobs/{id}/output) as it comes, stderr
apart, markup as text (no element made of it), the <pre> following the end only while the
reader is there, long lines wrapped inside it at a phone's width; output missed and a new
attempt are said; a pending job's page starts following when it runs; the page shows the
job ended when it does, and a paused page says so without reloading. Each wait is for a
condition, its deadline only bounding a failure. Screenshots at 1280 and 390 px
(test_ui_browser.ARTIFACTS, live-*.png)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.api.test_ui_browser import browser_width, fields, load, shoot
from tests.chromium import logged_in
from tests.keys import API_KEY as KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix

OPERATOR = {"Authorization": f"Bearer {KEY}"}
NODE = "live-a"
DEADLINE_SECS = 60.0  # bounds a failure only: the machine is shared and may be slow
ATTACK = "<img src=x onerror=alert(1)><script>alert(2)</script> warning: disk 91% full\n"


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    """One API process; node live-a takes up to 8 jobs; a job's log keeps 64 KiB."""
    env = scheduler_env(
        redis_url,
        unique_prefix("ui-live"),
        TINYAWS_API_KEY=KEY,
        AGENT_AUTH="token",
        MAX_JOBS_PER_NODE="8",
        LOG_MAX_BYTES="65536",
    )
    with api_replicas(1, env) as urls:
        body = {"id": NODE, "hostname": NODE, "cpu_count": 8}
        assert httpx.post(f"{urls[0]}/nodes/register", json=body, headers=OPERATOR).is_success
        yield urls[0]


@pytest.fixture(scope="module")
def ui(api: str) -> Iterator[WebDriver]:
    """A browser logged in to the UI by its form."""
    with logged_in(api, KEY) as driver:
        yield driver


# The agent's side, over the API.


def submitted(api: str, **fields: Any) -> str:
    beat = httpx.post(f"{api}/nodes/heartbeat", json={"id": NODE}, headers=OPERATOR)
    assert beat.is_success  # live now, however long the tests before took
    job = httpx.post(
        f"{api}/jobs", json={"command": "python3 train.py", **fields}, headers=OPERATOR
    )
    assert job.status_code == 201, job.text
    return str(job.json()["job_id"])


def reported(api: str, job_id: str, status: str, **fields: Any) -> None:
    body = {"status": status, "node_id": NODE, **fields}
    answer = httpx.patch(f"{api}/jobs/{job_id}", json=body, headers=OPERATOR)
    assert answer.is_success, answer.text


def sent(api: str, job_id: str, data: str, offset: int, stream: str = "stdout") -> int:
    """A chunk as the agent sends it; the stream's next offset."""
    body = {"node_id": NODE, "stream": stream, "offset": offset, "data": data}
    answer = httpx.post(f"{api}/jobs/{job_id}/output", json=body, headers=OPERATOR)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["offset"])


def running(api: str, **fields: Any) -> str:
    job_id = submitted(api, **fields)
    reported(api, job_id, "running")
    return job_id


# The browser's side.


def until(browser: WebDriver, script: str, *args: Any) -> Any:
    """`script`'s value once it is truthy (polled; a page reloading in between is polled
    again), failing past DEADLINE_SECS."""
    deadline = time.monotonic() + DEADLINE_SECS
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = browser.execute_script(script, *args)
        except WebDriverException as exc:  # the page was between two loads
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"not within {DEADLINE_SECS} s: {script} (last: {last!r})")


PRE = "document.getElementById('live-output')"
LIVE_TEXT = f"return {PRE}.textContent"
AT_BOTTOM = f"var p = {PRE}; return p.scrollHeight - p.scrollTop - p.clientHeight < 4"


def shows(browser: WebDriver, text: str) -> None:
    """Wait until the live output holds `text`."""
    until(browser, f"var p = {PRE}; return !!p && p.textContent.includes(arguments[0])", text)


def state(browser: WebDriver) -> str:
    return str(browser.execute_script("return document.getElementById('live-state').textContent"))


def ended(browser: WebDriver) -> dict[str, str]:
    """Wait until the page reloaded as an ended job's (no live section), its summary."""
    until(browser, "return document.readyState === 'complete' && !document.getElementById('live')"
          " && !!document.getElementById('summary')")  # fmt: skip
    return fields(browser, "summary")


def test_a_running_jobs_page_shows_its_output_as_it_comes(api: str, ui: WebDriver) -> None:
    job_id = running(api)
    offset = sent(api, job_id, "epoch 1/3 loss 0.91\n", 0)
    browser_width(ui, 1280)
    load(ui, f"{api}/ui/jobs/{job_id}")
    shows(ui, "epoch 1/3 loss 0.91\n")  # what came before the page, at once
    until(ui, "return document.getElementById('live-state').textContent === 'live'")
    assert ui.execute_script("return document.querySelectorAll('meta[http-equiv]').length") == 0
    # What the agent sends now shows, stderr apart; markup is text and makes no element.
    offset = sent(api, job_id, "epoch 2/3 loss 0.52\n", offset)
    shows(ui, "epoch 2/3 loss 0.52\n")
    sent(api, job_id, ATTACK, 0, "stderr")
    shows(ui, ATTACK)
    assert ui.execute_script("return document.images.length") == 0
    assert ui.execute_script("return document.scripts.length") == 1  # the page's own
    stderr = ui.find_element(By.CSS_SELECTOR, "#live-output span.stderr")
    assert stderr.get_attribute("textContent") == ATTACK
    assert not stderr.find_elements(By.XPATH, "./*")  # text only
    stdout = ui.find_element(By.CSS_SELECTOR, "#live-output span.stdout")
    assert stdout.value_of_css_property("color") != stderr.value_of_css_property("color")
    # Enough to scroll: the <pre> follows the end while the reader is there ...
    lines = "".join(f"step {n:03} " + "x" * 40 + "\n" for n in range(1, 101))
    offset = sent(api, job_id, lines + "y" * 300 + "\n", offset)  # a long line, no space
    shows(ui, "step 100")
    assert ui.execute_script(f"var p = {PRE}; return p.scrollHeight > p.clientHeight")
    assert ui.execute_script(AT_BOTTOM)
    # ... and stays where the reader scrolled to.
    ui.execute_script(f"{PRE}.scrollTop = 0")
    offset = sent(api, job_id, "step 101\n", offset)
    shows(ui, "step 101")
    assert ui.execute_script(f"return {PRE}.scrollTop") == 0
    sent(api, job_id, "warning: loss plateaued\n", len(ATTACK), "stderr")
    shows(ui, "plateaued")
    ui.execute_script(f"var p = {PRE}; p.scrollTop = p.scrollHeight")
    shoot(ui, "live", 1280)
    # A phone's width: the output wraps inside the <pre>, the page no wider than the screen.
    browser_width(ui, 390)
    load(ui, f"{api}/ui/jobs/{job_id}")
    shows(ui, "plateaued")
    pre = ui.find_element(By.ID, "live-output")
    right = ui.execute_script("return arguments[0].getBoundingClientRect().right", pre)
    assert right <= ui.execute_script("return innerWidth")
    assert ui.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", pre)
    assert ui.execute_script("return document.documentElement.scrollWidth") <= 390
    ui.execute_script(f"var p = {PRE}; p.scrollTop = p.scrollHeight")
    shoot(ui, "live", 390)
    # The job ends: the page shows its record.
    reported(api, job_id, "done", exit_code=0)
    summary = ended(ui)
    assert (summary["status"], summary["exit code"]) == ("done", "0")
    browser_width(ui, 1280)


def test_a_pending_jobs_page_follows_once_the_job_runs(api: str, ui: WebDriver) -> None:
    job_id = submitted(api, max_retries=0)
    load(ui, f"{api}/ui/jobs/{job_id}")
    assert fields(ui, "summary")["status"] == "pending"
    until(ui, "return !!document.getElementById('live')")
    # Nothing to wait for yet: its heading says so, once: no empty box under it saying it
    # again, nor "no output yet" as a running job's; nor an empty table of attempts.
    assert not ui.find_element(By.ID, "live-output").is_displayed()
    assert not ui.find_elements(By.ID, "attempts") and "none ended" not in ui.page_source
    # Its stream open, the header says it waits for the start: nothing is live yet.
    until(ui, "return document.getElementById('live-state').textContent === arguments[0]",
          "waiting for it to start")  # fmt: skip
    heading = ui.find_element(By.CSS_SELECTOR, "#live h2").text
    assert heading == "Output as it runs waiting for it to start" and "live" not in heading.lower()
    reported(api, job_id, "running")
    sent(api, job_id, "started\n", 0)
    shows(ui, "started\n")
    until(ui, "return document.getElementById('live-state').textContent === 'live'")
    assert ui.find_element(By.CSS_SELECTOR, "#live h2").text == "Live output live"
    # The record's output comes with the attempt's end: no "stdout: empty" under live lines.
    assert not ui.find_elements(By.ID, "output") and "-empty" not in ui.page_source
    reported(api, job_id, "failed", exit_code=3)
    summary = ended(ui)
    assert (summary["status"], summary["exit code"]) == ("failed", "3")


def test_missed_output_and_a_new_attempt_are_said(api: str, ui: WebDriver) -> None:
    """64 KiB kept: a page opened after 90,000 bytes says the first 30,000 were dropped; the
    job fails and runs again: the page, told its status changed, reloads into the second
    attempt (its summary says which)."""
    job_id = running(api, max_retries=1)
    offset = 0
    for digit in "123":
        offset = sent(api, job_id, digit * 29999 + "\n", offset)
    load(ui, f"{api}/ui/jobs/{job_id}")
    shows(ui, "3" * 29999)
    text = ui.execute_script(LIVE_TEXT)
    assert text.startswith("[dropped 30000 bytes]\n" + "2" * 29999)
    note = ui.find_element(By.CSS_SELECTOR, "#live-output span.note")
    assert note.get_attribute("textContent") == "[dropped 30000 bytes]\n"
    ui.execute_script("window.firstPage = true")
    reported(api, job_id, "failed", exit_code=1)  # retried: pending again
    reported(api, job_id, "running")
    sent(api, job_id, "second attempt\n", 0)
    shows(ui, "second attempt\n")
    assert ui.execute_script("return window.firstPage") is None  # a new page
    assert "3" * 29999 not in ui.execute_script(LIVE_TEXT)  # the first attempt's is not
    assert fields(ui, "summary")["attempt"].startswith("2")
    reported(api, job_id, "done", exit_code=0)
    assert ended(ui)["attempts"] == "2"  # how many it made: none more to come


def test_a_paused_page_says_the_job_ended_without_reloading(api: str, ui: WebDriver) -> None:
    job_id = running(api)
    load(ui, f"{api}/ui/jobs/{job_id}?refresh=off")
    until(ui, "return document.getElementById('live-state').textContent === 'live'")
    ui.execute_script("window.loadedOnce = true")
    reported(api, job_id, "done", exit_code=7)
    until(ui, "return document.getElementById('live-state').textContent.startsWith('ended')")
    assert state(ui) == "ended: done, exit code 7 (reload for its record)"
    assert ui.execute_script("return window.loadedOnce") is True  # the same page
    assert fields(ui, "summary")["status"] == "running"  # as it was loaded
