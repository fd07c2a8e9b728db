"""The ``simulated`` adapter: in-process, seeded, the demo's screener and the tests' workhorse.

Its answers come from :mod:`core.screeners.simulation` (per-criterion behaviours, noise,
integer clumping); nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Literal

import numpy as np
from pydantic import Field

from core.freeze import Criterion
from core.screeners.base import BuildContext, RawResult, Screener, ScreenRequest
from core.screeners.options import ScreenerOptions, config_only
from core.screeners.parsing import ParseSpec
from core.screeners.simulation import (
    DEMO_CRITERIA,
    criterion_models_for,
    profile_from_application,
    render_payload,
    simulate_scores,
)

__all__ = ["SimulatedOptions", "SimulatedScreener"]


class SimulatedOptions(ScreenerOptions):
    """``[screener]`` with ``kind = "simulated"``."""

    kind: Literal["simulated"] = "simulated"
    latency_ms: int = Field(
        0, ge=0, le=600_000, title="Simulated latency per call (ms)",
        json_schema_extra={"columns": 1, "step": 50})   # no help text: the label says it all
    seed: int | None = config_only(description="Seed of the simulation (default: the audit's).")
    # how its (always well-formed) answer is read: settable in a config, not on the form
    parse: Literal["flat", "nested", "paths"] = config_only("flat")
    payload_path: str | None = config_only()
    paths: dict[str, str] | None = config_only()
    out_of_range: Literal["error", "clip"] = config_only("error")


class SimulatedScreener(Screener):
    """The ``simulated`` adapter: in-process, seeded per (audit seed, candidate, run).

    The same (seed, candidate, run) always gives the same payload, whatever order or
    concurrency the engine uses, so a resumed or re-ordered run is reproducible. ``latency_s``
    adds an ``asyncio.sleep`` per call to imitate a remote screener.
    """

    kind = "simulated"
    title = "Simulated (offline, for a dry run)"
    order = 0
    Options = SimulatedOptions
    uses_http = False
    answers_may_be_invalid = False

    def __init__(self, *, criteria: tuple[Criterion, ...] = (), model: str = "sim-screener-1",
                 seed: int = 0, latency_s: float = 0.0, parse: ParseSpec | None = None) -> None:
        if not criteria:
            criteria = tuple(Criterion(c.name, c.max_points) for c in DEMO_CRITERIA)
        self.criteria = tuple(criteria)
        self.model = model
        self.seed = int(seed)
        self.latency_s = float(latency_s)
        self.parse_spec = parse or ParseSpec()
        self.models = criterion_models_for(self.criteria)

    @classmethod
    def from_options(cls, options: SimulatedOptions, context: BuildContext
                     ) -> SimulatedScreener:
        return cls(criteria=context.criteria,
                   model=options.model_id(context, default="sim-screener-1"),
                   seed=context.seed if options.seed is None else options.seed,
                   latency_s=options.latency_ms / 1000.0, parse=options.parse_spec())

    def _rng(self, candidate_id: str, run: int) -> np.random.Generator:
        digest = hashlib.sha256(str(candidate_id).encode("utf-8")).digest()
        return np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little"), int(run)])

    async def call(self, client: object, request: ScreenRequest) -> RawResult:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        means = profile_from_application(request.application, request.candidate_id, self.models)
        rng = self._rng(request.candidate_id, request.run)
        scores = simulate_scores(means, self.models, rng)
        payload = render_payload(scores, self.model, rng)
        return RawResult(payload=payload, http_status=None, model=self.model,
                         seed=request.seed)

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        return application or ""

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "seed": self.seed,
                "latency_s": self.latency_s, "parse": self.parse_spec.to_dict()}

    def __repr__(self) -> str:
        return f"<SimulatedScreener model={self.model!r} seed={self.seed}>"
