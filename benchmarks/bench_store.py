"""What short-lived access to the DuckDB file costs (issue 8 item 9).

The store attaches the file for each call and detaches it afterwards (so a terminal can use the
file while the app is open). This measures, against the previous design (one connection held
for the process's life, taken from git at ``--before``):

1. the reads of one page run (sidebar + a statistics page's prerequisites: list_audits,
   get_audit, n_draws, get_candidates, get_pool, completed_pairs ×2, data_version) on the demo
   and on a 5,000 × 30 × 7 audit (1,050,000 draw rows);
2. one batch write of 64 calls and their draws (what the runner's writer commits);
3. ``data_version`` alone (what a page reads to pick its cached analysis).

A slider move reads nothing from the file (the fragment answers from core.live); see
benchmarks/bench_engine.py for it.

    .venv/bin/python benchmarks/bench_store.py [--repeats 30] [--before f71de0b]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _data import long_draws  # noqa: E402

from core.demo import DEMO_AUDIT_ID, ensure_demo  # noqa: E402
from core.store import Store  # noqa: E402


def old_store_class(commit: str) -> type:
    src = subprocess.run(["git", "show", f"{commit}:core/store.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_store.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_store", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.Store


def page_reads(s, audit_id: str) -> None:
    s.list_audits()
    s.get_audit(audit_id)
    s.n_draws(audit_id)
    s.get_candidates(audit_id)
    s.get_pool(audit_id)
    s.completed_pairs(audit_id)
    s.completed_pairs(audit_id)
    s.data_version(audit_id)


def batch(i: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    ids = [f"b{i}-{j}" for j in range(64)]
    calls = pd.DataFrame({"request_id": ids, "candidate_id": [f"x{j}" for j in range(64)],
                          "run": i + 1, "status": "ok", "attempts": 1})
    draws = pd.DataFrame({"candidate_id": [f"x{j}" for j in range(64) for _ in range(5)],
                          "run": i + 1, "criterion": [f"c{k}" for _ in range(64)
                                                      for k in range(5)],
                          "score": 3.0, "request_id": [r for r in ids for _ in range(5)],
                          "model": "m", "clipped": False})
    return calls, draws


def timed_pair(old_fn, new_fn, repeats: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Old and new alternately (the machine's load hits both alike): (median, p95) each."""
    ts: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        for k, fn in enumerate((old_fn, new_fn)):
            t = time.perf_counter()
            fn(i)
            ts[k].append((time.perf_counter() - t) * 1000)
    out = []
    for x in ts:
        x.sort()
        out.append((statistics.median(x), x[min(len(x) - 1, int(round(0.95 * (len(x) - 1))))]))
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--before", default="f71de0b")
    a = ap.parse_args()
    Old = old_store_class(a.before)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        demo_db = Path(tmp) / "demo.duckdb"
        ensure_demo(Store(demo_db))
        big_db = Path(tmp) / "big.duckdb"
        big = Store(big_db)
        big.save_audit("big", {"req_id": "big"}, "h", {})
        big.write_results("big", None,
                          long_draws().assign(request_id=None, model=None, clipped=False))
        for name, db, aid in (("demo", demo_db, DEMO_AUDIT_ID),
                              ("1,050,000 draw rows", big_db, "big")):
            copy = Path(tmp) / f"old-{db.name}"
            shutil.copy(db, copy)
            old, new = Old(copy), Store(db)
            o, n = timed_pair(lambda i, s=old, aid=aid: page_reads(s, aid),
                              lambda i, s=new, aid=aid: page_reads(s, aid), a.repeats)
            rows.append((f"reads of one page run, {name}", o, n))
            o, n = timed_pair(lambda i, s=old, aid=aid: s.data_version(aid),
                              lambda i, s=new, aid=aid: s.data_version(aid), a.repeats)
            rows.append((f"data_version, {name}", o, n))
            old.close()
        frame = long_draws().assign(request_id=None, model=None, clipped=False)
        o, n = timed_pair(lambda i: Old(Path(tmp) / f"imp-old-{i}.duckdb").write_results(
                              "imp", None, frame),
                          lambda i: Store(Path(tmp) / f"imp-new-{i}.duckdb").write_results(
                              "imp", None, frame), max(2, a.repeats // 10))
        rows.append(("an import's transaction: 1,050,000 draw rows into a new file", o, n))
        old, new = Old(Path(tmp) / "w-old.duckdb"), Store(Path(tmp) / "w-new.duckdb")
        o, n = timed_pair(lambda i: old.write_results("w", *batch(i)),
                          lambda i: new.write_results("w", *batch(i)), a.repeats)
        rows.append(("one runner batch (64 calls + 320 draws)", o, n))
        old.close()
    lines = ["## Short-lived access to the DuckDB file (`benchmarks/bench_store.py`)", "",
             f"Machine: {platform.platform()}, Python {platform.python_version()}, "
             f"{os.cpu_count()} CPU(s); {a.repeats} repeats each; before = `core/store.py` at "
             f"{a.before}.", "",
             "| what | before: one connection held, median / p95 (ms) | now: attach per call, "
             "median / p95 (ms) |", "|---|---:|---:|"]
    for what, o, n in rows:
        lines.append(f"| {what} | {o[0]:.1f} / {o[1]:.1f} | {n[0]:.1f} / {n[1]:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
