"""What several test modules share: the project's root, the committed fixtures, small frame
builders and the command line run the way a user runs it (``python -m core`` in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


def http_json_config(tmp: Path, url: str, runs: int, k: int) -> Path:
    """An audit config (``audit.toml`` and a k-candidate ``sample.csv`` in ``tmp``) for an
    http-json screener at ``url``: four criteria, no retries, no pre-flight."""
    rows = ["candidate_id,stratum,first_pass_score,application"]
    rows += [f"c{i:02d},band,{60 + i},Application {i} with some text" for i in range(k)]
    (tmp / "sample.csv").write_text("\n".join(rows) + "\n")
    cfg = tmp / "audit.toml"
    cfg.write_text(textwrap.dedent(f"""
        [audit]
        id = "kill"
        req_id = "ENG-9"
        cutoff = 60
        [harness]
        model = "fake-model-1"
        side_effect_free = true
        result_cache_off = true
        [[criteria]]
        name = "technical_skills"
        max = 30
        [[criteria]]
        name = "experience"
        max = 25
        [[criteria]]
        name = "projects"
        max = 25
        [[criteria]]
        name = "communication"
        max = 20
        [screener]
        kind = "http-json"
        url = "{url}/score"
        api_key_env = "FAKE_SCREENER_KEY"
        model_path = "model"
        [run]
        runs = {runs}
        concurrency = 4
        sample = "sample.csv"
        seed = 5
        max_retries = 0
        max_calls_per_pair = 8
        backoff_base_s = 0.01
        backoff_cap_s = 0.05
        preflight = false
    """))
    return cfg
