"""Step 2 — stratified sample from the pool: seeded, counts, shortfalls, presets, estimates."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from core.errors import InputError
from core.estimate import DEFAULT_LATENCY_S, audit_estimate
from core.freeze import Criterion
from core.sample import (
    DEFAULT_DESIGN,
    REDUCED_DESIGN,
    SampleDesign,
    stratified_sample,
)


def _pool(scores) -> pd.DataFrame:
    return pd.DataFrame({"candidate_id": [f"p{i:04d}" for i in range(len(scores))],
                         "first_pass_score": np.asarray(scores, dtype=float)})


@pytest.fixture(scope="module")
def big_pool() -> pd.DataFrame:
    return _pool(np.round(np.random.default_rng(1).normal(70, 12, 600), 1))


def test_default_counts_and_zones(big_pool):
    # t = 70, σ_e = 4: band 64..76, high ≥ 82, low ≤ 58
    f = stratified_sample(big_pool, 70, 4, seed=3)
    assert f.counts == {"band": 24, "high": 8, "low": 8}
    s = f.sample
    assert len(s) == 40 and s["candidate_id"].is_unique
    band = s[s.stratum == "band"]["first_pass_score"]
    assert ((band - 70).abs() <= 6).all()
    assert (s[s.stratum == "high"]["first_pass_score"] >= 82).all()
    assert (s[s.stratum == "low"]["first_pass_score"] <= 58).all()
    assert f.shortfalls == [] and f.reliability_possible
    # every sampled score is the pool's own score
    merged = s.merge(big_pool, on="candidate_id", suffixes=("", "_pool"))
    assert (merged["first_pass_score"] == merged["first_pass_score_pool"]).all()


def test_seeded_and_reproducible(big_pool):
    a = stratified_sample(big_pool, 70, 4, seed=42).sample
    b = stratified_sample(big_pool, 70, 4, seed=42).sample
    c = stratified_sample(big_pool, 70, 4, seed=43).sample
    pd.testing.assert_frame_equal(a, b)
    assert set(a["candidate_id"]) != set(c["candidate_id"])


def test_anchors_spread_across_their_side(big_pool):
    f = stratified_sample(big_pool, 70, 4, seed=5)
    high_pool = np.sort(big_pool[big_pool.first_pass_score >= 82]["first_pass_score"].to_numpy())
    picked = np.sort(f.sample[f.sample.stratum == "high"]["first_pass_score"].to_numpy())
    # one pick per equal-count bin of the side's range: picks sit in distinct eighths
    edges = np.linspace(0, len(high_pool), 9).round().astype(int)
    for i, v in enumerate(picked):
        lo, hi = high_pool[edges[i]], high_pool[edges[i + 1] - 1]
        assert lo <= v <= hi
    assert picked[0] <= np.quantile(high_pool, 0.125 + 1e-9)
    assert picked[-1] >= np.quantile(high_pool, 0.875 - 1e-9)


def test_named_shortfall_only_five_high_anchors():
    # 30 near the cutoff, 5 high (≥ 82), 10 low (≤ 58)
    scores = list(np.linspace(66, 74, 30)) + [85, 88, 90, 95, 99] + list(np.linspace(30, 55, 10))
    f = stratified_sample(_pool(scores), 70, 4, seed=0)
    assert f.counts == {"band": 24, "high": 5, "low": 8}
    assert any("only 5 high anchors available" in s for s in f.shortfalls)
    assert not f.reliability_possible
    assert any("reliability ratio will be withheld" in s for s in f.shortfalls)


def test_named_shortfall_band():
    scores = [69, 70, 71] + list(np.linspace(85, 99, 10)) + list(np.linspace(30, 55, 10))
    f = stratified_sample(_pool(scores), 70, 4, seed=0)
    assert f.counts["band"] == 3
    assert any("only 3 band candidates available" in s for s in f.shortfalls)


def test_reduced_preset_is_216_calls():
    assert (REDUCED_DESIGN.band, REDUCED_DESIGN.high, REDUCED_DESIGN.low,
            REDUCED_DESIGN.runs) == (24, 6, 6, 6)
    assert REDUCED_DESIGN.calls == 216
    assert DEFAULT_DESIGN.calls == 600 and DEFAULT_DESIGN.candidates == 40
    lo, hi = REDUCED_DESIGN.sd_interval_factors()
    dlo, dhi = DEFAULT_DESIGN.sd_interval_factors()
    assert lo < dlo and hi > dhi  # the reduced variant's interval is wider


def test_reduced_sample_counts(big_pool):
    f = stratified_sample(big_pool, 70, 4, REDUCED_DESIGN, seed=1)
    assert f.counts == {"band": 24, "high": 6, "low": 6} and f.reliability_possible


def test_custom_zone_widths():
    d = SampleDesign(band=2, high=1, low=1, band_sigma=1.0, anchor_sigma=2.0)
    f = stratified_sample(_pool([60, 69, 70, 71, 75, 79, 90]), 70, 5, d, seed=0)
    # band within 70 ± 5 → 69 70 71 75 (four available, two picked); high ≥ 80 → 90; low ≤ 60 → 60
    assert f.available == {"band": 4, "high": 1, "low": 1}
    assert f.counts == {"band": 2, "high": 1, "low": 1}


def test_bad_inputs():
    with pytest.raises(InputError, match="spread"):
        stratified_sample(_pool([1, 2]), 1, 0)
    with pytest.raises(InputError, match="pool is empty"):
        stratified_sample(_pool([]), 1, 1)


RUBRIC = (Criterion("a", 30.0), Criterion("b", 25.0), Criterion("c", 25.0), Criterion("d", 20.0))


def test_estimate_arithmetic():
    # the one estimate (core.estimate.audit_estimate), as the pages and the CLI call it:
    # 40 candidates × 15 runs = 600 calls (the pre-flight's calls are runs 1-3 of one
    # candidate, not extra calls); no application text → 1,500 input tokens a call assumed;
    # 4 criteria → 30 + 12·4 = 78 output tokens a call; tokens 600·1500 and 600·78;
    # cost = (900,000·$1 + 46,800·$5)/1e6 = $1.134; wall = ceil(600/8)·2 s = 75·2 = 150 s
    settings = {"screener": {"kind": "openai-chat", "model": "m"}, "latency_s": 2.0,
                "prices": {"m": {"input": 1.0, "output": 5.0}}}
    e = audit_estimate(settings, frozen_model="m", criteria=RUBRIC, candidates=40, runs=15)
    assert e.calls == 600
    assert (e.input_tokens, e.output_tokens) == (900_000, 46_800)
    assert e.cost == pytest.approx((900_000 * 1.0 + 46_800 * 5.0) / 1e6)
    assert e.wall_time_s == math.ceil(600 / 8) * 2.0 == 150.0
    text = "\n".join(e.lines())
    assert text.startswith("estimate: 600 calls, ~900,000 input and ~46,800 output tokens, "
                           "cost $1.13, wall time 2 min at concurrency 8")   # 150 s
    assert "  latency: 2.00 s a call, typed on the Sample page" in text
    r = audit_estimate({"screener": {"kind": "openai-chat", "model": "m"}}, frozen_model="m",
                       criteria=RUBRIC, candidates=36, runs=6)
    assert r.calls == 216 and r.cost is None
    assert "cost unknown" in r.lines()[0]
    assert "  cost: unknown: no price for 'm' in the price table" in r.lines()
    # no latency typed or measured: the wall time uses the default and says so
    assert r.wall_time_s == math.ceil(216 / 8) * DEFAULT_LATENCY_S
    assert "a default until the pre-flight measures it" in r.sources["latency"]

