"""Real-browser fixtures: a Streamlit server on a fresh data folder and headless chromium.

Debian's chromium (``/usr/bin/chromium``) driven by Playwright's Python package; the tests skip
with a clear reason only when that binary is absent. Every test here is marked ``browser``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = ROOT / "docs" / "screenshots"
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.browser)
            if not os.path.exists(CHROMIUM):
                item.add_marker(pytest.mark.skip(
                    reason=f"{CHROMIUM} is absent: install Debian's chromium (test.sh does)"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """``streamlit run serve.py`` (app.py behind the page-URL fix of serve.py) on a free port
    with ``AUDIT_DB`` in its own folder."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.db = data_dir / "audits.duckdb"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = data_dir / "server.log"

    def start(self, timeout: float = 60.0) -> AppServer:
        env = {**os.environ, "AUDIT_DB": str(self.db), "PYTHONUNBUFFERED": "1"}
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true",
             "--server.port", str(self.port), "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.read().decode().strip() == "ok":
                        return self
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError("the app did not become healthy in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if getattr(self, "_log", None):
            self._log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    srv = AppServer(tmp_path_factory.mktemp("appdata")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    # module scope: Playwright's sync API keeps an event loop running on this thread until it
    # stops, and later tests that call asyncio.run() (the runner's) need none running
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture()
def page(browser: object, request: pytest.FixtureRequest) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:  # keep what the browser showed (git-ignored folder)
        out = ROOT / "tests" / "_artifacts"
        out.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(out / f"{request.node.name}.png"), full_page=True)
    context.close()


# ----------------------------------------------------------------------------- helpers
def wait_idle(page: object, settle: float = 0.15) -> None:
    """Wait until the script (and any fragment) has finished running."""
    time.sleep(settle)
    page.wait_for_selector(IDLE, timeout=30_000)  # type: ignore[attr-defined]


def open_page(page: object, server: AppServer, url_path: str = "") -> None:
    page.goto(f"{server.url}/{url_path}")  # type: ignore[attr-defined]
    page.wait_for_selector('[data-testid="stSidebar"] [data-testid="stSelectbox"]')  # type: ignore[attr-defined]
    page.wait_for_selector('[data-testid="stMain"] h1')  # type: ignore[attr-defined]
    wait_idle(page, settle=0.5)


def nav(page: object, title: str) -> None:
    """Switch pages through the sidebar navigation (same session)."""
    page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',  # type: ignore[attr-defined]
                 has_text=title).first.click()
    wait_idle(page, settle=0.4)


LIVE_RE = re.compile(
    r"cutoff (?P<cutoff>[-\d.]+) · candidates with any flip (?P<flips>\d+) of (?P<of>\d+) · "
    r"manual reviews per req (?P<reviews>[-\d.,]+|needs the pool)")


def live_numbers(page: object, key: str = "live-numbers") -> dict[str, str]:
    text = page.locator(f".st-key-{key}").inner_text()  # type: ignore[attr-defined]
    m = LIVE_RE.search(text)
    assert m, f"no live line in {text!r}"
    return m.groupdict()


def screenshot(page: object, name: str) -> None:
    """The whole page: Streamlit scrolls inside its main area, so the viewport is stretched to
    the content's height (at most 4,000 px) for the picture and put back afterwards."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size  # type: ignore[attr-defined]
    height = page.evaluate(  # type: ignore[attr-defined]
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
        " return Math.max(m ? m.scrollHeight : 0, document.body.scrollHeight); }")
    tall = min(max(int(height), size["height"]), 4000)
    if tall > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": tall})  # type: ignore[attr-defined]
        time.sleep(0.8)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]
    if tall > size["height"]:
        page.set_viewport_size(size)  # type: ignore[attr-defined]
        time.sleep(0.3)
