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
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from core.flip import effective_cutoff
from core.freeze import Criterion, FreezeSheet
from core.ingest import criteria_frame
from core.sample import DEFAULT_DESIGN, stratified_sample
from core.screeners.simulation import (
    DEMO_CRITERIA,
    CriterionModel,
    render_payload,
    simulate_scores,
    true_means_for,
)
from core.store import Store

__all__ = ["DEMO_AUDIT_ID", "DEMO_V2_AUDIT_ID", "DEMO_SEED", "V2_CRITERIA", "demo_freeze_sheet",
           "demo_v2_freeze_sheet", "build_demo", "build_demo_v2", "ensure_demo"]

DEMO_AUDIT_ID = "demo-ENG-2291"
DEMO_V2_AUDIT_ID = "demo-ENG-2291-v2"
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


#: The v2 rubric (the fix the first audit's report asks for): the NOISY ``projects`` criterion
#: (25 points, within-SD ≈ 3.8) is split into two checkable sub-questions of 13 and 12 points
#: with far less draw-to-draw noise; everything else is unchanged, so the total's maximum stays
#: 100.
_PROJECTS = next(c for c in DEMO_CRITERIA if c.name == "projects")
_SPLIT = (("projects_scope", 13.0), ("projects_evidence", 12.0))
V2_CRITERIA: tuple[CriterionModel, ...] = tuple(
    part for c in DEMO_CRITERIA for part in (
        [CriterionModel(name, mx, "working", base=_PROJECTS.base * mx / _PROJECTS.max_points,
                        slope=_PROJECTS.slope * mx / _PROJECTS.max_points, noise_sd=1.0)
         for name, mx in _SPLIT] if c.name == "projects" else [c]))


def demo_v2_freeze_sheet() -> FreezeSheet:
    """The demo's second harness: rubric r8 (``projects`` split) and the prompt that asks it."""
    return replace(demo_freeze_sheet(), prompt_version="p13", rubric_version="r8",
                   criteria=tuple(Criterion(c.name, c.max_points, 1.0) for c in V2_CRITERIA))


def _v2_profile(profile: dict[str, float]) -> dict[str, float]:
    """A candidate's expected scores under the v2 rubric: ``projects`` shared pro rata."""
    out = {k: v for k, v in profile.items() if k != "projects"}
    for name, mx in _SPLIT:
        out[name] = profile["projects"] * mx / _PROJECTS.max_points
    return out


def _rid(rng: np.random.Generator) -> str:
    return str(uuid.UUID(bytes=rng.bytes(16), version=4))


