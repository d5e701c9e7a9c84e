"""The UI's refresh (api/ui_refresh.py) in a real headless Chromium against a real API
process whose pages reload every second (UI_REFRESH_SECS=1): a page left alone reloads; a
page the reader is at does not, however many periods go by, and reloads once they leave it
alone: the cancel question opened on a running job's page (at a phone's width, as the
newcomer found it closing by itself), text typed into the jobs list's search, a field in
focus. "Reloaded" is a marker set on `window` gone; each wait is for a condition (the
browser's own clock past the periods), its deadline only bounding a failure."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.api.test_ui_browser import browser_width, load, shoot
from tests.api.test_ui_live_browser import until
from tests.chromium import logged_in
from tests.keys import API_KEY as KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix

OPERATOR = {"Authorization": f"Bearer {KEY}"}
PERIOD_MS = 1000
HELD_MS = 3 * PERIOD_MS  # long past a reload that would come


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[str]:
    env = scheduler_env(
        redis_url,
        unique_prefix("ui-refresh"),
        TINYAWS_API_KEY=KEY,
        AGENT_AUTH="token",
        NODE_TTL_SECS="600",
        MAX_JOBS_PER_NODE="8",
        UI_REFRESH_SECS=str(PERIOD_MS / 1000),
    )
    with api_replicas(1, env) as urls:
        body = {"id": "node-a", "hostname": "node-a", "cpu_count": 8}
        assert httpx.post(f"{urls[0]}/nodes/register", json=body, headers=OPERATOR).is_success
        yield urls[0]


@pytest.fixture(scope="module")
def ui(api: str) -> Iterator[WebDriver]:
    """A browser logged in to the UI by its form."""
    with logged_in(api, KEY) as driver:
        yield driver


def marked(ui: WebDriver, url: str) -> None:
    """`url` loaded, and a marker on its window that a reload takes away."""
    load(ui, url)
    ui.execute_script("window.samePage = true")


def held(ui: WebDriver) -> None:
    """The page still the one marked, HELD_MS after now by the browser's clock."""
    end = ui.execute_script("return performance.now()") + HELD_MS
    # A reload ends the wait at once (and starts the page's clock over).
    until(ui, "return window.samePage !== true || performance.now() > arguments[0]", end)
    assert ui.execute_script("return window.samePage") is True


def reloaded(ui: WebDriver) -> None:
    until(ui, "return document.readyState === 'complete' && window.samePage === undefined")


def running_job(api: str) -> str:
    job = httpx.post(f"{api}/jobs", json={"command": "sleep 600"}, headers=OPERATOR).json()
    report = {"status": "running", "node_id": "node-a"}
    answer = httpx.patch(f"{api}/jobs/{job['job_id']}", json=report, headers=OPERATOR)
    assert answer.is_success, answer.text
    return str(job["job_id"])


def test_a_page_left_alone_reloads(api: str, ui: WebDriver) -> None:
    browser_width(ui, 1280)
    marked(ui, f"{api}/ui/jobs")
    reloaded(ui)
    marked(ui, f"{api}/ui/jobs/{running_job(api)}")  # the live output's page too
    reloaded(ui)


def test_the_cancel_question_stays_open_until_the_reader_closes_it(api: str, ui: WebDriver) -> None:
    browser_width(ui, 390)
    marked(ui, f"{api}/ui/jobs/{running_job(api)}")
    ui.find_element(By.ID, "cancel-ask").click()
    held(ui)
    assert ui.find_element(By.ID, "cancel-confirm").get_attribute("open") is not None
    shoot(ui, "refresh-cancel-open", 390)
    ui.find_element(By.ID, "cancel-ask").click()  # "not now": the refresh resumes
    reloaded(ui)
    assert ui.find_element(By.ID, "cancel-confirm").get_attribute("open") is None


def test_text_typed_in_the_search_is_kept(api: str, ui: WebDriver) -> None:
    browser_width(ui, 1280)
    marked(ui, f"{api}/ui/jobs")
    search = ui.find_element(By.ID, "q")
    search.send_keys("ech")
    held(ui)  # while it has focus
    ui.execute_script("document.activeElement.blur()")
    held(ui)  # and once it has not, holding the typed text
    assert ui.find_element(By.ID, "q").get_attribute("value") == "ech"
    search.send_keys(Keys.BACKSPACE * 3)
    ui.execute_script("document.activeElement.blur()")  # as the page came: it reloads
    reloaded(ui)


def test_a_field_in_focus_holds_the_refresh(api: str, ui: WebDriver) -> None:
    browser_width(ui, 1280)
    marked(ui, f"{api}/ui/jobs")
    ui.find_element(By.ID, "node_id").click()
    held(ui)
    ui.execute_script("document.activeElement.blur()")
    reloaded(ui)


def test_a_page_gone_back_to_reloads_again(api: str, ui: WebDriver) -> None:
    """Leaving a page stops its reload (it must not take the place of the next page); a
    page the reader comes back to (Back) reloads again. Chromium keeps the UI's no-store
    pages out of its back-forward cache, so Back loads the page afresh here: this holds the
    behaviour, not ui_refresh.py's pageshow path (for a browser that keeps them)."""
    browser_width(ui, 1280)
    job_id = running_job(api)
    load(ui, f"{api}/ui/jobs")
    ui.find_element(By.LINK_TEXT, job_id).click()
    until(ui, "return location.pathname === arguments[0]", f"/ui/jobs/{job_id}")
    ui.back()
    until(ui, "return location.pathname === '/ui/jobs' && document.readyState === 'complete'")
    ui.execute_script("window.samePage = true")
    reloaded(ui)
