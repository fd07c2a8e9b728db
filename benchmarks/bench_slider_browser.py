"""Slider move → updated metric visible in a real browser (headless Debian chromium).

Measures, for the demo audit and for an audit of 5,000 candidates × 30 runs × 7 criteria
(1,050,000 draw rows, built with the core and written with ``Store.write_results``), the time
from a keyboard press on the flip page's cutoff slider to the moment the page shows the live
numbers for the new cutoff (``cutoff … · candidates with any flip … · manual reviews per req …``).
That is the whole loop: browser event → websocket → fragment rerun on the server (LiveAudit
view, flip table, strip plot, curve) → deltas → React render.

Next to it, on the demo: the time of a page switch through the sidebar (click → the new
page's title shown and the script idle) and of each kind of widget answer (a number input, a
toggle, a radio, the k slider: input → the page shows the answer and the script is idle).

Usage: .venv/bin/python benchmarks/bench_slider_browser.py [--moves 30] [--switches 24]
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


def move_cutoff(page, thumb, i: int, cutoff: float) -> tuple[float, float]:
    """Move ``i`` of the cutoff slider (five right, five left, …): press the key and wait until
    the live numbers show the new cutoff. Returns the new cutoff and the press's start time."""
    key = "ArrowRight" if (i // 5) % 2 == 0 else "ArrowLeft"
    cutoff += 1 if key == "ArrowRight" else -1
    t0 = time.perf_counter()
    thumb.press(key)
    page.wait_for_function(
        "(c) => { const m = /cutoff ([-\\d.]+) · candidates/.exec("
        "document.querySelector('.st-key-live-numbers')?.innerText || '');"
        " return m && parseFloat(m[1]) === c; }", arg=cutoff, timeout=30_000)
    return cutoff, t0


def measure(page, moves: int) -> tuple[list[float], str]:
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    line = page.locator(".st-key-live-numbers")
    start = LIVE.search(line.inner_text())
    cutoff = float(start["cutoff"])
    thumb.focus()
    times = []
    for i in range(moves):
        cutoff, t0 = move_cutoff(page, thumb, i, cutoff)
        times.append((time.perf_counter() - t0) * 1000)
        page.wait_for_selector(IDLE)
        time.sleep(0.3)  # let the slider's debounce window close before the next move
    return times, start.group(0)


SWITCH_ORDER = [("4 · Criteria", "Noise per criterion"), ("5 · Flip", "Flip rate at the cutoff"),
                ("6 · Band", "Manual-review band"), ("2 · Sample", "Frame the sample"),
                ("1 · Freeze", "Freeze the harness"), ("3 · Run", None)]


def _idle_after(page, t0: float) -> float:
    page.wait_for_selector(IDLE)
    return (time.perf_counter() - t0) * 1000


def measure_switches(page, n: int, per_page: dict[str, list[float]] | None = None
                     ) -> list[float]:
    """Click a sidebar link → the new page's h1 and an idle script (``per_page``: the same
    times by the page switched to)."""
    times = []
    for i in range(n):
        link, title = SWITCH_ORDER[i % len(SWITCH_ORDER)]
        t0 = time.perf_counter()
        page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',
                     has_text=link).first.click()
        if title:
            page.wait_for_function(
                "(t) => document.querySelector('[data-testid=\"stMain\"] h1')?.innerText === t",
                arg=title)
        else:
            page.wait_for_url(re.compile(r"/run\b"))
            time.sleep(0.05)
        times.append(_idle_after(page, t0))
        if per_page is not None:
            per_page.setdefault(link, []).append(times[-1])
        time.sleep(0.3)
    return times


