"""What a run will cost before it starts: calls, tokens, money and wall time.

One estimate, one set of inputs (:func:`audit_estimate`): the Sample and Run pages and the
``sample`` and ``run`` commands call it with the audit's stored settings and get the same
numbers, each with where it comes from — *measured* (the pre-flight's median latency),
*typed* (a value the user entered), *from the applications* (their length and the prompt
template, about 4 characters a token), or an *assumption* / *default* said as such. The
worst case — every pair using all its ``max_calls_per_pair`` calls, every call writing
``max_tokens`` — is stated next to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.format import money, num, seconds
from core.run.options import PriceTable

__all__ = ["ASSUMED_INPUT_TOKENS", "DEFAULT_LATENCY_S", "Estimate", "audit_estimate",
           "wall_time"]

#: Input tokens a call is assumed to take while the sample holds no application text.
ASSUMED_INPUT_TOKENS = 1500
#: Latency per call assumed until one is typed or measured.
DEFAULT_LATENCY_S = 2.0
_LLM_KINDS = ("openai-chat", "anthropic")


def wall_time(calls: int, concurrency: int, latency_s: float | None,
              rpm: float | None = None) -> float | None:
    """``⌈calls / c⌉ · latency``, and no faster than a requests-per-minute ceiling allows."""
    if latency_s is None:
        return None
    wall = math.ceil(calls / max(1, int(concurrency))) * float(latency_s)
    if rpm:
        wall = max(wall, calls / float(rpm) * 60.0)
    return wall


@dataclass(frozen=True)
class Estimate:
    """Calls, tokens (estimates, ~4 characters a token), cost (None without a price) and wall
    time (None without a latency)."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    wall_time_s: float | None
    latency_s: float | None = None
    concurrency: int = 8
    notes: tuple[str, ...] = ()
    #: Worst case: every pair spends ``max_calls_per_pair`` calls of ``max_tokens`` output.
    worst_calls: int | None = None
    worst_cost: float | None = None
    #: Where each number comes from: ``{"latency": "measured by the pre-flight", …}``.
    sources: Mapping[str, str] = field(default_factory=dict)
    #: Calls of the whole run (done ones included); ``calls`` is what is left.
    whole_calls: int | None = None

    def lines(self, max_calls_per_pair: int | None = None) -> list[str]:
        """The estimate for a terminal (``run`` and ``sample`` print it): the numbers the
        pages' estimate metrics show, formatted the same way (:mod:`core.format`), then the
        worst case, the source of each number and the notes."""
        cost = "unknown" if self.cost is None else money(self.cost)
        wall = "unknown" if self.wall_time_s is None else seconds(self.wall_time_s)
        out = [f"estimate: {num(self.calls)} calls, ~{num(self.input_tokens)} input and "
               f"~{num(self.output_tokens)} output tokens, cost {cost}, wall time {wall} at "
               f"concurrency {self.concurrency}"]
        if self.worst_calls is not None:
            worst = "" if self.worst_cost is None else f", cost {money(self.worst_cost)}"
            per_pair = ("all its" if max_calls_per_pair is None
                        else f"its max_calls_per_pair = {max_calls_per_pair}")
            out.append(f"worst case: {num(self.worst_calls)} calls{worst} (every pair using "
                       f"{per_pair} calls, every answer max_tokens long)")
        out.extend(f"  {name}: {source}" for name, source in self.sources.items())
        out.extend(f"  note: {n}" for n in self.notes)
        return out


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def audit_estimate(settings: Mapping[str, Any], *, frozen_model: str,
                   criteria: tuple[Any, ...], candidates: pd.DataFrame | int, runs: int,
                   completed: set[tuple[str, int]] | None = None,
                   concurrency: int | None = None,
                   typed_where: str = "typed on the Sample page") -> Estimate:
    """The estimate of an audit's run from its stored settings (both pages call this).

    Parameters
    ----------
    settings : mapping
        The audit's settings: ``screener`` (kind, model, prompt, system, max_tokens,
        latency_ms), ``prices``, ``concurrency``, ``max_calls_per_pair``, ``rpm``, and the
        latency: ``preflight_latency_s`` (measured), the simulated screener's ``latency_ms``,
        or ``latency_s`` (typed), in that order; else :data:`DEFAULT_LATENCY_S`.
    frozen_model : str
        The model the screener calls unless the screener names another.
    candidates : DataFrame or int
        The sample (its ``application`` text sizes the prompts) or, for a draft, its size.
    runs : int
    completed : set, optional
        ``(candidate, run)`` pairs that already have a draw (not estimated again).
    concurrency : int, optional
        Calls in flight (default: the settings' ``concurrency``, else 8).
    typed_where : str
        Where a typed latency was given, for its source line (the command line says
        ``"given with --latency"``).

    Notes
    -----
    ``calls = pairs left``; input tokens per call = ``⌈(template + rubric + application
    characters) / 4⌉`` averaged over the candidates, or :data:`ASSUMED_INPUT_TOKENS` when the
    sample holds no application text; output tokens per call = ``30 + 12·criteria`` (a scores
    object), at most ``max_tokens``; cost = tokens × the price table's rate for the model
    called (a simulated screener costs nothing); wall time = ``⌈calls / concurrency⌉ ·
    latency`` (no faster than ``rpm``). Worst case: ``calls × max_calls_per_pair`` calls, each
    with ``max_tokens`` output tokens.
    """
    from core.screeners.prompts import (
        DEFAULT_MAX_TOKENS,
        DEFAULT_PROMPT,
        DEFAULT_SYSTEM,
        render_template,
        rubric_text,
    )

    scr = dict(settings.get("screener") or {"kind": "simulated"})
    kind = str(scr.get("kind") or "simulated")
    model = str(scr.get("model") or frozen_model or "")
    done = completed or set()
    sources: dict[str, str] = {}
    notes: list[str] = []
    runs = int(runs)
    # ---- calls
    if isinstance(candidates, int):
        n_cand, texts, ids = int(candidates), [], []
    else:
        ids = [str(c) for c in candidates["candidate_id"]]
        n_cand = len(ids)
        texts = ([_text(a) for a in candidates["application"]]
                 if "application" in candidates.columns else [""] * n_cand)
    whole = n_cand * runs
    if ids:
        left = sum(1 for cid in ids for j in range(1, runs + 1) if (cid, j) not in done)
    else:
        left = whole
    # ---- tokens
    if kind in _LLM_KINDS and settings.get("prompt_overhead_chars") is not None:
        overhead = int(settings["prompt_overhead_chars"])   # a config's template files
    elif kind in _LLM_KINDS:
        values = {"rubric": rubric_text(tuple(criteria)), "application": "",
                  "candidate_id": "", "request_id": "0" * 32}
        prompt = str(scr.get("prompt") or DEFAULT_PROMPT)
        system = scr.get("system", DEFAULT_SYSTEM)
        overhead = len(render_template(prompt, values)) + len(
            render_template(str(system or ""), values))
    else:
        overhead = 0
    if texts and any(texts):
        per_in = max(1, math.ceil((overhead + sum(len(t) for t in texts) / len(texts)) / 4))
        sources["input tokens"] = "from the applications and the prompt (~4 characters a token)"
    else:
        per_in = ASSUMED_INPUT_TOKENS
        sources["input tokens"] = (f"assumed {ASSUMED_INPUT_TOKENS:,} a call: the sample holds "
                                   "no application text")
    max_tokens = (int(scr.get("max_tokens") or DEFAULT_MAX_TOKENS) if kind in _LLM_KINDS
                  else None)
    per_out = 30 + 12 * max(len(criteria), 1)
    if max_tokens is not None:
        per_out = min(per_out, max_tokens)
    sources["output tokens"] = f"an allowance of {per_out:,} a call (one scores object)"
    in_tok, out_tok = left * per_in, left * per_out
    # ---- cost
    table = PriceTable.from_dict(settings.get("prices"))
    price = table.get(model)
    cost = worst_cost = None
    max_calls = int(settings.get("max_calls_per_pair") or 3)
    worst_calls = left * max_calls
    if kind == "simulated":
        cost = worst_cost = 0.0
        sources["cost"] = "nothing: the simulated screener makes no paid call"
    elif price is not None:
        cost = table.cost(model, in_tok, out_tok, 0)
        worst_cost = table.cost(model, worst_calls * per_in,
                                worst_calls * (max_tokens or per_out), 0)
        sources["cost"] = (f"the price table's rate for '{model}' (no prompt-cache discount: "
                           "an upper bound when caching is on)")
    elif not model:
        sources["cost"] = "unknown: no screener model chosen yet, so nothing to price"
    else:
        sources["cost"] = f"unknown: no price for '{model}' in the price table"
    # ---- time
    measured = settings.get("preflight_latency_s")
    typed = settings.get("latency_s")
    if measured is not None:
        latency = float(measured)
        sources["latency"] = f"{latency:.2f} s a call, measured by the pre-flight"
    elif kind == "simulated":
        latency = float(scr.get("latency_ms", 0) or 0) / 1000.0
        sources["latency"] = f"{latency:.2f} s a call, the simulated screener's setting"
    elif typed is not None:
        latency = float(typed)
        sources["latency"] = f"{latency:.2f} s a call, {typed_where}"
    else:
        latency = DEFAULT_LATENCY_S
        sources["latency"] = (f"{latency:.2f} s a call, a default until the pre-flight "
                              "measures it")
    conc = max(1, int(concurrency or settings.get("concurrency") or 8))
    rpm = settings.get("rpm")
    wall = wall_time(left, conc, latency, rpm)
    notes.append("token counts are estimates (about 4 characters a token)")
    notes.append("wall time assumes no retries")
    return Estimate(left, in_tok, out_tok, cost, wall, latency, conc, tuple(notes),
                    worst_calls=worst_calls, worst_cost=worst_cost, sources=sources,
                    whole_calls=whole)
