"""The run's settings and prices: :class:`RunOptions` (range-checked before anything is
allocated), :class:`Price` and :class:`PriceTable`.

Imported by the config reader and the Run form without loading the engine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import InputError
from core.freeze import ON_INVALID

__all__ = ["MAX_CANDIDATES", "Price", "PriceTable", "RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """Engine settings (all have safe defaults).

    Parameters
    ----------
    runs : int
        Replications per candidate (15; 30 when the numbers go to counsel or a regulator).
    concurrency : int
        Calls in flight at once; also the HTTP connection pool size.
    seed : int
        Seeds the interleaving order and the per-draw seeds.
    timeout_s, connect_timeout_s : float
        Read timeout (long: a model call can take a minute) and connect timeout.
    max_retries : int
        Retries of one call on 408/409/429/5xx/timeouts (so ``max_retries + 1`` attempts).
    backoff_base_s, backoff_cap_s : float
        Exponential backoff ``base·2^(attempt−1)`` with full jitter, capped.
    retry_after_cap_s : float
        Longest server-requested wait honoured; longer asks are capped.
    rpm : float, optional
        Requests per minute ceiling (attempts count).
    preflight : bool
        Run the 3-run determinism pre-flight before the rest.
    max_calls_per_pair : int
        Calls (each with its own request id) one pair may use when answers fail or do not parse.
    batch_rows, flush_s : int, float
        Writer batching: a transaction every ``flush_s`` seconds holding what arrived since
        the last one, sooner when ``batch_rows`` results are waiting (a killed process re-does
        at most the last ``flush_s`` seconds of calls on resume). A batch grows with the call
        rate because a transaction's cost is mostly fixed (:mod:`core.run.writer`).
    stop_on_finding : bool
        Stop the run at the first non-retried 4xx (e.g. "temperature not supported").
    on_invalid : {"recall", "clip", "keep-as-failed"}
        What an invalid answer (parse error, out of range, truncated, refused) leads to:
        another call for the pair (the stored draws are then conditioned on validity), scores
        outside ``0..max`` clipped (counted; other invalid answers are re-called), or the pair
        left without a draw. Frozen with the sheet.
    breaker : bool
        The circuit breaker: stop when the screener is systematically failing —
        ``breaker_fail_share`` or more of the first ``breaker_first_calls`` finished calls
        failed, or ``breaker_consecutive`` calls in a row failed.
    call_deadline_s : float
        Total time of one call, retries and waits included (a dripping server trips it).
    run_deadline_s : float, optional
        Total time of the run; at the deadline it stops as if asked to (resumable).
    retry_wait_total_s : float
        Longest total wait (backoff and ``Retry-After``) one call may spend before it fails.
    max_response_bytes : int
        Largest response body read (streamed; a larger one fails the call).
    """

    runs: int = 15
    concurrency: int = 8
    seed: int = 0
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    retry_after_cap_s: float = 120.0
    rpm: float | None = None
    preflight: bool = True
    max_calls_per_pair: int = 3
    batch_rows: int = 2000
    flush_s: float = 1.0
    stop_on_finding: bool = True
    on_invalid: str = "recall"
    breaker: bool = True
    breaker_first_calls: int = 20
    breaker_fail_share: float = 0.8
    breaker_consecutive: int = 15
    call_deadline_s: float = 300.0
    run_deadline_s: float | None = 86_400.0
    retry_wait_total_s: float = 300.0
    max_response_bytes: int = 2_000_000

    def __post_init__(self) -> None:
        for name, lo, hi in _INT_BOUNDS:
            _check_int(name, getattr(self, name), lo, hi)
        for name, lo, hi in _FLOAT_BOUNDS:
            v = getattr(self, name)
            if v is None and name in ("rpm", "run_deadline_s"):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    math.isfinite(v) and lo < v <= hi):
                raise InputError(f"{name} must be a number above {lo:g} and at most {hi:g} "
                                 f"(field '{name}')")
        if not 0 < self.breaker_fail_share <= 1:
            raise InputError("breaker_fail_share must be above 0 and at most 1 "
                             "(field 'breaker_fail_share')")
        if self.on_invalid not in ON_INVALID:
            raise InputError(f"on_invalid must be one of {', '.join(ON_INVALID)}; got "
                             f"'{self.on_invalid}' (field 'on_invalid')")


#: Runs per candidate and calls in flight accepted (the config, the CLI and the Run page).
RUNS_RANGE = (2, 1000)
CONCURRENCY_RANGE = (1, 256)
#: Bounds of the whole-number options: (name, min, max). A run of 1e9 replications or ten
#: million connections is refused before anything is allocated.
_INT_BOUNDS = (("runs", *RUNS_RANGE), ("concurrency", *CONCURRENCY_RANGE), ("seed", 0, 2**63 - 1),
               ("max_retries", 0, 20), ("max_calls_per_pair", 1, 20),
               ("batch_rows", 1, 100_000), ("breaker_first_calls", 1, 10_000),
               ("breaker_consecutive", 1, 10_000), ("max_response_bytes", 1_000, 100_000_000))
_FLOAT_BOUNDS = (("timeout_s", 0, 3600), ("connect_timeout_s", 0, 600),
                 ("backoff_base_s", 0, 600), ("backoff_cap_s", 0, 3600),
                 ("retry_after_cap_s", 0, 3600), ("rpm", 0, 1e6), ("flush_s", 0, 60),
                 ("call_deadline_s", 0, 86_400), ("run_deadline_s", 0, 30 * 86_400),
                 ("retry_wait_total_s", 0, 86_400))
#: Most candidates one run takes.
MAX_CANDIDATES = 10_000


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and math.isfinite(value) and float(value).is_integer() and lo <= value <= hi)
    if not ok:
        raise InputError(f"{name} must be a whole number from {lo:,} to {hi:,}; got "
                         f"{value!r} (field '{name}')")


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float
    cached_input: float | None = None


class PriceTable:
    """An editable price table: model id → :class:`Price` ($ per million tokens).

    Kept with the audit's settings (``to_dict``/``from_dict``). A model not in the table has no
    cost (``None``), never a guessed one.
    """

    def __init__(self, prices: Mapping[str, Price | Mapping[str, float]] | None = None) -> None:
        self.prices: dict[str, Price] = {}
        for model, p in (prices or {}).items():
            self.set(model, p)

    def set(self, model: str, price: Price | Mapping[str, float]) -> None:
        if not isinstance(price, Price):
            try:
                price = Price(float(price["input"]), float(price["output"]),
                              None if price.get("cached_input") is None
                              else float(price["cached_input"]))
            except (KeyError, TypeError, ValueError):
                raise InputError(f"price of '{model}' needs numbers input, output "
                                 "[, cached_input] in $ per million tokens") from None
        self.prices[str(model)] = price

    def get(self, model: str | None) -> Price | None:
        return self.prices.get(model) if model else None

    def cost(self, model: str | None, input_tokens: int | None, output_tokens: int | None,
             cached_input_tokens: int | None = None) -> float | None:
        """Cost of one call; ``input_tokens`` includes the cached ones."""
        p = self.get(model)
        if p is None or input_tokens is None or output_tokens is None:
            return None
        cached = int(cached_input_tokens or 0)
        cached_rate = p.input if p.cached_input is None else p.cached_input
        return ((int(input_tokens) - cached) * p.input + cached * cached_rate
                + int(output_tokens) * p.output) / 1e6

    def to_dict(self) -> dict[str, dict[str, float | None]]:
        return {m: {"input": p.input, "output": p.output, "cached_input": p.cached_input}
                for m, p in sorted(self.prices.items())}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PriceTable:
        return cls(data or {})
