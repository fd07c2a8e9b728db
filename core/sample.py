"""Step 2 — frame a stratified sample from the req's pool.

Band candidates (those whose outcome can flip) plus high and low anchors (without which the
reliability ratio collapses by construction). Seeded and reproducible; shortfalls are named.
What the sample's run will cost is :func:`core.estimate.audit_estimate` (the one estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.criteria import sd_interval
from core.errors import InputError

__all__ = [
    "SampleDesign",
    "DEFAULT_DESIGN",
    "REDUCED_DESIGN",
    "SampleFrame",
    "stratified_sample",
]


@dataclass(frozen=True)
class SampleDesign:
    """How many candidates per stratum, how many runs each, and the zone widths (in σ_e)."""

    band: int = 24
    high: int = 8
    low: int = 8
    runs: int = 15
    band_sigma: float = 1.5
    anchor_sigma: float = 3.0
    name: str = "standard"

    @property
    def candidates(self) -> int:
        return self.band + self.high + self.low

    @property
    def calls(self) -> int:
        return self.candidates * self.runs

    def sd_interval_factors(self) -> tuple[float, float]:
        """The 95% interval of a per-candidate SD from ``runs`` draws, as factors of ``s``."""
        return sd_interval(1.0, self.runs - 1)


DEFAULT_DESIGN = SampleDesign()
#: The reduced variant: 24 band, 6 anchors a side, 6 runs = 216 calls (wider intervals).
REDUCED_DESIGN = SampleDesign(band=24, high=6, low=6, runs=6, name="reduced")


@dataclass(frozen=True)
class SampleFrame:
    """The drawn sample and what fell short."""

    sample: pd.DataFrame  # candidate_id, stratum, first_pass_score
    design: SampleDesign
    cutoff: float
    spread: float
    available: dict[str, int]
    shortfalls: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        vc = self.sample["stratum"].value_counts()
        return {s: int(vc.get(s, 0)) for s in ("band", "high", "low")}

    @property
    def reliability_possible(self) -> bool:
        c = self.counts
        return c["high"] >= 6 and c["low"] >= 6


def _spread_pick(frame: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Pick ``n`` rows spread across the score range: one at random from each of ``n`` bins."""
    if len(frame) <= n:
        return frame
    ordered = frame.sort_values(["first_pass_score", "candidate_id"], kind="stable")
    edges = np.linspace(0, len(ordered), n + 1).round().astype(int)
    picks = [int(rng.integers(edges[i], edges[i + 1])) for i in range(n)]
    return ordered.iloc[picks]


def stratified_sample(pool: pd.DataFrame, cutoff: float, spread: float,
                      design: SampleDesign = DEFAULT_DESIGN, seed: int = 0) -> SampleFrame:
    """Draw the stratified sample (SPEC §3.2).

    Parameters
    ----------
    pool : DataFrame ``candidate_id, first_pass_score``
    cutoff : float — the cutoff audited (effective cutoff when the recruiter works a top-k)
    spread : float — expected within-candidate SD ``σ_e`` (estimate or a pilot's pooled SD)
    design : SampleDesign
    seed : int

    Notes
    -----
    Band: first-pass within ``t ± band_sigma·σ_e``, drawn at random. Anchors: at least
    ``anchor_sigma·σ_e`` from ``t`` on their side, spread across that side's range (one per
    equal-count bin). Shortfalls are named, e.g. "only 5 high anchors available".
    """
    if not spread > 0:
        raise InputError(f"the expected spread must be a positive number of points; got {spread}")
    if pool is None or len(pool) == 0:
        raise InputError("the pool is empty: upload candidate_id, first_pass_score")
    rng = np.random.default_rng(seed)
    s = pool["first_pass_score"].astype(float)
    band_mask = (s - cutoff).abs() <= design.band_sigma * spread
    high_mask = s >= cutoff + design.anchor_sigma * spread
    low_mask = s <= cutoff - design.anchor_sigma * spread
    band = pool[band_mask]
    high, low = pool[high_mask], pool[low_mask]
    shortfalls = []
    if len(band) > design.band:
        band = band.iloc[np.sort(rng.choice(len(band), size=design.band, replace=False))]
    elif len(band) < design.band:
        shortfalls.append(f"only {len(band)} band candidates available (wanted {design.band}) "
                          f"within {cutoff:g} ± {design.band_sigma * spread:g}")
    picked = {"high": _spread_pick(high, design.high, rng),
              "low": _spread_pick(low, design.low, rng)}
    for side, want in (("high", design.high), ("low", design.low)):
        if len(picked[side]) < want:
            shortfalls.append(f"only {len(picked[side])} {side} anchors available (wanted "
                              f"{want}) at least {design.anchor_sigma * spread:g} points "
                              f"{'above' if side == 'high' else 'below'} the cutoff")
    parts = [band.assign(stratum="band"), picked["high"].assign(stratum="high"),
             picked["low"].assign(stratum="low")]
    sample = (pd.concat(parts, ignore_index=True)[["candidate_id", "stratum", "first_pass_score"]]
              .sort_values(["stratum", "first_pass_score", "candidate_id"],
                           ascending=[True, False, True], kind="stable")
              .reset_index(drop=True))
    frame = SampleFrame(sample, design, float(cutoff), float(spread),
                        {"band": int(band_mask.sum()), "high": int(high_mask.sum()),
                         "low": int(low_mask.sum())}, shortfalls)
    if not frame.reliability_possible:
        frame.shortfalls.append("fewer than 6 anchors on a side: the reliability ratio will be "
                                "withheld (flip rates are still computed)")
    return frame
