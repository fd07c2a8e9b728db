"""Synthetic audits for the benchmarks: K candidates × N runs × C criteria, seeded."""

from __future__ import annotations

import numpy as np
import pandas as pd


def long_draws(candidates: int = 5000, runs: int = 30, criteria: int = 6, seed: int = 1
               ) -> pd.DataFrame:
    """Long draws with ``criteria`` criteria plus the screener's total (criteria + 1 rows/draw).

    5,000 × 30 × (6 + total) = 1,050,000 rows: the SPEC's "1,000,000 draw rows".
    """
    rng = np.random.default_rng(seed)
    names = [f"criterion_{j + 1}" for j in range(criteria)]
    quality = rng.normal(0, 1, candidates)
    cand = np.repeat(np.arange(candidates), runs)
    run = np.tile(np.arange(1, runs + 1), candidates)
    scores = np.empty((len(cand), criteria))
    for j in range(criteria):
        mean = 6 + 1.5 * quality[cand] * (j % 3 != 2)
        noise = rng.normal(0, 0.5 + 1.0 * (j % 3 == 1), len(cand))
        scores[:, j] = np.clip(np.round(mean + noise), 0, 10)
    total = scores.sum(axis=1)
    ids = np.array([f"cand-{i:05d}" for i in range(candidates)], dtype=object)
    cols = {"candidate_id": np.repeat(ids[cand], criteria + 1),
            "run": np.repeat(run, criteria + 1),
            "criterion": np.tile(np.array(names + ["total"], dtype=object), len(cand)),
            "score": np.column_stack([scores, total]).reshape(-1)}
    return pd.DataFrame(cols)


def pool(size: int = 20000, seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.normal(36, 8, size)), 0, 60)
