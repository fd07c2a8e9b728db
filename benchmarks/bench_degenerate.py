"""Time and memory of every page and report format on degenerate audits (issue 8 item 6;
SPEC §6: "no page, report or import grows with the score range").

    .venv/bin/python benchmarks/bench_degenerate.py [--out benchmarks/results/degenerate.md]

The audits are tests/degenerate.py's (scores up to 1e9, one draw, all equal, every call failed,
2 runs among 30). Each audit is measured in a fresh process: resident memory after the imports
and a first app run, then each page through Streamlit's AppTest and each report format, with
the peak resident set size (``ru_maxrss``) after each step and the wall time of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PAGES = ("freeze", "sample", "run", "criteria", "flip", "band", "drift")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(db: str, audit_id: str) -> dict:
    """In this process: every page, then every report format, of one audit."""
    os.environ["AUDIT_DB"] = db
    from streamlit.testing.v1 import AppTest

    from core.audit import analyze
    from core.errors import AuditError
    from core.report import FORMATS, render
    from core.store import Store

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["audit"] = audit_id
    at.run()
    base = _peak_mb()
    steps = []
    for page in PAGES:
        t = time.perf_counter()
        at.switch_page(f"pages/{page}.py")
        at.run()
        steps.append({"step": f"page {page}", "s": time.perf_counter() - t,
                      "peak_mb": _peak_mb(), "error": bool(at.exception)})
    store = Store(db, read_only=True)
    for fmt in FORMATS:
        t = time.perf_counter()
        try:
            render(analyze(store, audit_id), fmt)
            err = False
        except AuditError:          # "withheld: …" (every call failed)
            err = False
        steps.append({"step": f"report {fmt}", "s": time.perf_counter() - t,
                      "peak_mb": _peak_mb(), "error": err})
    return {"base_mb": base, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "degenerate.md"))
    ap.add_argument("--one", nargs=2, metavar=("DB", "AUDIT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure_one(*a.one)))
        return
    from degenerate import build

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "deg.duckdb")
        ids = build(db)
        rows = []
        for name, audit_id in ids.items():
            r = subprocess.run([sys.executable, __file__, "--one", db, audit_id],
                               capture_output=True, text=True, cwd=str(ROOT), timeout=1800)
            if r.returncode != 0:
                raise SystemExit(r.stderr[-2000:])
            res = json.loads(r.stdout.strip().splitlines()[-1])
            worst = max(res["steps"], key=lambda s: s["s"])
            peak = max(s["peak_mb"] for s in res["steps"])
            rows.append((name, res["base_mb"], peak, peak - res["base_mb"], worst,
                         any(s["error"] for s in res["steps"])))
            print(name, f"base {res['base_mb']:.0f} MB, peak {peak:.0f} MB, slowest "
                        f"{worst['step']} {worst['s']:.2f} s", flush=True)
    lines = [
        "## Degenerate audits: time and memory (`benchmarks/bench_degenerate.py`)", "",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPU(s); measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        "Each audit in a fresh process: every page (AppTest) then every report format "
        "(text, md, json, html). Memory is the peak resident set size; the baseline is after "
        "the imports and a first app run. Target (SPEC §6, issue 8): no page or report grows "
        "with the score range — a few seconds and a few hundred MB at most.", "",
        "| audit | baseline RSS (MB) | peak RSS (MB) | growth (MB) | slowest step | its time (s) "
        "| any exception |",
        "|---|---:|---:|---:|---|---:|---|"]
    for name, base, peak, growth, worst, err in rows:
        lines.append(f"| {name} | {base:.0f} | {peak:.0f} | {growth:.0f} | {worst['step']} | "
                     f"{worst['s']:.2f} | {'yes' if err else 'no'} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
