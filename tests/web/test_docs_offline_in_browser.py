"""The docs site works offline: built strictly, served from a local folder, every page chromium opens
asks no other host for anything (no web fonts, scripts or images from outside; links may point out).

Slow (``mkdocs build`` of the whole site takes most of a minute on a busy CI machine), so it is marked
``slow``; the page walk itself takes seconds."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Route

from tests.support.browser import ROOT, needs_chromium

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.slow]

PAGES = [
    "",
    "guides/dashboard/",
    "guides/routing/",
    "design/",
    "getting-started/",
    "concepts/",
    "operations/kubernetes/",
]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(folder)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_every_page_loads_nothing_from_another_host(browser: Browser, site: str) -> None:
    context = browser.new_context()
    outside: list[str] = []

    def guard(route: Route) -> None:
        if urlsplit(route.request.url).hostname not in ("127.0.0.1", None):
            outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", guard)
    page = context.new_page()
    for path in PAGES:
        response = page.goto(site + path)
        assert response is not None and response.status == 200, path
        page.wait_for_load_state("networkidle")
    context.close()
    assert outside == []
