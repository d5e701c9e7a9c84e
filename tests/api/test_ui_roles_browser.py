"""The web UI with named keys in a real headless Chromium (Debian's chromium and
chromium-driver; .ci/run installs them) against a real API process: a reader's key and a
submitter's log in at 1280 and 390 px; the reader's job page has no Cancel button, the
submitter's has; the navigation says who is logged in beside Log out, inside the screen
(screenshots in /tmp/ui41-<role>-<page>-<width>.png)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.keys import API_KEY as KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix

ADMIN = {"Authorization": f"Bearer {KEY}"}
SHOTS = Path("/tmp")
WIDTHS = (1280, 390)
# The reader's name is long (the label is cut short on a phone, whole in its title).
NAMES = {"reader": "night-shift-reader-of-the-platform-team", "submitter": "ci"}


@pytest.fixture(scope="module")
def api(redis_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The API, a pending job (job-1: it may be cancelled), and a key of each role."""
    env = scheduler_env(redis_url, unique_prefix("ui-roles-browser"), TINYAWS_API_KEY=KEY)
    with api_replicas(1, env) as urls:
        url = urls[0]
        node = {"id": "node-a", "hostname": "node-a", "cpu_count": 2}
        assert httpx.post(f"{url}/nodes/register", json=node, headers=ADMIN).is_success
        body = {"command": "sleep 600", "env_vars": {"TOKEN": "hunter2"}}
        assert httpx.post(f"{url}/jobs", json=body, headers=ADMIN).status_code == 201
        keys = {}
        for role, name in NAMES.items():
            made = httpx.post(f"{url}/keys", json={"name": name, "role": role}, headers=ADMIN)
            assert made.status_code == 201, made.text
            keys[role] = made.json()["key"]
        yield url, keys


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    from tests.chromium import headless_chromium

    driver = headless_chromium()
    yield driver
    driver.quit()


def load(browser: WebDriver, url: str) -> None:
    browser.get(url)
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def log_in(browser: WebDriver, url: str, key: str) -> None:
    load(browser, f"{url}/ui")
    assert browser.current_url == f"{url}/ui/login"
    browser.find_element(By.ID, "key").send_keys(key)
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, "login").click()
    WebDriverWait(browser, 20).until(lambda _: not _attached(old))
    WebDriverWait(browser, 20).until(lambda d: d.current_url == f"{url}/ui")


def _attached(element: object) -> bool:
    try:
        element.is_enabled()  # type: ignore[attr-defined]
    except Exception:  # StaleElementReferenceException: the old page is gone
        return False
    return True


def shoot(browser: WebDriver, name: str, width: int) -> None:
    """A screenshot of the whole page at `width`; no page wider than the screen."""
    layout = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": width, "height": min(layout["height"], 4000), "scale": 1}
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    (SHOTS / f"ui41-{name}-{width}.png").write_bytes(base64.b64decode(shot["data"]))
    wide = browser.execute_script("return document.documentElement.scrollWidth")
    assert wide <= width, (name, width, wide)


def inside(browser: WebDriver, element: WebElement, width: int) -> None:
    """The element is shown, whole, within the screen's width."""
    box = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, r.width];",
        element,
    )
    assert element.is_displayed() and box[2] > 0 and box[0] >= 0 and box[1] <= width, box


@pytest.mark.parametrize("role", ["reader", "submitter"])
def test_a_named_keys_pages_show_who_and_only_its_buttons(
    api: tuple[str, dict[str, str]], browser: WebDriver, role: str
) -> None:
    url, keys = api
    log_in(browser, url, keys[role])
    for width in WIDTHS:
        browser.set_window_size(width, 900)
        for page, path in (("jobs", "/ui/jobs?refresh=off"), ("job", "/ui/jobs/job-1?refresh=off")):
            load(browser, f"{url}{path}")
            who = browser.find_element(By.ID, "who")
            assert who.get_attribute("title") == f"{NAMES[role]} · {role}"
            assert who.text.endswith(f"· {role}")  # a long name is cut short, not the role
            inside(browser, who, width)
            inside(browser, browser.find_element(By.XPATH, "//button[text()='Log out']"), width)
            shoot(browser, f"{role}-{page}", width)
        cancel = browser.find_elements(By.ID, "cancel")
        assert bool(cancel) == (role == "submitter"), role
        assert "hunter2" not in browser.page_source  # a job's page shows names only