def _simulate_calls(candidate_ids: list[str], profiles: dict[str, dict[str, float]],
                    criteria: tuple[CriterionModel, ...], model: str, rng: np.random.Generator,
                    start: datetime) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every (candidate, run) call of a demo audit, interleaved in a seeded order."""
    pairs = [(c, r) for c in candidate_ids for r in range(1, DEFAULT_DESIGN.runs + 1)]
    order = rng.permutation(len(pairs))
    calls, draws = [], []
    clock = start
    for idx in order:
        cid, run = pairs[idx]
        scores = simulate_scores(profiles[cid], criteria, rng)
        payload = render_payload(scores, model, rng)
        latency = float(rng.gamma(4.0, 350.0))
        rid = _rid(rng)
        calls.append({"request_id": rid, "candidate_id": cid, "run": run, "attempts": 1,
                      "started_at": clock, "finished_at": clock + timedelta(milliseconds=latency),
                      "latency_ms": latency, "http_status": 200, "status": "ok", "error": None,
                      "raw_payload": payload,
                      "payload_sha256": hashlib.sha256(payload.encode()).hexdigest(),
                      "model": model, "input_tokens": int(1400 + rng.integers(0, 300)),
                      "output_tokens": int(180 + rng.integers(0, 90)),
                      "cached_input_tokens": 1100, "cost": None, "seed": None,
                      "source": "demo"})
        for name, value in scores.items():
            draws.append({"candidate_id": cid, "run": run, "criterion": name, "score": value,
                          "request_id": rid, "model": model, "clipped": False})
        clock += timedelta(milliseconds=latency / 8)
    calls_df = pd.DataFrame(calls)
    calls_df["cost"] = (calls_df["input_tokens"] - calls_df["cached_input_tokens"]) * 1e-6 + \
        calls_df["cached_input_tokens"] * 0.1e-6 + calls_df["output_tokens"] * 5e-6
    return calls_df, pd.DataFrame(draws)


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
    calls_df, draws_df = _simulate_calls(list(sample["candidate_id"]), by_id, DEMO_CRITERIA,
                                         DEMO_MODEL, rng, datetime(2026, 11, 2, 9, 0, 0))
    return {"pool": pool, "candidates": sample, "calls": calls_df,
            "draws": draws_df, "cutoff": cutoff, "freeze": demo_freeze_sheet()}


def build_demo_v2(seed: int = DEMO_SEED) -> dict[str, pd.DataFrame | float | FreezeSheet]:
    """The demo's second audit: the same 40 candidates and pool, scored under the v2 rubric.

    Its own random stream (``seed + 1``), so the first audit's numbers are untouched; the calls
    run the same afternoon as the first audit's.
    """
    first = build_demo(seed)
    sample: pd.DataFrame = first["candidates"]  # type: ignore[assignment]
    profiles = {cid: _v2_profile(json.loads(app)["true_means"])
                for cid, app in zip(sample["candidate_id"], sample["application"])}
    sample = sample.assign(application=[
        json.dumps({"true_means": profiles[c], "note": "synthetic demo applicant"})
        for c in sample["candidate_id"]])
    rng = np.random.default_rng(seed + 1)
    calls, draws = _simulate_calls(list(sample["candidate_id"]), profiles, V2_CRITERIA,
                                   DEMO_MODEL, rng, datetime(2026, 11, 2, 15, 0, 0))
    return {"pool": first["pool"], "candidates": sample, "calls": calls, "draws": draws,
            "cutoff": first["cutoff"], "freeze": demo_v2_freeze_sheet()}


def _store_demo(store: Store, audit_id: str, demo: dict[str, Any]) -> None:
    sheet: FreezeSheet = demo["freeze"]
    settings = {"cutoff": _CONFIG_CUTOFF, "top_k": _TOP_K, "of_n": _POOL_SIZE, "k": 2.0,
                "applications_per_req": float(_POOL_SIZE), "comparison": ">=",
                "runs": DEFAULT_DESIGN.runs, "spread": _SPREAD, "seed": DEMO_SEED,
                "capacity": 40.0, "screener": {"kind": "simulated", "model": DEMO_MODEL},
                "prices": {DEMO_MODEL: {"input": 1.0, "output": 5.0, "cached_input": 0.1}}}
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, settings)
    with store.transaction() as cur:
        store.set_criteria(audit_id, criteria_frame(list(sheet.criteria)), cur=cur)
        store.upsert_candidates(audit_id, demo["candidates"], cur=cur)
        store.set_pool(audit_id, demo["pool"], cur=cur)
        store.write_results(audit_id, demo["calls"], demo["draws"], cur=cur)


def ensure_demo(store: Store, *, rebuild: bool = False) -> str:
    """Create the demo audits in ``store`` unless they are already there; returns the first's id.

    Two audits of the same req and candidates: ``demo-ENG-2291`` (rubric r7, every pathology)
    and ``demo-ENG-2291-v2`` (rubric r8, the NOISY criterion split), so the Compare page has a
    before and an after offline.
    """
    for audit_id, build in ((DEMO_AUDIT_ID, build_demo), (DEMO_V2_AUDIT_ID, build_demo_v2)):
        if store.audit_exists(audit_id) and store.n_draws(audit_id) and not rebuild:
            continue
        if store.audit_exists(audit_id):
            store.delete_audit(audit_id)
        _store_demo(store, audit_id, build())
    return DEMO_AUDIT_ID
