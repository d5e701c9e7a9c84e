"""The login page in a headless Chromium (tests/chromium.py) against a real API process
started as `scheduler up` starts it: with XDG_STATE_HOME, and its address as SCHEDULER_URL,
whose key file is there. The help names where that file is (a reader's shell need not have
the variable; never the key), and reads whole at a desktop's and a phone's width
(screenshots in test-artifacts/ui)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.api.test_ui_browser import WIDTHS, browser_width, load, shoot
from tests.keys import API_KEY as KEY
from tests.processes import api_replicas, scheduler_env, unique_prefix

SESSION_KEY = "up-made-this-secret"
UP_URL = "http://127.0.0.1:9001"  # the address `up` named the file after


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("up-state")
    kept = folder / "tinyaws-scheduler" / "127.0.0.1-9001" / "api-key"
    kept.parent.mkdir(parents=True)
    kept.write_text(SESSION_KEY)
    return folder


@pytest.fixture(scope="module")
def api(redis_url: str, state: Path) -> Iterator[str]:
    env = scheduler_env(
        redis_url,
        unique_prefix("ui-login"),
        TINYAWS_API_KEY=KEY,
        XDG_STATE_HOME=str(state),
        HOME=str(state.parent),  # the state folder under it: shown from ~
        SCHEDULER_URL=UP_URL,
    )
    with api_replicas(1, env) as urls:
        yield urls[0]


def test_the_login_names_the_key_file_of_this_server(api: str, state: Path) -> None:
    from tests.chromium import headless_chromium

    browser: WebDriver = headless_chromium()
    try:
        for width in WIDTHS.values():
            browser_width(browser, width)
            load(browser, f"{api}/ui/login")
            shown = browser.find_element(By.CSS_SELECTOR, "#key-help pre")
            want = f"cat ~/{state.name}/tinyaws-scheduler/127.0.0.1-9001/api-key"
            assert shown.text.replace("\n", "") == want
            assert shown.rect["x"] + shown.rect["width"] <= width  # wrapped, not cut
            assert SESSION_KEY not in browser.page_source
            shoot(browser, "login", width)  # and no page wider than the screen
    finally:
        browser.quit()
