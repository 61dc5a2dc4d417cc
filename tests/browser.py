"""Headless Chromium (Debian's chromium + chromedriver) driven by Selenium, for the tests that
need a real browser: flame graph clicks and searches, the HTML report. Flags as this machine
needs them: no sandbox as root, no background networking (the network is closed)."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import time

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextlib.contextmanager
def headless_chromium(width: int = 1400, height: int = 1000):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are missing: run `make setup`")
    from selenium.webdriver.chrome.service import Service
    with tempfile.TemporaryDirectory(prefix="lockdown-chromium-") as profile:
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                     f"--window-size={width},{height}"):
            opts.add_argument(flag)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        try:
            yield driver
        finally:
            driver.quit()


def script_errors(driver) -> list[str]:
    """Console errors and uncaught exceptions the page produced so far."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def width(g) -> float:
    """Width of a flame graph frame (<g> holding a <rect>)."""
    return float(g.find_element("tag name", "rect").get_attribute("width"))


def wait_until(check, timeout=5.0):
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.05)
