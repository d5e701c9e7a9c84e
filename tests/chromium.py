"""A headless Chromium (Debian's chromium and chromium-driver; .ci/run installs them) for the
tests that use the web UI as a browser does: its cookies, its Origin and Sec-Fetch headers
on a form, a page's own refresh."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait


def headless_chromium() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tempfile.mkdtemp(prefix='ui-chromium-')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(20)
    return driver


@contextmanager
def logged_in(api: str, key: str) -> Iterator[WebDriver]:
    """A headless Chromium logged in to the UI at `api` by its form, as a user is: a page
    asked for sends it to the login, the key typed in, then the home."""
    driver = headless_chromium()
    try:
        driver.get(f"{api}/ui/jobs")
        assert driver.current_url == f"{api}/ui/login"
        driver.find_element(By.ID, "key").send_keys(key)
        driver.find_element(By.ID, "login").click()
        WebDriverWait(driver, 20).until(
            lambda d: d.execute_script("return location.pathname") == "/ui"
        )
        yield driver
    finally:
        driver.quit()
