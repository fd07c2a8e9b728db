"""The demo audit: every pathology in one seeded, offline audit.

A simulated screener scores a pool of 410 applicants once (their first-pass scores); a stratified
sample of 40 (24 band, 8 high, 8 low) around the effective cutoff (the recruiter works the top 40;
the config field reads 70) is re-run 15 times each. Four criteria: a working checklist criterion
(``technical_skills``), a dead one that gives full marks to nearly everyone (``experience``), a
noisy one (``projects``) and a second working one (``communication``); scores clump on rubric
integers. Seeded, so its numbers are the same on every machine.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from core.flip import effective_cutoff
from core.freeze import Criterion, FreezeSheet
from core.ingest import criteria_frame
from core.sample import DEFAULT_DESIGN, stratified_sample
from core.screeners.simulated import DEMO_CRITERIA, render_payload, simulate_scores, true_means_for
from core.store import Store

__all__ = ["DEMO_AUDIT_ID", "DEMO_SEED", "demo_freeze_sheet", "build_demo", "ensure_demo"]

DEMO_AUDIT_ID = "demo-ENG-2291"
DEMO_SEED = 20261130
DEMO_MODEL = "sim-screener-2026-11-01"
_POOL_SIZE = 410
_QUALITY_SD = 1.45
_SPREAD = 4.0
_TOP_K = 40
_CONFIG_CUTOFF = 70.0


def demo_freeze_sheet() -> FreezeSheet:
    return FreezeSheet(
        req_id="ENG-2291", req_title="Senior Backend Engineer", gates="sorted-list",
        screener="acme-screener", screener_version="v4.2", model=DEMO_MODEL,
        prompt_version="p12", rubric_version="r7", parser_version="1.3", sampling="settable",
        temperature=0.1, endpoint="simulated (offline demo)", side_effect_free=True,
        result_cache_off=True, distinct_request_ids=True, prefix_caching=True,
        criteria=tuple(Criterion(c.name, c.max_points, 1.0) for c in DEMO_CRITERIA))


def _rid(rng: np.random.Generator) -> str:
    return str(uuid.UUID(bytes=rng.bytes(16), version=4))


def build_demo(seed: int = DEMO_SEED) -> dict[str, pd.DataFrame | float | FreezeSheet]:
    """Generate the demo's frames: pool, candidates, calls, draws (no database involved)."""
    rng = np.random.default_rng(seed)
    quality = rng.normal(0.0, _QUALITY_SD, _POOL_SIZE)
    profiles = [true_means_for(float(q), DEMO_CRITERIA, rng) for q in quality]
    first_pass = [simulate_scores(p, DEMO_CRITERIA, rng)["total"] for p in profiles]
    ids = [f"c-{i:04d}" for i in rng.permutation(np.arange(1000, 1000 + _POOL_SIZE))]
    pool = pd.DataFrame({"candidate_id": ids, "first_pass_score": first_pass})
    cutoff = effective_cutoff(pool["first_pass_score"].to_numpy(), _TOP_K, _POOL_SIZE)
    frame = stratified_sample(pool, cutoff, _SPREAD, DEFAULT_DESIGN, seed=seed)
    by_id = dict(zip(ids, profiles))
    sample = frame.sample.copy()
    sample["application"] = [json.dumps({"true_means": by_id[c], "note": "synthetic demo "
                                         "applicant"}) for c in sample["candidate_id"]]
    # interleaved, seeded order of calls across candidates
    pairs = [(c, r) for c in sample["candidate_id"] for r in range(1, DEFAULT_DESIGN.runs + 1)]
    order = rng.permutation(len(pairs))
    start = datetime(2026, 11, 2, 9, 0, 0)
    calls, draws = [], []
    clock = start
    for idx in order:
        cid, run = pairs[idx]
        scores = simulate_scores(by_id[cid], DEMO_CRITERIA, rng)
        payload = render_payload(scores, DEMO_MODEL, rng)
        latency = float(rng.gamma(4.0, 350.0))
        rid = _rid(rng)
        calls.append({"request_id": rid, "candidate_id": cid, "run": run, "attempts": 1,
                      "started_at": clock, "finished_at": clock + timedelta(milliseconds=latency),
                      "latency_ms": latency, "http_status": 200, "status": "ok", "error": None,
                      "raw_payload": payload,
                      "payload_sha256": hashlib.sha256(payload.encode()).hexdigest(),
                      "model": DEMO_MODEL, "input_tokens": int(1400 + rng.integers(0, 300)),
                      "output_tokens": int(180 + rng.integers(0, 90)),
                      "cached_input_tokens": 1100, "cost": None, "seed": None,
                      "source": "demo"})
        for name, value in scores.items():
            draws.append({"candidate_id": cid, "run": run, "criterion": name, "score": value,
                          "request_id": rid, "model": DEMO_MODEL, "clipped": False})
        clock += timedelta(milliseconds=latency / 8)
    calls_df = pd.DataFrame(calls)
    calls_df["cost"] = (calls_df["input_tokens"] - calls_df["cached_input_tokens"]) * 1e-6 + \
        calls_df["cached_input_tokens"] * 0.1e-6 + calls_df["output_tokens"] * 5e-6
    return {"pool": pool, "candidates": sample, "calls": calls_df,
            "draws": pd.DataFrame(draws), "cutoff": cutoff, "freeze": demo_freeze_sheet()}


def ensure_demo(store: Store, *, rebuild: bool = False) -> str:
    """Create the demo audit in ``store`` unless it is already there; returns its id."""
    if store.audit_exists(DEMO_AUDIT_ID) and store.n_draws(DEMO_AUDIT_ID) and not rebuild:
        return DEMO_AUDIT_ID
    if store.audit_exists(DEMO_AUDIT_ID):
        store.delete_audit(DEMO_AUDIT_ID)
    demo = build_demo()
    sheet: FreezeSheet = demo["freeze"]  # type: ignore[assignment]
    settings = {"cutoff": _CONFIG_CUTOFF, "top_k": _TOP_K, "of_n": _POOL_SIZE, "k": 2.0,
                "applications_per_req": float(_POOL_SIZE), "comparison": ">=",
                "runs": DEFAULT_DESIGN.runs, "spread": _SPREAD, "seed": DEMO_SEED,
                "capacity": 40.0, "screener": {"kind": "simulated", "model": DEMO_MODEL},
                "prices": {DEMO_MODEL: {"input": 1.0, "output": 5.0, "cached_input": 0.1}}}
    store.save_audit(DEMO_AUDIT_ID, sheet.to_dict(), sheet.hash, settings)
    with store.transaction() as cur:
        store.set_criteria(DEMO_AUDIT_ID, criteria_frame(list(sheet.criteria)), cur=cur)
        store.upsert_candidates(DEMO_AUDIT_ID, demo["candidates"], cur=cur)  # type: ignore[arg-type]
        store.set_pool(DEMO_AUDIT_ID, demo["pool"], cur=cur)  # type: ignore[arg-type]
        store.write_results(DEMO_AUDIT_ID, demo["calls"], demo["draws"], cur=cur)  # type: ignore[arg-type]
    return DEMO_AUDIT_ID
