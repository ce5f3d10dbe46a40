"""The documentation site in a real browser: built with ``mkdocs build --strict``, served on a local
port, opened in headless Chromium.

The home page must render (its heading and the dashboard picture), an API reference page must show
``PipelineDriver``'s docstring, and Material's search must find ``PipelineDriver``, ``WorkerConfig``
and "deadline", typed into the search box as a reader would. Skips, with the reason, when Playwright
or Debian's ``chromium`` is not installed (``.ci/run`` installs chromium where it can).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    """The built site served over HTTP on a free local port (search loads its index with fetch, which
    a file:// page may not)."""
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def browser_page(site_url: str) -> Iterator[Any]:
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        yield page
        if target := os.environ.get("CADENZA_DOCS_SCREENSHOT"):  # a look at the last page a test left
            page.screenshot(path=target, full_page=False)
        browser.close()
    assert not errors, f"browser console errors: {errors}"


def test_the_home_page_renders(browser_page: Any, site_url: str) -> None:
    page = browser_page
    page.goto(site_url)
    assert page.locator("article h1").first.inner_text().rstrip("¶ \n") == "cadenza"
    assert "meets deadlines" in page.locator("article").inner_text()
    picture = page.locator('article img[src$="dashboard.png"]')
    picture.wait_for()
    assert picture.evaluate("image => image.complete && image.naturalWidth > 0"), "the picture did not load"
    assert page.locator("nav.md-nav--primary").get_by_text("Getting started").count() >= 1


def test_an_api_reference_page_shows_the_driver_docstring(browser_page: Any, site_url: str) -> None:
    page = browser_page
    page.goto(site_url + "reference/testing/")
    entry = page.locator('[id="cadenza.testing.PipelineDriver"]')
    entry.wait_for()
    assert "PipelineDriver" in entry.inner_text()
    docstring = page.locator("article").inner_text()
    assert "Runs pipelines in this process with no broker" in docstring
    assert "def pipe" not in docstring  # rendered, not shown as source


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("PipelineDriver", "PipelineDriver"),
        ("WorkerConfig", "WorkerConfig"),
        ("deadline", "deadline"),
    ],
)
def test_search_finds_it(browser_page: Any, site_url: str, query: str, expected: str) -> None:
    page = browser_page
    page.goto(site_url)
    box = page.locator("input.md-search__input")
    box.click()
    box.press_sequentially(query, delay=20)
    results = page.locator("li.md-search-result__item")
    results.first.wait_for(timeout=20_000)
    meta = page.locator(".md-search-result__meta").inner_text()
    assert "matching document" in meta, meta
    assert not meta.startswith("No matching"), meta
    listing = page.locator("ol.md-search-result__list").inner_text()
    assert expected.lower() in listing.lower(), listing
