"""Playwright driving Debian's chromium (never a downloaded browser build)."""

from __future__ import annotations

import os

import pytest

from governor.chromium import CHROMIUM_ARGS, chromium_path
from tests.support.ci import skip_unless_ci


@pytest.fixture
def browser():
    """A chromium per test. Function scope on purpose: Playwright's sync API keeps an asyncio loop
    running in the main thread while it is open, which would break every later test that calls
    ``asyncio.run``."""
    path = chromium_path()
    if path is None:
        skip_unless_ci("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; the tests' own ORM calls
    # are still synchronous and safe, so tell Django not to refuse them.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def login(page, live_server_url: str, username: str, password: str = "pw-for-tests-1") -> None:
    page.goto(f"{live_server_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server_url}/")