def measure_widgets(page, n: int) -> dict[str, list[float]]:
    """Each widget kind on the Band and Flip pages, ``n`` answers each."""
    out: dict[str, list[float]] = {"number input (capacity)": [], "toggle (half-width by hand)": [],
                                   "slider (k, keyboard)": [], "radio (cutoff by top k)": []}
    page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',
                 has_text="6 · Band").first.click()
    page.wait_for_selector(".st-key-band-live-numbers")
    page.wait_for_selector(IDLE)
    cap = page.get_by_label("Reviewer capacity (manual reviews the team can do per req)")
    for i in range(n):
        value = 30 + 5 * (i % 6) + (1 if i % 2 else 0)
        cap.fill(str(value))
        t0 = time.perf_counter()
        cap.press("Enter")
        page.wait_for_function(
            "(v) => document.querySelector('[data-testid=\"stMain\"]').innerText"
            ".includes('can do ' + v)", arg=str(value))
        out["number input (capacity)"].append(_idle_after(page, t0))
        time.sleep(0.3)
    toggle = page.get_by_text("Set the half-width by hand")
    for i in range(n):
        t0 = time.perf_counter()
        toggle.click()
        want = "visible" if i % 2 == 0 else "hidden"
        page.get_by_label("Half-width (points each side of the cutoff)").wait_for(state=want)
        out["toggle (half-width by hand)"].append(_idle_after(page, t0))
        time.sleep(0.3)
    if page.get_by_label("Half-width (points each side of the cutoff)").count():
        toggle.click()
        page.wait_for_selector(IDLE)
    k = page.locator('[data-testid="stSlider"]', has_text="Band width k") \
        .locator('input[type="range"]')
    k.focus()
    for i in range(n):
        before = page.locator('[data-testid="stMetric"]', has_text="Manual-review band") \
            .inner_text()
        t0 = time.perf_counter()
        k.press("ArrowRight" if (i // 5) % 2 == 0 else "ArrowLeft")
        page.wait_for_function(
            "(b) => { const m = [...document.querySelectorAll('[data-testid=\"stMetric\"]')]"
            ".find(e => e.innerText.includes('Manual-review band')); return m && "
            "m.innerText !== b; }", arg=before)
        out["slider (k, keyboard)"].append(_idle_after(page, t0))
        time.sleep(0.3)
    page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',
                 has_text="5 · Flip").first.click()
    page.wait_for_selector(".st-key-live-numbers")
    page.wait_for_selector(IDLE)
    for i in range(n):
        label = "by top k of a ranked list" if i % 2 == 0 else "by score (slider)"
        t0 = time.perf_counter()
        page.get_by_text(label).click()
        if i % 2 == 0:
            page.get_by_label("The recruiter works the top k").wait_for()
        else:
            page.locator('[data-testid="stSlider"]').first.wait_for()
        out["radio (cutoff by top k)"].append(_idle_after(page, t0))
        time.sleep(0.3)
    return out


# ----------------------------------------------------------------------------- --profile
_LONGTASKS_JS = """() => { window.__lt = []; new PerformanceObserver(l => { for (const e of
  l.getEntries()) window.__lt.push([e.startTime + performance.timeOrigin, e.duration]); })
  .observe({type: 'longtask', buffered: false}); }"""


class WireTap:
    """Websocket frames seen by the browser (CDP ``Network``): when the input left, when the
    server's first and last answer arrived, and how many bytes it sent."""

    def __init__(self, page) -> None:
        self.frames: list[tuple[str, float, int]] = []
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.send("Network.enable")
        self.cdp.on("Network.webSocketFrameSent",
                    lambda e: self.frames.append(("sent", e["timestamp"],
                                                  len(e["response"]["payloadData"]))))
        self.cdp.on("Network.webSocketFrameReceived",
                    lambda e: self.frames.append(("recv", e["timestamp"],
                                                  len(e["response"]["payloadData"]))))
        self.page = page
        page.evaluate(_LONGTASKS_JS)

    def mark(self) -> tuple[int, float]:
        self.page.evaluate("() => { window.__lt = []; }")
        return len(self.frames), self.page.evaluate("() => performance.timeOrigin + "
                                                    "performance.now()")

    def split(self, start: tuple[int, float], visible_ms: float, idle_ms: float) -> dict:
        """Times from the input (ms): server answer starts / ends, bytes, long tasks."""
        n0, _ = start
        frames = self.frames[n0:]
        sent = [t for kind, t, _ in frames if kind == "sent"]
        recv = [(t, size) for kind, t, size in frames if kind == "recv"]
        lt = self.page.evaluate("() => window.__lt")
        if not sent or not recv:
            return {}
        t0 = sent[0]
        return {"first answer": (recv[0][0] - t0) * 1000, "last answer": (recv[-1][0] - t0) * 1000,
                "visible": visible_ms, "idle": idle_ms,
                "kB": sum(s for _, s in recv) / 1024,
                "long tasks (ms)": sum(d for _, d in lt), "n long": len(lt)}


def _profile_row(label: str, rows: list[dict]) -> str:
    keys = ["first answer", "last answer", "visible", "idle", "kB", "long tasks (ms)"]
    med = [np.median([r[k] for r in rows if r]) for k in keys]
    return f"| {label} | {len(rows)} | " + " | ".join(f"{m:.0f}" for m in med) + " |"


def profile(page, n: int) -> list[str]:
    """Where the time of one answer goes (medians): the websocket frames give the server's part
    (input sent → last delta received), long tasks on the main thread give the browser's
    script + layout + paint, ``visible`` the moment the new numbers show."""
    tap = WireTap(page)
    out = []
    # flip: cutoff slider
    nav_to(page, "5 · Flip", ".st-key-live-numbers")
    tap.page.evaluate(_LONGTASKS_JS)
    thumb = page.locator('[data-testid="stSlider"] input[type="range"]').first
    cutoff = float(LIVE.search(page.locator(".st-key-live-numbers").inner_text())["cutoff"])
    thumb.focus()
    rows = []
    for i in range(n):
        start = tap.mark()
        cutoff, t0 = move_cutoff(page, thumb, i, cutoff)
        vis = (time.perf_counter() - t0) * 1000
        idle = _idle_after(page, t0)
        time.sleep(0.5)
        rows.append(tap.split(start, vis, idle))
    out.append(_profile_row("cutoff slider (Flip)", rows))
    # band: k slider and toggle
    nav_to(page, "6 · Band", ".st-key-band-live-numbers")
    tap.page.evaluate(_LONGTASKS_JS)
    k = page.locator('[data-testid="stSlider"]', has_text="Band width k") \
        .locator('input[type="range"]')
    k.focus()
    rows = []
    for i in range(n):
        before = page.locator('[data-testid="stMetric"]', has_text="Manual-review band") \
            .inner_text()
        start = tap.mark()
        t0 = time.perf_counter()
        k.press("ArrowRight" if (i // 5) % 2 == 0 else "ArrowLeft")
        page.wait_for_function(
            "(b) => { const m = [...document.querySelectorAll('[data-testid=\"stMetric\"]')]"
            ".find(e => e.innerText.includes('Manual-review band')); return m && "
            "m.innerText !== b; }", arg=before)
        vis = (time.perf_counter() - t0) * 1000
        idle = _idle_after(page, t0)
        time.sleep(0.5)
        rows.append(tap.split(start, vis, idle))
    out.append(_profile_row("k slider (Band)", rows))
    toggle = page.get_by_text("Set the half-width by hand")
    rows = []
    for i in range(n):
        start = tap.mark()
        t0 = time.perf_counter()
        toggle.click()
        want = "visible" if i % 2 == 0 else "hidden"
        page.get_by_label("Half-width (points each side of the cutoff)").wait_for(state=want)
        vis = (time.perf_counter() - t0) * 1000
        idle = _idle_after(page, t0)
        time.sleep(0.5)
        rows.append(tap.split(start, vis, idle))
    out.append(_profile_row("toggle (Band)", rows))
    rows = []
    for i in range(n):
        link, title = SWITCH_ORDER[i % 5]
        start = tap.mark()
        t0 = time.perf_counter()
        page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',
                     has_text=link).first.click()
        page.wait_for_function(
            "(t) => document.querySelector('[data-testid=\"stMain\"] h1')?.innerText === t",
            arg=title)
        vis = (time.perf_counter() - t0) * 1000
        idle = _idle_after(page, t0)
        time.sleep(0.5)
        rows.append(tap.split(start, vis, idle))
    out.append(_profile_row("page switch", rows))
    return out


def nav_to(page, link: str, selector: str) -> None:
    page.locator('[data-testid="stSidebar"] a[data-testid="stPageLink-NavLink"]',
                 has_text=link).first.click()
    page.wait_for_selector(selector)
    page.wait_for_selector(IDLE)
    time.sleep(0.5)


def run_profile(out: Path, n: int) -> None:
    from playwright.sync_api import sync_playwright
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    srv = AppServer(tmp).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            open_page(page, srv, "?audit=demo-ENG-2291")
            rows = profile(page, n)
            browser.close()
    finally:
        srv.stop()
    text = "\n".join([
        f"Profile of the demo, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load average "
        f"{load_start[0]:.1f} → {os.getloadavg()[0]:.1f}. Medians of {n} answers, ms from the "
        "input frame leaving the browser (CDP websocket frames); long tasks = main-thread work "
        "over 50 ms (script, style, layout, paint) between input and idle.", "",
        "| answer | n | first frame back | last frame back | new value visible | idle | "
        "kB received | long tasks (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|", *rows]) + "\n"
    out.write_text(text)
    print(text)


def _row(label: str, arr: np.ndarray) -> str:
    return (f"| {label} | {len(arr)} | {np.median(arr):.0f} | {np.percentile(arr, 95):.0f} | "
            f"{arr.min():.0f} | {arr.max():.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moves", type=int, default=30)
    ap.add_argument("--switches", type=int, default=24)
    ap.add_argument("--answers", type=int, default=10)
    ap.add_argument("--demo-only", action="store_true",
                    help="skip the 1,050,000-row audit (quicker comparisons)")
    ap.add_argument("--profile", type=Path, default=None, metavar="OUT.md",
                    help="instead: split each kind of answer on the demo into server and "
                         "browser time (websocket frames and long tasks) and write OUT.md")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "slider_browser.md", help="where to write the table (A/B runs: somewhere else than the record)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright
    if args.profile is not None:
        return run_profile(args.profile, args.answers)

    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-slider-"))
    t0 = time.perf_counter()
    if not args.demo_only:
        build_big(tmp / "audits.duckdb")
    build_s = time.perf_counter() - t0
    srv = AppServer(tmp).start()
    rows = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            audits = [("demo (40 × 15, 3,000 draw rows)", "demo-ENG-2291")]
            if not args.demo_only:
                audits.append(("5,000 × 30 × 7 (1,050,000 draw rows)", BIG_ID))
            for label, audit in audits:
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
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            open_page(page, srv, "?audit=demo-ENG-2291")
            per_page: dict[str, list[float]] = {}
            switches = np.array(measure_switches(page, args.switches, per_page))
            print(f"page switch: median {np.median(switches):.0f} ms, p95 "
                  f"{np.percentile(switches, 95):.0f} ms", flush=True)
            widgets = {k: np.array(v) for k, v in measure_widgets(page, args.answers).items()}
            for label, arr in widgets.items():
                print(f"{label}: median {np.median(arr):.0f} ms, p95 "
                      f"{np.percentile(arr, 95):.0f} ms", flush=True)
            page.close()
            browser.close()
    finally:
        srv.stop()
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Slider move → updated metric in the browser",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}), headless "
        "Debian chromium via Playwright, app and browser on the same machine. Load average "
        f"(1 min) {load_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: "
        "anything above ~1 means other work shared the 2 cores and inflates every figure.",
        "",
        "Each sample: one keyboard press on the flip page's cutoff slider → the page shows the "
        "live numbers for the new cutoff (fragment rerun on the server: LiveAudit view, flip "
        "table, strip plot of ≤ 200 candidates; deltas; render; the flip curve is outside the "
        "fragment). "
        f"{args.moves} moves per audit, ±1 point, 0.3 s apart.",
        "",
        "| audit | moves | median (ms) | p95 (ms) | min (ms) | max (ms) | first page load (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, n, med, p95, lo, hi, first in rows:
        lines.append(f"| {label} | {n} | {med:.0f} | {p95:.0f} | {lo:.0f} | {hi:.0f} | "
                     f"{first:.0f} |")
    lines += ["", f"Building the large audit with the core took {build_s:.1f} s. The first page "
              "load includes the one-off analysis of the audit (cached per data version).",
              "", "## Page switches and widget answers (demo)", "",
              "Page switch: a click on a sidebar link → the new page's title shown and the script "
              "idle. Widget answer: the input → the page shows the answer and the script is "
              "idle. The slider row above stops at the updated number; these stop at idle.", "",
              "| what | samples | median (ms) | p95 (ms) | min (ms) | max (ms) |",
              "|---|---:|---:|---:|---:|---:|",
              _row("page switch (sidebar link)", switches)]
    lines += [_row(label, arr) for label, arr in widgets.items()]
    lines += ["", "Page switches by the page switched to:", "",
              "| to | samples | median (ms) | p95 (ms) | min (ms) | max (ms) |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [_row(link, np.array(v)) for link, v in per_page.items()]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
