"""One call with its retries (tenacity) under the run's rate limit (aiolimiter).

Retried: what the adapter marks retryable (408/409/429/5xx, timeouts, transport errors), at
most ``max_retries`` times. Never another 4xx: that is a finding. The wait before retry ``a``
(1, 2, …) is the server's ``retry-after-ms`` / ``Retry-After`` when it sent one,
``min(retry_after, retry_after_cap_s) + U(0, min(0.05·retry_after, 1))``, else full jitter
``U(0, min(backoff_cap_s, backoff_base_s·2^(a−1)))``. A retry is not made when its wait would
take the call's total wait past ``retry_wait_total_s`` or the call past ``call_deadline_s``;
the call then fails saying so. The run's deadline cancels the call (recorded as cancelled).
Every attempt takes a slot of the ``rpm`` limiter (one attempt every ``60/rpm`` seconds).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

from aiolimiter import AsyncLimiter
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base, wait_random_exponential

from core.run.options import RunOptions
from core.screeners.base import CallFailed, RawResult, ScreenRequest
from core.screeners.http import HttpClient

__all__ = ["CallResult", "RetryAfterWait", "Retrier", "rate_limiter"]


def rate_limiter(rpm: float | None) -> AsyncLimiter | None:
    """One attempt every ``60/rpm`` seconds (a bucket of one: no burst), or None."""
    return AsyncLimiter(1, 60.0 / float(rpm)) if rpm else None


class RetryAfterWait(wait_base):
    """The server's ``Retry-After`` (capped, with a little jitter) when it sent one, else
    exponential backoff with full jitter."""

    def __init__(self, base_s: float, cap_s: float, retry_after_cap_s: float) -> None:
        self.backoff = wait_random_exponential(multiplier=base_s, max=cap_s)
        self.retry_after_cap_s = retry_after_cap_s

    def __call__(self, retry_state: RetryCallState) -> float:
        planned = getattr(retry_state, "planned_wait", None)
        if planned is not None and planned[0] == retry_state.attempt_number:
            return planned[1]            # the budget check already drew this wait
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        asked = getattr(exc, "retry_after", None)
        if asked is not None:
            asked = max(float(asked), 0.0)
            delay = min(asked, self.retry_after_cap_s) + random.uniform(0, min(0.05 * asked,
                                                                               1.0))
        else:
            delay = float(self.backoff(retry_state))
        retry_state.planned_wait = (retry_state.attempt_number, delay)  # type: ignore[attr-defined]
        return delay


class _OverBudget(stop_base):
    """Stop when the next wait would pass the call's total wait or its total deadline
    (counted from ``t0``, the start of the call's first attempt)."""

    def __init__(self, wait: RetryAfterWait, total_wait_s: float, deadline_s: float,
                 t0: float) -> None:
        self.wait, self.total_wait_s, self.deadline_s, self.t0 = wait, total_wait_s, \
            deadline_s, t0

    def __call__(self, retry_state: RetryCallState) -> bool:
        delay = self.wait(retry_state)
        waited = retry_state.idle_for
        spent = time.monotonic() - self.t0
        if waited + delay > self.total_wait_s or spent + delay > self.deadline_s:
            retry_state.over_budget = (delay, waited, spent)  # type: ignore[attr-defined]
            return True
        return False


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, CallFailed) and exc.retryable


@dataclass
class CallResult:
    """How one call ended: an answer (``raw``) or a failure, after ``attempts`` attempts;
    ``latency_ms`` is the last attempt's."""

    raw: RawResult | None = None
    failure: CallFailed | None = None
    attempts: int = 0
    latency_ms: float | None = None


class Retrier:
    """The retry rule of a run (built once; a call that needs retries runs on its own copy).

    The first attempt of a call is made directly; only when it fails retryably does the call
    go on under tenacity's ``AsyncRetrying``, with that failure as its first outcome (so
    attempt numbers, waits and budgets are those of the whole call). Tenacity's async
    machinery costs tens of microseconds a call (it inspects its callbacks on every step),
    which a call that succeeds at once — nearly all of them — does not need to pay.

    Parameters
    ----------
    options : RunOptions
    on_retry : callable
        Called (no arguments) before each wait, to count the run's retries.
    """

    def __init__(self, options: RunOptions, on_retry: Any) -> None:
        self.options = options
        self.wait = RetryAfterWait(options.backoff_base_s, options.backoff_cap_s,
                                   options.retry_after_cap_s)
        self._retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            wait=self.wait,
            before_sleep=lambda _state: on_retry(),
            retry_error_callback=self._give_up,
            sleep=asyncio.sleep,
        )
        self.limiter = rate_limiter(options.rpm)

    def _give_up(self, retry_state: RetryCallState) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        assert isinstance(exc, CallFailed)
        over = getattr(retry_state, "over_budget", None)
        if over is None:             # out of retries: the last failure as it was
            raise exc
        delay, waited, spent = over
        opts = self.options
        asked = (f"the server asked to wait {exc.retry_after:g} s; "
                 if exc.retry_after is not None else "")
        raise CallFailed(
            f"{exc.message} — not retried again: {asked}the call has waited {waited:.0f} s "
            f"over {spent:.0f} s, and waiting {delay:.0f} s more would pass "
            f"retry_wait_total_s = {opts.retry_wait_total_s:g} s or call_deadline_s = "
            f"{opts.call_deadline_s:g} s", status=exc.status, payload=exc.payload)

    async def _attempt(self, screener: Any, client: HttpClient | None,
                       req: ScreenRequest, out: CallResult) -> RawResult:
        """One attempt (after a slot of the rate limiter); an adapter bug is a failed call."""
        out.attempts += 1
        if self.limiter is not None:
            await self.limiter.acquire()
        t0 = time.perf_counter()
        try:
            raw = await screener.call(client, req)
        except CallFailed:
            out.latency_ms = (time.perf_counter() - t0) * 1000.0
            raise
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - an adapter bug must not kill the run
            out.latency_ms = (time.perf_counter() - t0) * 1000.0
            raise CallFailed(f"{type(exc).__name__}: {exc}") from None
        out.latency_ms = (time.perf_counter() - t0) * 1000.0
        return raw

    async def call(self, screener: Any, client: HttpClient | None,
                   req: ScreenRequest, out: CallResult | None = None) -> CallResult:
        """The call with its retries, filling ``out``; raises only ``asyncio.CancelledError``
        (``out`` then holds the attempts made so far).

        An adapter that raises anything but :class:`CallFailed` fails the call (not retried):
        an adapter bug must not kill the run.
        """
        out = CallResult() if out is None else out
        t0 = time.monotonic()
        try:
            out.raw = await self._attempt(screener, client, req, out)
            return out
        except CallFailed as exc:
            if not exc.retryable:
                out.failure = exc
                return out
            first: CallFailed = exc
        replay = [first]

        async def attempt() -> RawResult:
            if replay:               # the first attempt's failure, already made above
                raise replay.pop()
            return await self._attempt(screener, client, req, out)

        opts = self.options
        retrying = self._retrying.copy(
            stop=stop_after_attempt(int(opts.max_retries) + 1)
            | _OverBudget(self.wait, opts.retry_wait_total_s, opts.call_deadline_s, t0))
        try:
            out.raw = await retrying(attempt)
        except CallFailed as exc:
            out.failure = exc
        return out
