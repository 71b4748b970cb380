"""Shared parts of the browser tests: Debian's chromium driven by Playwright, screenshots."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SKILLGATE_CHROMIUM", "/usr/bin/chromium")
# Every run saves its screenshots here (CI keeps them as artifacts); SKILLGATE_DOCS_SCREENSHOTS=1
# also refreshes the committed ones in docs/screenshots/.
ARTIFACTS = Path(os.environ.get("SKILLGATE_TEST_ARTIFACTS", str(ROOT / "var" / "test-artifacts")))
ARTIFACTS /= "screenshots"
DOCS = ROOT / "docs" / "screenshots"

needs_chromium = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None,
    reason=f"no chromium at {CHROMIUM}: apt-get install chromium (.ci/run does it)",
)


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("SKILLGATE_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / path.name)
    return path


def log_in(page: Page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/")
    assert "/accounts/login/" in page.url  # login required
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def show_filters(page: Page) -> None:
    """Opens the Calls page's "Filters" toggle where a narrow screen folds it (a wide one shows the form;
    a filter set opens it)."""
    if not page.locator("#calls-body form").is_visible():
        page.locator("details[data-filters] > summary").click()
