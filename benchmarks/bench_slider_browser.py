"""Slider move → updated metric visible in a real browser (headless Debian chromium).

Measures, for the demo audit and for an audit of 5,000 candidates × 30 runs × 7 criteria
(1,050,000 draw rows, built with the core and written with ``Store.write_results``), the time
from a keyboard press on the flip page's cutoff slider to the moment the page shows the live
numbers for the new cutoff (``cutoff … · candidates with any flip … · manual reviews per req …``).
That is the whole loop: browser event → websocket → fragment rerun on the server (LiveAudit
view, flip table, strip plot, curve) → deltas → React render.

Usage: .venv/bin/python benchmarks/bench_slider_browser.py [--moves 30]
Writes benchmarks/results/slider_browser.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.freeze import Criterion, FreezeSheet  # noqa: E402
from core.ingest import criteria_frame  # noqa: E402
from core.store import Store  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, IDLE, AppServer, open_page  # noqa: E402

BIG_ID = "bench-5000x30"
LIVE = re.compile(r"cutoff (?P<cutoff>[-\d.]+) · candidates with any flip (?P<flips>\d+)")


def build_big(db: Path, candidates: int = 5000, runs: int = 30, n_crit: int = 7,
              seed: int = 1) -> None:
    """5,000 candidates × 30 runs × 7 criteria, plus a pool of 20,000 first-pass scores."""
    rng = np.random.default_rng(seed)
    names = [f"criterion_{i + 1}" for i in range(n_crit)]
    quality = rng.normal(0, 1, candidates)
    noise = np.linspace(0.3, 2.5, n_crit)
    ids = np.array([f"b-{i:05d}" for i in range(candidates)])
    cand = np.repeat(np.arange(candidates), runs * n_crit)
    run = np.tile(np.repeat(np.arange(1, runs + 1), n_crit), candidates)
    crit = np.tile(np.arange(n_crit), candidates * runs)
    score = np.clip(np.round(10 + 3 * quality[cand] + rng.normal(0, 1, len(cand)) * noise[crit]),
                    0, 20)
    draws = pd.DataFrame({"candidate_id": ids[cand], "run": run,
                          "criterion": np.array(names)[crit], "score": score,
                          "request_id": [f"{ids[c]}:{r}" for c, r in zip(cand, run)],
                          "model": "bench-model-2026-01-01", "clipped": False})
    pairs = draws.drop_duplicates(["candidate_id", "run"])
    calls = pd.DataFrame({"request_id": pairs["request_id"], "candidate_id": pairs["candidate_id"],
                          "run": pairs["run"], "status": "ok", "source": "bench",
                          "attempts": 1, "model": "bench-model-2026-01-01"})
    pool_q = rng.normal(0, 1, 20000)
    pool = pd.DataFrame({"candidate_id": [f"p-{i:05d}" for i in range(20000)],
                         "first_pass_score": np.round(70 + 21 * pool_q + rng.normal(0, 4, 20000))})
    sheet = FreezeSheet(req_id="BENCH", req_title="benchmark", screener="bench",
                        model="bench-model-2026-01-01", side_effect_free=True,
                        result_cache_off=True,
                        criteria=tuple(Criterion(n, 20.0) for n in names))
    store = Store(db)
    store.save_audit(BIG_ID, sheet.to_dict(), sheet.hash,
                     {"cutoff": 70.0, "applications_per_req": 400.0, "k": 2.0})
    with store.transaction() as cur:
        store.set_criteria(BIG_ID, criteria_frame(list(sheet.criteria)), cur=cur)
        store.set_pool(BIG_ID, pool, cur=cur)
        store.write_results(BIG_ID, calls, draws, cur=cur)
    print(f"built {BIG_ID}: {store.n_draws(BIG_ID):,} draw rows", flush=True)
    store.close()


def measure(page, moves: int) -> tuple[list[float], str]:
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    line = page.locator(".st-key-live-numbers")
    start = LIVE.search(line.inner_text())
    cutoff = float(start["cutoff"])
    thumb.focus()
    times = []
    for i in range(moves):
        key = "ArrowRight" if (i // 5) % 2 == 0 else "ArrowLeft"
        cutoff += 1 if key == "ArrowRight" else -1
        t0 = time.perf_counter()
        thumb.press(key)
        page.wait_for_function(
            "(c) => { const m = /cutoff ([-\\d.]+) · candidates/.exec("
            "document.querySelector('.st-key-live-numbers')?.innerText || '');"
            " return m && parseFloat(m[1]) === c; }", arg=cutoff, timeout=30_000)
        times.append((time.perf_counter() - t0) * 1000)
        page.wait_for_selector(IDLE)
        time.sleep(0.3)  # let the slider's debounce window close before the next move
    return times, start.group(0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moves", type=int, default=30)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="bench-slider-"))
    t0 = time.perf_counter()
    build_big(tmp / "audits.duckdb")
    build_s = time.perf_counter() - t0
    srv = AppServer(tmp).start()
    rows = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for label, audit in (("demo (40 × 15, 3,000 draw rows)", "demo-ENG-2291"),
                                 ("5,000 × 30 × 7 (1,050,000 draw rows)", BIG_ID)):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(120_000)
                t1 = time.perf_counter()
                open_page(page, srv, f"flip?audit={audit}")
                page.wait_for_selector(".st-key-live-numbers")
                first = (time.perf_counter() - t1) * 1000
                times, start = measure(page, args.moves)
                arr = np.array(times)
                rows.append((label, len(arr), np.median(arr), np.percentile(arr, 95), arr.min(),
                             arr.max(), first))
                print(f"{label}: median {np.median(arr):.0f} ms, p95 "
                      f"{np.percentile(arr, 95):.0f} ms (from {start})", flush=True)
                page.close()
            browser.close()
    finally:
        srv.stop()
    out = ROOT / "benchmarks" / "results" / "slider_browser.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Slider move → updated metric in the browser",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}), headless "
        "Debian chromium via Playwright, app and browser on the same machine.",
        "",
        "Each sample: one keyboard press on the flip page's cutoff slider → the page shows the "
        "live numbers for the new cutoff (fragment rerun on the server: LiveAudit view, flip "
        "table, strip plot of ≤ 200 candidates, flip curve; deltas; render). "
        f"{args.moves} moves per audit, ±1 point, 0.3 s apart.",
        "",
        "| audit | moves | median (ms) | p95 (ms) | min (ms) | max (ms) | first page load (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, n, med, p95, lo, hi, first in rows:
        lines.append(f"| {label} | {n} | {med:.0f} | {p95:.0f} | {lo:.0f} | {hi:.0f} | "
                     f"{first:.0f} |")
    lines += ["", f"Building the large audit with the core took {build_s:.1f} s. The first page "
              "load includes the one-off analysis of the audit (cached per data version)."]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
