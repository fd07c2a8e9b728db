"""What several test modules share: the project's root, the committed fixtures, small frame
builders and the command line run the way a user runs it (``python -m core`` in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

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
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=str(cwd or ROOT),
                          capture_output=True, text=True, timeout=timeout)
