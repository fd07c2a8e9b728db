"""The simulated screener's world: seeded, per-criterion noise, integer clumping.

The demo's data and the ``simulated`` adapter (:mod:`core.screeners.simulated`) draw from it.
Each criterion has a behaviour:

* ``working`` — meaningful between-candidate spread, little within (a checklist criterion);
* ``dead`` — the same value for (nearly) everyone on every run (full marks, position-agnostic);
* ``noisy`` — within-candidate spread at least as large as the between-candidate spread.

Scores are rounded to rubric integers (clumping) and clipped to ``0..max``, as real screeners do.
A candidate's expected per-criterion scores come from its application text when it is JSON with
``"true_means"`` (the demo writes them), otherwise from a hash of the candidate id, so the same
candidate always has the same profile.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

import numpy as np

from core.freeze import Criterion

__all__ = [
    "DEMO_CRITERIA",
    "CriterionModel",
    "criterion_models_for",
    "profile_from_application",
    "render_payload",
    "simulate_scores",
    "true_means_for",
]


@dataclass(frozen=True)
class CriterionModel:
    """How one simulated criterion behaves.

    Expected score for a candidate of latent quality ``q`` is
    ``base + slope*q + person_sd*z`` (``z`` a per-candidate normal); each draw adds
    ``N(0, noise_sd)``, then rounds (``integer``) and clips to ``0..max_points``. A ``dead``
    criterion returns ``max_points`` except for a share ``dead_miss`` of candidates who get
    ``dead_low``.
    """

    name: str
    max_points: float
    kind: str = "working"
    base: float = 0.0
    slope: float = 0.0
    person_sd: float = 0.0
    noise_sd: float = 0.0
    integer: bool = True
    dead_miss: float = 0.025
    dead_low: float = 20.0


#: The demo rubric: a working checklist criterion, a dead one, a noisy one, a second working one.
DEMO_CRITERIA: tuple[CriterionModel, ...] = (
    CriterionModel("technical_skills", 35, "working", base=18.0, slope=6.0, person_sd=1.2,
                   noise_sd=0.45),
    CriterionModel("experience", 20, "dead", base=20.0, dead_low=19.0),
    CriterionModel("projects", 25, "noisy", base=11.5, slope=1.4, person_sd=0.8, noise_sd=3.8),
    CriterionModel("communication", 20, "working", base=8.0, slope=3.5, person_sd=0.9,
                   noise_sd=1.1),
)


def true_means_for(quality: float, criteria: tuple[CriterionModel, ...],
                   rng: np.random.Generator) -> dict[str, float]:
    """Expected per-criterion scores for a candidate of latent ``quality``."""
    out: dict[str, float] = {}
    for c in criteria:
        if c.kind == "dead":
            out[c.name] = float(c.dead_low if rng.random() < c.dead_miss else c.max_points)
        else:
            z = rng.standard_normal()
            out[c.name] = float(c.base + c.slope * quality + c.person_sd * z)
    return out


def simulate_scores(true_means: dict[str, float], criteria: tuple[CriterionModel, ...],
                    rng: np.random.Generator) -> dict[str, float]:
    """One draw: per-criterion scores (noisy, clumped, clipped) and their ``total``."""
    scores: dict[str, float] = {}
    for c in criteria:
        mu = true_means[c.name]
        x = mu if c.kind == "dead" else mu + c.noise_sd * rng.standard_normal()
        if c.integer:
            x = float(np.round(x))
        scores[c.name] = float(min(max(x, 0.0), c.max_points))
    scores["total"] = float(sum(scores[c.name] for c in criteria))
    return scores


def render_payload(scores: dict[str, float], model: str, rng: np.random.Generator) -> str:
    """The raw JSON a screener would return (flat preset), with a varying rationale."""
    phrases = ["strong match on the core stack", "projects described briefly",
               "clear written communication", "limited leadership evidence",
               "relevant domain experience", "portfolio links not verifiable"]
    picks = rng.choice(len(phrases), size=2, replace=False)
    body = {k: (int(v) if float(v).is_integer() else v) for k, v in scores.items()}
    body["rationale"] = "; ".join(phrases[i] for i in sorted(picks))
    body["model"] = model
    return json.dumps(body, sort_keys=False)


def profile_from_application(application: str | None, candidate_id: str,
                             criteria: tuple[CriterionModel, ...]) -> dict[str, float]:
    """The candidate's expected scores: from ``{"true_means": …}`` JSON, else from its id."""
    if application:
        try:
            data = json.loads(application)
            if isinstance(data, dict) and isinstance(data.get("true_means"), dict):
                tm = data["true_means"]
                if all(c.name in tm for c in criteria):
                    return {c.name: float(tm[c.name]) for c in criteria}
        except (json.JSONDecodeError, TypeError, ValueError):
            pass
    digest = hashlib.sha256(str(candidate_id).encode("utf-8")).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return true_means_for(float(rng.standard_normal()), criteria, rng)


def criterion_models_for(criteria: tuple[Criterion, ...]) -> tuple[CriterionModel, ...]:
    """Simulation models for a rubric: the demo's where names match, else a working one.

    A demo criterion with other max points keeps its behaviour, scaled to them; a criterion
    the demo does not know gets ``working`` behaviour scaled to its max points.
    """
    demo = {c.name: c for c in DEMO_CRITERIA}
    out = []
    for c in criteria:
        if c.name in demo:
            d = demo[c.name]
            f = 1.0 if c.max_points is None else float(c.max_points) / float(d.max_points)
            out.append(d if f == 1.0 else replace(
                d, max_points=float(c.max_points), base=d.base * f, slope=d.slope * f,
                person_sd=d.person_sd * f, noise_sd=d.noise_sd * f, dead_low=d.dead_low * f))
            continue
        mx = float(c.max_points if c.max_points is not None else 10.0)
        out.append(CriterionModel(c.name, mx, "working", base=0.6 * mx, slope=0.12 * mx,
                                  person_sd=0.05 * mx, noise_sd=0.04 * mx))
    return tuple(out)
