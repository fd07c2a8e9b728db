"""Shared helpers for the Streamlit AppTest suites (test_pages, test_run_page)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.store import Store

TIMEOUT = 60
ROOT = Path(__file__).resolve().parents[1]


def app_store() -> Store:
    """The app's own store (the cached resource), to compute what a page must show."""
    from ui.state import _open_store, db_path
    return _open_store(db_path())


def app_on(audit_id: str) -> AppTest:
    """A session opened on ``?audit=<id>`` (how a reload keeps the active audit)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["audit"] = audit_id
    at.run()
    assert not at.exception
    return at


def open_page(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def plain(markdown: str) -> str:
    """Message text without the Markdown escapes that keep user text literal."""
    return markdown.replace("\\", "")
