"""Shared fixtures for the test suite: a temporary DuckDB path, a store, the demo audit (built
once per session). Plain helpers live in :mod:`tests.support`."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "audits.duckdb"


@pytest.fixture
def store(db_path: Path):
    from core.store import Store

    s = Store(db_path)
    yield s
    s.close()


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file holding the demo audit (closed again, so subprocesses can open it)."""
    from core.demo import ensure_demo
    from core.store import Store

    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    s = Store(path)
    ensure_demo(s)
    s.close()
    return path


@pytest.fixture(scope="session")
def demo_result(demo_db: Path):
    """The demo audit, analysed once."""
    from core.audit import analyze
    from core.demo import DEMO_AUDIT_ID
    from core.store import Store

    s = Store(demo_db, read_only=True)
    try:
        return analyze(s, DEMO_AUDIT_ID)
    finally:
        s.close()
