"""Engine benchmarks for SPEC §6.

1. Slider recompute at 1,050,000 draw rows (5,000 candidates × 30 runs × 6 criteria + total):
   a cutoff/k move answered by the precomputed LiveAudit (flip table, band, throughput,
   re-run exposure) against recomputing the same numbers from a pandas groupby each time.
2. Import of a 1,050,000-row long CSV into a DuckDB file (validate + one transaction).

Usage: python benchmarks/bench_engine.py [--repeats 200] [--out benchmarks/results/engine.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _data import long_draws, pool  # noqa: E402

from core.draws import Draws  # noqa: E402
from core.ingest import commit_draws, validate_draws  # noqa: E402
from core.live import LiveAudit  # noqa: E402
from core.store import Store  # noqa: E402


def naive_recompute(long: pd.DataFrame, pool_scores: np.ndarray, cutoff: float, k: float,
                    apps: float) -> dict:
    """What a page would do without the engine: groupby from the long table on every move."""
    totals = long[long["criterion"] == "total"]
    g = totals.groupby("candidate_id")["score"]
    means = g.transform("mean")
    n = g.transform("size")
    resid = (totals["score"] - means) * np.sqrt(n / (n - 1))
    within = np.sqrt(((totals["score"] - means) ** 2).sum() / (n.groupby(
        totals["candidate_id"]).first() - 1).sum())
    per = totals.assign(p=totals["score"] >= cutoff).groupby("candidate_id").agg(
        k=("p", "sum"), n=("p", "size"), mean=("score", "mean"))
    kk, nn = per["k"].to_numpy(), per["n"].to_numpy()
    lo = np.where(kk > 0, stats.beta.ppf(0.025, kk, nn - kk + 1), 0)
    hi = np.where(kk < nn, stats.beta.ppf(0.975, kk + 1, nn - kk), 1)
    alpha = stats.norm.cdf(-k)
    hl = np.quantile(resid, 1 - alpha, method="higher")
    hu = -np.quantile(resid, alpha, method="lower")
    low, high = cutoff - max(k * within, hl), cutoff + max(k * within, hu)
    share = np.mean((pool_scores >= low) & (pool_scores <= high))
    mu, v = pool_scores.mean(), pool_scores.var(ddof=1)
    rho = max(0.0, v - within ** 2) / v
    m = mu + rho * (pool_scores - mu)
    p_below = stats.norm.cdf((cutoff - m) / (np.sqrt(1 + rho) * within))
    reverse = np.where(pool_scores >= cutoff, p_below, 1 - p_below).mean() * apps
    return {"reverse": reverse, "flips": int(((kk > 0) & (kk < nn)).sum()), "low": low, "high": high,
            "reviews": share * apps, "ci": (lo, hi)}


def bench_slider(repeats: int) -> dict:
    long = long_draws()
    pool_scores = pool()
    t0 = time.perf_counter()
    draws = Draws.from_long(long)
    live = LiveAudit(draws, pool_scores, applications_per_req=400)
    build = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    cutoffs = rng.uniform(30, 42, repeats)
    ks = rng.uniform(1.0, 3.0, repeats)
    fast = []
    for t, k in zip(cutoffs, ks):
        s = time.perf_counter()
        v = live.view(float(t), float(k))
        live.flip_table(float(t))
        fast.append(time.perf_counter() - s)
    slow = []
    for t, k in list(zip(cutoffs, ks))[: max(10, repeats // 10)]:
        s = time.perf_counter()
        ref = naive_recompute(long, pool_scores, float(t), float(k), 400)
        slow.append(time.perf_counter() - s)
    # the two paths agree (last move)
    assert ref["flips"] == live.view(float(t), float(k)).flip.candidates_with_flip
    fast_ms, slow_ms = np.array(fast) * 1e3, np.array(slow) * 1e3
    del v
    return {"rows": len(long), "build_s": build,
            "fast_median": float(np.median(fast_ms)), "fast_p95": float(np.percentile(fast_ms, 95)),
            "slow_median": float(np.median(slow_ms)), "slow_p95": float(np.percentile(slow_ms, 95)),
            "ratio": float(np.median(slow_ms) / np.median(fast_ms)), "repeats": repeats}


def bench_import() -> dict:
    long = long_draws()
    with tempfile.TemporaryDirectory() as tmp:
        csv = os.path.join(tmp, "draws.csv")
        long.to_csv(csv, index=False)
        size_mb = os.path.getsize(csv) / 1e6
        times = []
        for i in range(3):
            db = os.path.join(tmp, f"a{i}.duckdb")
            s = time.perf_counter()
            store = Store(db)
            commit_draws(store, "bench", validate_draws(csv))
            times.append(time.perf_counter() - s)
            store.close()
    return {"rows": len(long), "size_mb": size_mb, "best_s": min(times),
            "median_s": float(np.median(times))}


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.platform()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/engine.md")
    a = ap.parse_args()
    sl = bench_slider(a.repeats)
    im = bench_import()
    text = f"""### Engine (`python benchmarks/bench_engine.py`) — {time.strftime('%Y-%m-%d')}

Machine: {machine()}

| what | target (SPEC §6) | measured |
|---|---|---|
| slider recompute, {sl['rows']:,} draw rows (flip table + band + throughput + exposure) | p95 ≤ 50 ms | median {sl['fast_median']:.2f} ms, p95 {sl['fast_p95']:.2f} ms ({sl['repeats']} moves) |
| same numbers from a pandas groupby each move | — | median {sl['slow_median']:.0f} ms, p95 {sl['slow_p95']:.0f} ms |
| speed-up of the precomputed engine | ≥ 10× | {sl['ratio']:.0f}× |
| one-off build of the engine per audit (draw matrix + LiveAudit) | — | {sl['build_s']:.2f} s |
| import of a {im['rows']:,}-row long CSV ({im['size_mb']:.0f} MB) into DuckDB | ≤ 5 s | best {im['best_s']:.2f} s, median {im['median_s']:.2f} s (validate + one transaction) |
"""
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
