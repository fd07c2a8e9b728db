"""Shared fixtures for the audit-engine tests: small frame builders, a temporary DuckDB path,
the committed fixture files and the demo audit (built once per session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The committed draws fixture (tests/fixtures/draws_long.csv and its siblings), by hand:
#   X: a = 1 2 3, b = 4 6 5  -> totals 5 8 8
#   Y: a = 5 5 8, b = 2 2 2  -> totals 7 7 10
#   Z: a = 9 9 9, b = 7 8 9  -> totals 16 17 18
FIXTURE_DRAWS = {"X": {"a": [1, 2, 3], "b": [4, 6, 5]},
                 "Y": {"a": [5, 5, 8], "b": [2, 2, 2]},
                 "Z": {"a": [9, 9, 9], "b": [7, 8, 9]}}


def long_frame(data: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """``{candidate: {criterion: [run1, run2, …]}}`` → long ``candidate_id, run, criterion,
    score``."""
    rows = []
    for cid, crit in data.items():
        for name, values in crit.items():
            for j, v in enumerate(values, start=1):
                rows.append((str(cid), j, name, float(v)))
    return pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score"])


def totals_frame(totals: dict[str, list[float]]) -> pd.DataFrame:
    """A total-only long frame: ``{candidate: [T_1, T_2, …]}``."""
    return long_frame({c: {"total": v} for c, v in totals.items()})


def anchored_totals(rng: np.random.Generator, *, band: int = 6, high: int = 6, low: int = 6,
                    runs: int = 5, cutoff: float = 50.0, noise: float = 2.0
                    ) -> dict[str, list[float]]:
    """Totals for a sample with band candidates near ``cutoff`` and anchors far on each side."""
    out: dict[str, list[float]] = {}
    centers = ([cutoff + d for d in np.linspace(-2, 2, band)]
               + [cutoff + 30 + 2 * i for i in range(high)]
               + [cutoff - 30 - 2 * i for i in range(low)])
    for i, c in enumerate(centers):
        out[f"c{i:03d}"] = list(np.round(c + rng.normal(0, noise, runs)))
    return out


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess:
    """``python -m core ARGS`` in a subprocess (the way a user runs it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=str(cwd or ROOT),
                          capture_output=True, text=True, timeout=timeout, env=env)


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
