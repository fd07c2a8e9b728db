"""Degenerate audits written straight into a store (as a run or an old import could leave them),
shared by tests/test_degenerate.py and benchmarks/bench_degenerate.py.

* ``huge``     — criterion scores up to 1e9 (a real model's raw output), no maxima, a pool of
                 the same scale;
* ``single``   — one candidate with one draw (a pre-flight cut short);
* ``equal``    — every score equal (a deterministic or cached screener);
* ``failed``   — every call failed: calls stored, not one draw;
* ``ragged``   — one candidate with 2 runs, the rest with 30.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from core.freeze import Criterion, FreezeSheet
from core.store import Store

AUDITS = ("huge", "single", "equal", "failed", "ragged")


def _sheet(name: str, criteria: tuple[Criterion, ...] = ()) -> FreezeSheet:
    return FreezeSheet(req_id=f"DEG-{name}", model="deg-model-2025-01-01",
                       side_effect_free=True, result_cache_off=True, criteria=criteria)


def _long(scores: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    rows = []
    for cid, crit in scores.items():
        for name, values in crit.items():
            for j, v in enumerate(values, start=1):
                rows.append((cid, j, name, float(v), f"{cid}-{j}", "deg-model-2025-01-01",
                             False))
    return pd.DataFrame(rows, columns=["candidate_id", "run", "criterion", "score",
                                       "request_id", "model", "clipped"])


def _calls(draws: pd.DataFrame, status: str = "ok") -> pd.DataFrame:
    pairs = draws[["candidate_id", "run", "request_id"]].drop_duplicates()
    return pairs.assign(status=status, raw_payload=[f'{{"n": {i}}}' for i in range(len(pairs))],
                        payload_sha256=[f"sha-{i}" for i in range(len(pairs))],
                        model="deg-model-2025-01-01", attempts=1)


def _write(store: Store, audit_id: str, sheet: FreezeSheet, draws: pd.DataFrame | None,
           calls: pd.DataFrame | None, pool: pd.DataFrame | None, cutoff: float) -> None:
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash,
                     {"cutoff": cutoff, "runs": 30, "screener": {"kind": "simulated"}})
    if sheet.criteria:
        store.set_criteria(audit_id, pd.DataFrame({
            "criterion": [c.name for c in sheet.criteria], "position": range(len(sheet.criteria)),
            "max_points": [c.max_points for c in sheet.criteria],
            "weight": [c.weight for c in sheet.criteria]}))
    ids = sorted(set((draws if draws is not None else calls)["candidate_id"]))
    store.upsert_candidates(audit_id, pd.DataFrame({"candidate_id": ids}))
    if pool is not None:
        store.set_pool(audit_id, pool)
    store.write_results(audit_id, calls, draws)


def build(db: Path | str, which: tuple[str, ...] = AUDITS) -> dict[str, str]:
    """Write the degenerate audits into ``db``; returns name → audit id."""
    rng = np.random.default_rng(8)
    store = Store(db)
    ids: dict[str, str] = {}
    if "huge" in which:
        crit = (Criterion("raw_a"), Criterion("raw_b"))
        scores = {f"h{i:03d}": {"raw_a": list(rng.uniform(0, 1e9, 15)),
                                "raw_b": list(rng.integers(0, 562_074_743, 15))}
                  for i in range(40)}
        d = _long(scores)
        pool = pd.DataFrame({"candidate_id": [f"p{i}" for i in range(400)],
                             "first_pass_score": rng.uniform(0, 1.5e9, 400)})
        _write(store, "deg-huge", _sheet("huge", crit), d, _calls(d), pool, 8e8)
        ids["huge"] = "deg-huge"
    if "single" in which:
        d = _long({"solo": {"total": [61.0]}})
        _write(store, "deg-single", _sheet("single"), d, _calls(d), None, 60.0)
        ids["single"] = "deg-single"
    if "equal" in which:
        crit = (Criterion("a", 10.0), Criterion("b", 10.0))
        d = _long({f"e{i}": {"a": [5.0] * 5, "b": [5.0] * 5} for i in range(12)})
        calls = _calls(d).assign(raw_payload='{"a": 5, "b": 5}', payload_sha256="same")
        pool = pd.DataFrame({"candidate_id": [f"p{i}" for i in range(50)],
                             "first_pass_score": 10.0})
        _write(store, "deg-equal", _sheet("equal", crit), d, calls, pool, 10.0)
        ids["equal"] = "deg-equal"
    if "failed" in which:
        calls = pd.DataFrame({"candidate_id": [f"f{i}" for i in range(8) for _ in range(3)],
                              "run": [j for _ in range(8) for j in (1, 2, 3)]})
        calls = calls.assign(request_id=[f"fail-{i}" for i in range(len(calls))],
                             status="parse_error", error="no JSON object in the answer",
                             raw_payload="I think this candidate is great!", attempts=1)
        _write(store, "deg-failed", _sheet("failed"), None, calls, None, 60.0)
        ids["failed"] = "deg-failed"
    if "ragged" in which:
        crit = (Criterion("skill", 50.0), Criterion("fit", 50.0))
        scores = {f"r{i:02d}": {"skill": list(np.clip(np.round(rng.normal(20 + i, 3, 30)), 0,
                                                            50)),
                                "fit": list(np.clip(np.round(rng.normal(30, 4, 30)), 0, 50))}
                  for i in range(20)}
        scores["short"] = {"skill": [30.0, 34.0], "fit": [28.0, 31.0]}
        d = _long(scores)
        pool = pd.DataFrame({"candidate_id": [f"p{i}" for i in range(300)],
                             "first_pass_score": np.round(rng.normal(55, 10, 300))})
        _write(store, "deg-ragged", _sheet("ragged", crit), d, _calls(d), pool, 58.0)
        ids["ragged"] = "deg-ragged"
    store.close()
    return ids
