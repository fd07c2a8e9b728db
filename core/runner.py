"""Step 3 — run N independent replications per candidate, store every call, guard the result.

The engine (:class:`Runner`) drives a screener adapter (:mod:`core.screeners`) over the missing
``(candidate, run)`` pairs of an audit:

* **Concurrency**: a fixed pool of ``concurrency`` workers (the semaphore) over an
  ``httpx.AsyncClient`` whose pool has exactly as many connections, so no request ever waits for
  a pool slot (PITFALLS: httpx 0.28 leaks a slot when such a wait is cancelled). No
  ``asyncio.wait_for`` around requests; the client's own timeouts (long read, 120 s default).
* **Retries**: 408/409/429/5xx, timeouts and transport errors, with exponential backoff and full
  jitter, honouring ``retry-after-ms`` then ``Retry-After`` (capped); never another 4xx — that
  is a finding, shown to the user, and by default it stops the run.
* **One request id per call** (uuid4, sent as ``X-Request-ID`` and, for your own endpoint,
  ``Idempotency-Key``; retries of a call reuse it; it is the key of the call row).
* **Order**: rounds of runs, candidates shuffled in each round by a seeded generator, so
  candidates are interleaved and a stopped run leaves every candidate with about as many runs.
* **One writer**: a thread that batches call and draw rows into the store (every
  ``batch_rows`` results or ``flush_s`` seconds), each batch one transaction, a call row and its
  draws always together.
* **Resume** fills only the missing pairs (a pair is done when it has a draw). A process killed
  between a call and its write re-does that pair on resume: nothing is duplicated in the store,
  but the provider may bill that call twice.
* **Stop** cancels the in-flight calls, records them as ``cancelled`` and flushes the writer:
  the store is consistent at every moment.
* A call that fails after its retries, or whose answer is invalid (a parse error, a score out
  of range, an answer truncated by ``max_tokens``, a refusal — each recorded as its own status),
  is recorded (with the raw payload) and never becomes a draw; by ``on_invalid`` the pair gets a
  new call (a new request id), up to ``max_calls_per_pair`` calls in the session, pre-flight
  included.
* **Bounded**: each call has a total deadline (``call_deadline_s``, a dripping server trips it),
  a response size cap (streamed) and a total retry wait (``retry_wait_total_s``); the run has a
  deadline (``run_deadline_s``); options are range-checked before anything is allocated.
* **Circuit breaker**: when ``breaker_fail_share`` of the first ``breaker_first_calls`` finished
  calls fail, or ``breaker_consecutive`` in a row, the run stops and says in one paragraph which
  failure kind dominates, shows one raw answer and names the setting most likely to fix it.

Guards (SPEC §3.1, §3.3): side-effect clearance before any call (:class:`GuardError`), and the
answer format / output limit / invalid policy the sheet froze; the 3-run determinism pre-flight
(which also stops a server that reports another model than the frozen one);
:func:`cache_verdict` ("a cache test, not a variance test"); :func:`model_populations`
(reported model ≠ frozen model → a second population).

For the app: :class:`RunHandle` runs the engine in a background thread (never touching
streamlit) with ``start()``, ``stop()``, ``status()``; :func:`registry` is the process-wide
registry of handles. For the terminal: :mod:`core.run_cli`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import math
import os
import queue
import random
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import pandas as pd

from core.errors import AuditError, GuardError, InputError, StoreError
from core.estimate import Estimate, wall_time
from core.format import excerpt
from core.freeze import ON_INVALID, FreezeSheet
from core.screeners.base import CallFailed, CallLimits, RawResult, ScreenRequest, scrub
from core.screeners.parsing import INVALID_KINDS, Parsed, ParseError
from core.store import Store

__all__ = [
    "CacheVerdict",
    "Estimate",
    "ModelPopulations",
    "Price",
    "PriceTable",
    "RunHandle",
    "RunOptions",
    "RunRegistry",
    "RunStatus",
    "Runner",
    "StopToken",
    "cache_verdict",
    "estimate_run",
    "model_populations",
    "plan_pairs",
    "registry",
    "run_audit",
]

DETERMINISM_MESSAGE = (
    "Pre-flight: {n} runs of candidate {cid} returned byte-identical payloads: the screener is "
    "deterministic or cached. A variance audit would measure zero for the wrong reason; stop, "
    "turn off the result cache (distinct request ids, no result-level cache) or, for a "
    "deterministic screener, the audit is not needed.")

MODEL_MESSAGE = (
    "Pre-flight: the server reports the model '{reported}', not the frozen '{frozen}': every "
    "draw would be a second population and be left out of the statistics. Freeze the id the "
    "server reports ([harness] model; for llama.cpp's server, the name given with --alias) in "
    "a new audit.")


# ============================================================================ options, prices
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
        Writer batching: a transaction every ``batch_rows`` results or ``flush_s`` seconds
        (a killed process re-does at most that much on resume).
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
    batch_rows: int = 200
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


#: Bounds of the whole-number options: (name, min, max). A run of 1e9 replications or ten
#: million connections is refused before anything is allocated.
_INT_BOUNDS = (("runs", 2, 1000), ("concurrency", 1, 256), ("seed", 0, 2**63 - 1),
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


# ============================================================================ status / stop
@dataclass(frozen=True)
class RunStatus:
    """A snapshot of a run, safe to read from any thread.

    ``state``: ``idle`` → ``preflight`` → ``running`` → ``finished`` | ``stopped`` |
    ``blocked`` (a guard stopped it) | ``failed`` (an error; see ``message``).
    ``done``/``total`` count ``(candidate, run)`` pairs with a draw, earlier sessions included.
    """

    state: str = "idle"
    done: int = 0
    total: int = 0
    calls: int = 0
    errors: int = 0
    parse_errors: int = 0
    retries: int = 0
    cancelled: int = 0
    eta_s: float | None = None
    elapsed_s: float = 0.0
    cost: float = 0.0
    message: str = ""
    findings: tuple[str, ...] = ()
    preflight_latency_s: float | None = None
    reported_models: tuple[str, ...] = ()
    #: Failed calls of this session by kind: parse_error, out_of_range, truncated, refused,
    #: and "HTTP 503" / "timeout or connection" / "error" for calls that got no answer.
    failures: tuple[tuple[str, int], ...] = ()
    #: The circuit breaker's paragraph when it stopped the run.
    breaker: str | None = None
    #: Pairs of this run without a draw at the end, by why (the last failure's kind).
    missing: tuple[tuple[str, int], ...] = ()

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @property
    def active(self) -> bool:
        return self.state in ("idle", "preflight", "running", "stopping")


class StopToken:
    """Thread-safe stop request; the engine cancels its in-flight calls when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb()
            except RuntimeError:  # loop already closed
                pass

    def is_set(self) -> bool:
        return self._event.is_set()

    def on_set(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
        if self._event.is_set():
            callback()


# ============================================================================ the writer
_INT_COLS = ("run", "attempts", "http_status", "input_tokens", "output_tokens",
             "cached_input_tokens", "seed")
CALL_FIELDS = ["request_id", "candidate_id", "run", "attempts", "started_at", "finished_at",
               "latency_ms", "http_status", "status", "error", "raw_payload", "payload_sha256",
               "model", "input_tokens", "output_tokens", "cached_input_tokens", "cost", "seed",
               "source", "meta_json"]
DRAW_FIELDS = ["candidate_id", "run", "criterion", "score", "request_id", "model", "clipped"]


def _calls_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=CALL_FIELDS)
    for col in _INT_COLS:
        df[col] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v))
                            else int(v) for v in df[col]], dtype="Int64")
    for col in ("latency_ms", "cost"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in ("started_at", "finished_at"):
        df[col] = pd.to_datetime(df[col])
    for col in ("request_id", "candidate_id", "status", "error", "raw_payload",
                "payload_sha256", "model", "source", "meta_json"):
        df[col] = df[col].astype("string[pyarrow]")   # scanned by DuckDB without the GIL
    return df


def _draws_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=DRAW_FIELDS)
    for col in ("candidate_id", "criterion", "request_id", "model"):
        df[col] = df[col].astype("string[pyarrow]")
    df["run"] = df["run"].astype("int64")
    df["score"] = df["score"].astype("float64")
    df["clipped"] = df["clipped"].astype(bool)
    return df


class _Writer:
    """The one writer: a thread batching rows into the store."""

    def __init__(self, store: Store, audit_id: str, batch_rows: int, flush_s: float) -> None:
        self.store, self.audit_id = store, audit_id
        self.batch_rows, self.flush_s = max(1, batch_rows), max(0.01, flush_s)
        self._q: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self.written_calls = 0
        self._thread = threading.Thread(target=self._loop, name=f"writer-{audit_id}",
                                        daemon=True)
        self._thread.start()

    def put(self, call_row: dict[str, Any], draw_rows: list[dict[str, Any]]) -> None:
        self._q.put((call_row, draw_rows))

    def flush(self, timeout: float = 60.0) -> None:
        """Block until everything put so far is written."""
        done = threading.Event()
        self._q.put(("flush", done))
        done.wait(timeout)

    def close(self, timeout: float = 120.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)

    def _loop(self) -> None:
        calls: list[dict[str, Any]] = []
        draws: list[dict[str, Any]] = []
        last = time.monotonic()
        closing = False
        while not closing:
            try:
                item = self._q.get(timeout=self.flush_s)
            except queue.Empty:
                item = "tick"
            waiter = None
            if item is None:
                closing = True
            elif isinstance(item, tuple) and item[0] == "flush":
                waiter = item[1]
            elif item != "tick":
                calls.append(item[0])
                draws.extend(item[1])
            due = (len(calls) >= self.batch_rows or time.monotonic() - last >= self.flush_s
                   or closing or waiter is not None)
            if due and calls and self._write(calls, draws, final=closing):
                calls, draws = [], []
            if due:
                last = time.monotonic()
            if waiter is not None:
                waiter.set()

    def _write(self, calls: list[dict[str, Any]], draws: list[dict[str, Any]],
               final: bool = False) -> bool:
        """One batch, one short transaction (the file is held only while it commits).

        Returns False when the file stayed held by another process for the store's whole
        wait: the batch is kept and retried with the next one (the last batch fails the run).
        """
        if self.error is not None:
            return True
        try:
            self.store.write_results(self.audit_id, _calls_frame(calls),
                                     _draws_frame(draws) if draws else None)
            self.written_calls += len(calls)
        except StoreError as exc:
            if getattr(exc, "locked", False) and not final:
                return False
            self.error = exc
        except Exception as exc:  # noqa: BLE001 - reported through the run status; the run stops
            self.error = exc
        return True


# ============================================================================ HTTP clients
#: Connections per client. httpcore's pool assigns requests to connections in O(requests ×
#: connections) on every request; at 64 connections in one pool that costs more CPU than the
#: calls themselves (measured: ~4 ms per call), so large concurrency is split over clients.
POOL_SHARD = 8


def _avoid_repeated_failed_import() -> None:
    """httpcore runs ``import sniffio`` on every request; when sniffio is not installed, each
    failed import scans ``sys.path`` again (~0.2 ms a request). Record its absence once."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def _make_clients(options: RunOptions) -> list[httpx.AsyncClient]:
    """Clients whose pools together hold exactly ``concurrency`` connections."""
    _avoid_repeated_failed_import()
    c = int(options.concurrency)
    n = max(1, math.ceil(c / POOL_SHARD))
    sizes = [c // n + (1 if i < c % n else 0) for i in range(n)]
    timeout = httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s,
                            pool=options.timeout_s)
    tls = _ssl_context()  # one verified TLS context shared by the shards (each costs ~25 ms)
    return [httpx.AsyncClient(limits=httpx.Limits(max_connections=size,
                                                  max_keepalive_connections=size),
                              timeout=timeout, follow_redirects=False, verify=tls)
            for size in sizes]


_TLS: list[ssl.SSLContext] = []


def _ssl_context() -> ssl.SSLContext:
    """A default, certificate-verifying context (certifi's roots, as httpx uses), made once."""
    if not _TLS:
        try:
            import certifi
            _TLS.append(ssl.create_default_context(cafile=certifi.where()))
        except ImportError:  # pragma: no cover - certifi ships with httpx
            _TLS.append(ssl.create_default_context())
    return _TLS[0]


_IDS = random.Random(int.from_bytes(os.urandom(16), "little"))


def new_request_id() -> str:
    """A random 128-bit request id (uuid4 form) without a system call per id."""
    return uuid.UUID(int=_IDS.getrandbits(128), version=4).hex


# ============================================================================ planning
def plan_pairs(candidate_ids: Iterable[str], runs: int, seed: int,
               completed: set[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
    """The missing ``(candidate, run)`` pairs in the seeded interleaved order.

    Round ``r`` holds run ``r`` of every candidate, in a fresh seeded shuffle of candidates.
    """
    ids = sorted({str(c) for c in candidate_ids})
    done = completed or set()
    rng = np.random.default_rng(seed)
    out: list[tuple[str, int]] = []
    for run in range(1, int(runs) + 1):
        for i in rng.permutation(len(ids)):
            pair = (ids[int(i)], run)
            if pair not in done:
                out.append(pair)
    return out


def _derive_seed(seed: int, candidate_id: str, run: int, call_no: int) -> int:
    h = hashlib.sha256(f"{seed}|{candidate_id}|{run}|{call_no}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class _RateLimiter:
    def __init__(self, rpm: float) -> None:
        self.interval = 60.0 / rpm
        self.next = 0.0
        self.lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)


# ============================================================================ failure kinds
_KIND_LABELS = {"parse_error": "parse error", "out_of_range": "out of range",
                "truncated": "truncated", "refused": "refused"}
#: The setting most likely to fix a systematic failure of each kind.
_FIXES = {
    "parse_error": ("response_format = \"json_schema\" in [screener] (the server then enforces "
                    "the rubric's keys), or the prompt / parse preset (parse, payload_path) so "
                    "the answer's keys are the criterion names"),
    "out_of_range": ("the criterion maxima in [[criteria]] and the rubric the prompt shows, or "
                     "[run] on_invalid = \"clip\""),
    "truncated": ("[screener] max_tokens (raise it), or a prompt that asks for the scores "
                  "only"),
    "refused": "the prompt (the model refuses to score it)",
}
_FIX_ERROR = ("[run] timeout_s, concurrency or rpm, or the server itself (base_url / url): "
              "the calls got no answer")


def _error_kind(failure: CallFailed) -> str:
    """A call that got no usable answer, by kind: ``HTTP 503``, ``timeout or connection``, or
    ``error`` (an adapter failure)."""
    if failure.status and failure.status >= 400:
        return f"HTTP {failure.status}"
    if failure.retryable:
        return "timeout or connection"
    return "error"


def breaker_paragraph(why: str, failures: Mapping[str, int],
                      examples: Mapping[str, str]) -> str:
    """The circuit breaker's one paragraph: why it stopped, the dominant error kind, one raw
    answer of that kind (shortened, escaped) and the setting most likely to fix it."""
    if failures:
        kind, n = max(failures.items(), key=lambda kv: (kv[1], kv[0]))
    else:
        kind, n = "error", 0
    total = sum(failures.values())
    label = _KIND_LABELS.get(kind, kind)
    fix = _FIXES.get(kind, _FIX_ERROR)
    if kind.startswith("HTTP 4"):
        fix = ("what the harness sends, as the server's message says (the model id, sampling "
               "parameters, response_format / schema_style, max_tokens, or api_key_env)")
    sample = excerpt(examples.get(kind, ""), 160) or "(empty)"
    return (f"Stopped by the circuit breaker: {why}, so the screener is failing "
            f"systematically and further calls would be spent for nothing. Most failures are "
            f"{label} ({n} of {total}). One raw answer: {sample} The setting most likely to "
            f"fix it: {fix}. What was stored is kept; after the change, run again (a changed "
            "harness needs a new audit).")


# ============================================================================ the engine
class Runner:
    """Drive ``screener`` over the missing pairs of ``audit_id`` (see module notes).

    Parameters
    ----------
    store : Store
        The audit (freeze sheet, criteria, candidates) must be saved already.
    audit_id : str
    screener
        An adapter from :mod:`core.screeners` (``call`` / ``parse`` / ``model`` / ``uses_http``).
    options : RunOptions
    prices : PriceTable, optional
        Cost of each call (by reported model, else the frozen one).
    client : httpx.AsyncClient, optional
        Reuse a client (tests); by default one is made with ``concurrency`` connections.
    progress : callable, optional
        Called with a :class:`RunStatus` (at most ~10 times a second, and at the end) from the
        engine's thread.
    stop : StopToken, optional
    until : {"all", "preflight"}
        ``"preflight"`` runs the pre-flight only (to measure latency for the estimate).
    """

    def __init__(self, store: Store, audit_id: str, screener: Any,
                 options: RunOptions | None = None, *, prices: PriceTable | None = None,
                 client: httpx.AsyncClient | None = None,
                 progress: Callable[[RunStatus], None] | None = None,
                 stop: StopToken | None = None, until: str = "all") -> None:
        self.store, self.audit_id, self.screener = store, audit_id, screener
        self.options = options or RunOptions()
        self.prices = prices or PriceTable()
        self._client = client
        self._progress = progress
        self.stop_token = stop or StopToken()
        if until not in ("all", "preflight"):
            raise InputError("until must be 'all' or 'preflight'")
        self.until = until
        self._lock = threading.Lock()
        self._status = RunStatus()
        self._last_emit = 0.0
        self._t0 = time.monotonic()
        self._session_done = 0
        self._models: set[str] = set()
        self._findings: list[str] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limiter = _RateLimiter(self.options.rpm) if self.options.rpm else None
        self._preflight_payloads: list[str] = []
        self._preflight_latency: list[float] = []
        self._done_pairs: set[tuple[str, int]] = set()
        self.frozen_model: str = getattr(screener, "model", "") or ""
        # one call's bounds for the adapters (size of the answer, total time of the call)
        try:
            screener.call_limits = CallLimits(int(self.options.max_response_bytes),
                                              float(self.options.call_deadline_s))
        except AttributeError:  # an adapter object that refuses attributes: keep its own
            pass
        spec = getattr(screener, "parse_spec", None)
        if self.options.on_invalid == "clip" and spec is not None \
                and spec.out_of_range != "clip":
            screener.parse_spec = replace(spec, out_of_range="clip")
        self._pair_calls: dict[tuple[str, int], int] = {}
        self._pair_failure: dict[tuple[str, int], str] = {}
        self._failures: dict[str, int] = {}
        self._outcomes: list[bool] = []      # True = failed, per finished call, in order
        self._streak = 0
        self._window = int(self.options.breaker_first_calls)   # narrowed for a small run
        self._breaker_msg: str | None = None
        self._deadline_hit = False
        self._example: dict[str, str] = {}   # kind → one raw answer (or error) of that kind

    # ------------------------------------------------------------------ status
    def status(self) -> RunStatus:
        with self._lock:
            return self._status

    def _update(self, force: bool = False, **changes: Any) -> None:
        with self._lock:
            st = replace(self._status, **changes) if changes else self._status
            elapsed = time.monotonic() - self._t0
            remaining = st.total - st.done
            eta = None
            if remaining <= 0:
                eta = 0.0
            elif self._session_done > 0 and elapsed > 0:
                eta = remaining * elapsed / self._session_done
            st = replace(st, elapsed_s=elapsed, eta_s=eta, findings=tuple(self._findings),
                         reported_models=tuple(sorted(self._models)))
            self._status = st
        now = time.monotonic()
        if self._progress and (force or now - self._last_emit >= 0.1):
            self._last_emit = now
            self._progress(st)

    # ------------------------------------------------------------------ entry
    async def run(self) -> RunStatus:
        """Run to completion, stop or guard; returns the final status.

        Raises
        ------
        GuardError
            Side-effect clearance missing (before any call) or the determinism pre-flight
            found identical payloads (after storing those calls).
        StoreError
            The writer could not write (the run stopped; what was written is consistent).
        """
        self._t0 = time.monotonic()
        self._loop = asyncio.get_running_loop()
        sheet = self._check_guards()
        self.frozen_model = sheet.model or self.frozen_model
        cands = self.store.get_candidates(self.audit_id)
        if cands.empty:
            raise InputError(f"audit '{self.audit_id}' has no candidates: save the sample "
                             "before running")
        apps = {str(r.candidate_id): ("" if r.application is None or
                                      (isinstance(r.application, float) and
                                       math.isnan(r.application)) else str(r.application))
                for r in cands.itertuples()}
        strata = {str(r.candidate_id): r.stratum for r in cands.itertuples()}
        completed = self.store.completed_pairs(self.audit_id)
        runs = int(self.options.runs)
        all_pairs = {(c, r) for c in apps for r in range(1, runs + 1)}
        done = len(all_pairs & completed)
        self._update(force=True, state="preflight" if self.options.preflight else "running",
                     total=len(all_pairs), done=done)
        # a run with fewer pairs left than the breaker's first-calls window is judged on its
        # first call of each pair (at least 5), not never
        self._window = min(int(self.options.breaker_first_calls),
                           max(5, len(all_pairs) - done))
        self._apps = apps
        writer = _Writer(self.store, self.audit_id, self.options.batch_rows,
                         self.options.flush_s)
        self._writer = writer
        own_clients: list[httpx.AsyncClient] = []
        if self._client is not None:
            clients: list[httpx.AsyncClient | None] = [self._client]
        elif getattr(self.screener, "uses_http", False):
            own_clients = _make_clients(self.options)
            clients = list(own_clients)
        else:
            clients = [None]
        self.stop_token.on_set(self._request_stop)
        if len(apps) > MAX_CANDIDATES:
            raise InputError(f"audit '{self.audit_id}' has {len(apps):,} candidates; one run "
                             f"takes at most {MAX_CANDIDATES:,}")
        deadline = None
        if self.options.run_deadline_s:
            deadline = self._loop.call_later(float(self.options.run_deadline_s),
                                             self._run_deadline)
        guard: GuardError | None = None
        try:
            if self.options.preflight:
                guard = await self._preflight(clients, apps, strata, completed)
            if guard is None and self.until == "all" and not self.stop_token.is_set():
                self._update(force=True, state="running")
                completed = completed | self._new_pairs()
                pairs = plan_pairs(apps, runs, self.options.seed, completed)
                await self._drive(clients, pairs)
        finally:
            if deadline is not None:
                deadline.cancel()
            for c in own_clients:
                await c.aclose()
            writer.close()
        if writer.error is not None:
            msg = scrub(f"writing results failed: {writer.error}")
            self._update(force=True, state="failed", message=msg)
            raise StoreError(msg)
        if guard is not None:
            self._update(force=True, state="blocked", message=str(guard))
            raise guard
        missing = self._missing(all_pairs, completed)
        why = "; ".join(f"{n} {kind}" for kind, n in missing)
        if self._breaker_msg is not None:
            state, msg = "stopped", self._breaker_msg
        elif self._findings and self.options.stop_on_finding:
            state, msg = "stopped", "stopped on a finding: " + self._findings[0]
        elif self._deadline_hit:
            state = "stopped"
            msg = (f"stopped at the run deadline of {self.options.run_deadline_s:g} s "
                   "(run_deadline_s); run again to resume")
        elif self.stop_token.is_set():
            state, msg = "stopped", "stopped; run again to resume"
        elif self.until == "preflight":
            state, msg = "finished", "pre-flight done"
        else:
            n_missing = sum(n for _, n in missing)
            state = "finished"
            msg = ("all pairs have a draw" if n_missing == 0 else
                   f"{n_missing} pair(s) still without a draw after up to "
                   f"{self.options.max_calls_per_pair} call(s) each — why: {why}; run again to "
                   "retry them")
        if state == "stopped" and missing and self.until == "all":
            msg += f" Pairs without a draw: {why}."
        self._update(force=True, state=state, message=msg, missing=tuple(missing))
        return self.status()

    def _run_deadline(self) -> None:
        self._deadline_hit = True
        self.stop_token.set()

    def _missing(self, all_pairs: set[tuple[str, int]],
                 completed: set[tuple[str, int]]) -> list[tuple[str, int]]:
        """Pairs of the run without a draw, counted by why (last failure's kind, or not
        called this session)."""
        done = completed | self._new_pairs()
        counts: dict[str, int] = {}
        for pair in all_pairs - done:
            kind = self._pair_failure.get(pair)
            label = _KIND_LABELS.get(kind, kind) if kind else "not called (stopped before them)"
            counts[label] = counts.get(label, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def _check_guards(self) -> FreezeSheet:
        audit = self.store.get_audit(self.audit_id)
        try:
            sheet = FreezeSheet.from_dict(audit["freeze"])
        except (AuditError, TypeError) as exc:
            raise GuardError(f"audit '{self.audit_id}' has no valid freeze sheet ({exc}); "
                             "freeze the harness first") from None
        blockers = sheet.blockers()
        if blockers:
            raise GuardError("No call was made: " + "; ".join(blockers))
        # what the sheet froze about the answers must be what this run asks for
        asked = {"response_format": getattr(self.screener, "response_format", None),
                 "answer_schema": getattr(self.screener, "schema", None),
                 "max_tokens": getattr(self.screener, "max_tokens", None),
                 "on_invalid": self.options.on_invalid}
        for key, value in asked.items():
            frozen = getattr(sheet, key)
            if frozen is not None and value is not None and frozen != value:
                raise GuardError(f"No call was made: the freeze sheet records {key} = "
                                 f"{frozen!r} but this run would use {value!r}; run with the "
                                 "frozen setting or start a new audit")
        return sheet

    def _new_pairs(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._done_pairs)

    # ------------------------------------------------------------------ pre-flight
    async def _preflight(self, clients: list[httpx.AsyncClient | None], apps: dict[str, str],
                         strata: dict[str, Any],
                         completed: set[tuple[str, int]]) -> GuardError | None:
        band = sorted(c for c, s in strata.items() if s == "band")
        cid = band[0] if band else min(apps)
        # never more pre-flight runs than the audit's runs: no candidate gets extra draws
        n_pre = min(3, int(self.options.runs))
        counts = self.store.payload_counts(self.audit_id)
        row = counts[counts["candidate_id"] == cid]
        if len(row) and int(row["calls_with_payload"].iloc[0]) >= n_pre:
            if int(row["distinct_payloads"].iloc[0]) == 1:
                return GuardError(DETERMINISM_MESSAGE.format(
                    n=int(row["calls_with_payload"].iloc[0]), cid=cid))
            return None
        todo = [(cid, r) for r in range(1, n_pre + 1) if (cid, r) not in completed]
        await self._drive(clients, todo, preflight=True)
        self._writer.flush()
        with self._lock:
            lat = list(self._preflight_latency)
        self._update(force=True, preflight_latency_s=(float(np.median(lat)) if lat else None))
        counts = self.store.payload_counts(self.audit_id)
        row = counts[counts["candidate_id"] == cid]
        if len(row) and int(row["calls_with_payload"].iloc[0]) >= n_pre \
                and int(row["distinct_payloads"].iloc[0]) == 1:
            return GuardError(DETERMINISM_MESSAGE.format(
                n=int(row["calls_with_payload"].iloc[0]), cid=cid))
        with self._lock:
            reported = sorted(self._models)
        if reported and self.frozen_model and self.frozen_model not in reported:
            return GuardError(MODEL_MESSAGE.format(reported="', '".join(reported),
                                                   frozen=self.frozen_model))
        return None

    # ------------------------------------------------------------------ driving
    def _request_stop(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def _cancel() -> None:
            self._update(force=True, state="stopping")
            for t in list(self._tasks):
                t.cancel()
        loop.call_soon_threadsafe(_cancel)

    async def _drive(self, clients: list[httpx.AsyncClient | None],
                     pairs: list[tuple[str, int]], preflight: bool = False) -> None:
        if not pairs or self.stop_token.is_set():
            return
        it = iter(pairs)
        n_workers = max(1, min(int(self.options.concurrency), len(pairs)))

        async def worker(client: httpx.AsyncClient | None) -> None:
            for cid, run in it:
                if self.stop_token.is_set():
                    return
                await self._do_pair(client, cid, run, preflight)

        # worker i uses client i mod n: each client's pool holds as many connections as the
        # workers that share it, so no request ever waits for a pool slot
        self._tasks = [asyncio.create_task(worker(clients[i % len(clients)]))
                       for i in range(n_workers)]
        try:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._tasks = []

    async def _do_pair(self, client: httpx.AsyncClient | None, cid: str, run: int,
                       preflight: bool) -> None:
        # the pair's budget of calls holds across the pre-flight and the run of one session
        while self._pair_calls.get((cid, run), 0) < int(self.options.max_calls_per_pair):
            if self.stop_token.is_set() or self._writer.error is not None:
                return
            call_no = self._pair_calls.get((cid, run), 0) + 1
            self._pair_calls[(cid, run)] = call_no
            ok, finding, kind = await self._one_call(client, cid, run, call_no, preflight)
            if ok:
                return
            if finding and self.options.stop_on_finding:
                self.stop_token.set()
                return
            if kind in INVALID_KINDS and self.options.on_invalid == "keep-as-failed":
                return

    async def _one_call(self, client: httpx.AsyncClient | None, cid: str, run: int,
                        call_no: int, preflight: bool) -> tuple[bool, bool, str | None]:
        """One call with its retries. Returns (a draw was stored, a finding, failure kind)."""
        opts = self.options
        request_id = new_request_id()
        seed = _derive_seed(opts.seed, cid, run, call_no)
        req = ScreenRequest(request_id, cid, run, self._apps.get(cid, ""), seed)
        started = _now()
        t_call = time.monotonic()
        attempts = 0
        waited = 0.0
        raw: RawResult | None = None
        failure: CallFailed | None = None
        latency = None
        try:
            while True:
                attempts += 1
                if self._limiter is not None:
                    await self._limiter.wait()
                t0 = time.perf_counter()
                try:
                    raw = await self.screener.call(client, req)
                    latency = (time.perf_counter() - t0) * 1000.0
                    break
                except CallFailed as exc:
                    latency = (time.perf_counter() - t0) * 1000.0
                    if exc.retryable and attempts <= opts.max_retries:
                        delay = self._delay(attempts, exc.retry_after)
                        spent = time.monotonic() - t_call
                        if waited + delay > opts.retry_wait_total_s \
                                or spent + delay > opts.call_deadline_s:
                            asked = (f"the server asked to wait {exc.retry_after:g} s; "
                                     if exc.retry_after is not None else "")
                            failure = CallFailed(
                                f"{exc.message} — not retried again: {asked}the call has "
                                f"waited {waited:.0f} s over {spent:.0f} s, and waiting "
                                f"{delay:.0f} s more would pass retry_wait_total_s = "
                                f"{opts.retry_wait_total_s:g} s or call_deadline_s = "
                                f"{opts.call_deadline_s:g} s", status=exc.status,
                                payload=exc.payload)
                            break
                        with self._lock:
                            self._status = replace(self._status,
                                                   retries=self._status.retries + 1)
                        waited += delay
                        await asyncio.sleep(delay)
                        continue
                    failure = exc
                    break
                except (asyncio.CancelledError, KeyboardInterrupt):
                    raise
                except Exception as exc:  # noqa: BLE001 - an adapter bug must not kill the run
                    latency = (time.perf_counter() - t0) * 1000.0
                    failure = CallFailed(f"{type(exc).__name__}: {exc}")
                    break
        except asyncio.CancelledError:
            self._record(req, attempts, started, latency, None, None, "cancelled",
                         "cancelled by stop", None)
            raise
        if failure is not None:
            kind = _error_kind(failure)
            self._record(req, attempts, started, latency, failure.status, failure.payload,
                         "error", failure.message, None, kind=kind)
            if failure.finding:
                with self._lock:
                    if failure.message not in self._findings:
                        self._findings.append(failure.message)
            return False, failure.finding, kind
        if raw is None:  # unreachable: the loop ends with a result or a failure
            return False, False, None
        if raw.invalid in INVALID_KINDS:
            self._record(req, attempts, started, latency, raw.http_status, raw.payload,
                         raw.invalid, raw.invalid_detail or raw.invalid, raw)
            return False, False, raw.invalid
        try:
            parsed = self.screener.parse(raw)
        except ParseError as exc:
            kind = exc.kind if exc.kind in INVALID_KINDS else "parse_error"
            self._record(req, attempts, started, latency, raw.http_status, raw.payload,
                         kind, f"{_KIND_LABELS[kind]}: {exc}", raw)
            return False, False, kind
        except Exception as exc:  # noqa: BLE001 - any parser failure is a parse error, never a dead worker
            self._record(req, attempts, started, latency, raw.http_status, raw.payload,
                         "parse_error", f"parse error: {type(exc).__name__}", raw)
            return False, False, "parse_error"
        self._record(req, attempts, started, latency, raw.http_status, raw.payload, "ok",
                     None, raw, parsed)
        if preflight:
            with self._lock:
                self._preflight_latency.append((latency or 0.0) / 1000.0)
        return True, False, None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        opts = self.options
        if retry_after is not None:
            return min(max(retry_after, 0.0), opts.retry_after_cap_s) \
                + random.uniform(0, min(0.05 * max(retry_after, 0.0), 1.0))
        return random.uniform(0, min(opts.backoff_cap_s,
                                     opts.backoff_base_s * 2 ** (attempt - 1)))

    def _record(self, req: ScreenRequest, attempts: int, started: datetime,
                latency_ms: float | None, http_status: int | None, payload: str | None,
                status: str, error: str | None, raw: RawResult | None,
                parsed: Parsed | None = None, kind: str | None = None) -> None:
        payload = None if payload is None else scrub(payload)
        model = raw.model if raw is not None else None
        in_tok = raw.input_tokens if raw is not None else None
        out_tok = raw.output_tokens if raw is not None else None
        cached = raw.cached_input_tokens if raw is not None else None
        cost = self.prices.cost(model or self.frozen_model, in_tok, out_tok, cached)
        meta = None
        if raw is not None and raw.meta:
            meta = scrub(json.dumps({k: v for k, v in raw.meta.items() if v is not None},
                                    default=str, sort_keys=True))
        call = {
            "request_id": req.request_id, "candidate_id": req.candidate_id, "run": req.run,
            "attempts": attempts, "started_at": started, "finished_at": _now(),
            "latency_ms": latency_ms, "http_status": http_status, "status": status,
            "error": None if error is None else scrub(error), "raw_payload": payload,
            "payload_sha256": (None if payload is None
                               else hashlib.sha256(payload.encode("utf-8")).hexdigest()),
            "model": model, "input_tokens": in_tok, "output_tokens": out_tok,
            "cached_input_tokens": cached, "cost": cost,
            "seed": raw.seed if raw is not None and raw.seed is not None else req.seed,
            "source": "runner", "meta_json": meta,
        }
        draws: list[dict[str, Any]] = []
        if parsed is not None:
            for name, score in parsed.scores.items():
                draws.append({"candidate_id": req.candidate_id, "run": req.run,
                              "criterion": name, "score": score,
                              "request_id": req.request_id, "model": model,
                              "clipped": name in parsed.clipped})
            draws.append({"candidate_id": req.candidate_id, "run": req.run,
                          "criterion": "total", "score": parsed.total,
                          "request_id": req.request_id, "model": model,
                          "clipped": bool(parsed.clipped)})
        self._writer.put(call, draws)
        st_changes: dict[str, Any] = {}
        with self._lock:
            st = self._status
            st_changes["calls"] = st.calls + 1
            st_changes["cost"] = st.cost + (cost or 0.0)
            if status == "ok":
                st_changes["done"] = st.done + 1
                self._session_done += 1
                self._done_pairs.add((req.candidate_id, req.run))
                if model:
                    self._models.add(model)
            elif status == "cancelled":
                st_changes["cancelled"] = st.cancelled + 1
            else:
                if status in INVALID_KINDS:
                    st_changes["parse_errors"] = st.parse_errors + 1
                st_changes["errors"] = st.errors + 1
                label = kind or status
                self._failures[label] = self._failures.get(label, 0) + 1
                self._pair_failure[(req.candidate_id, req.run)] = label
                self._example.setdefault(label, payload if payload else (error or ""))
                st_changes["failures"] = tuple(sorted(self._failures.items(),
                                                      key=lambda kv: (-kv[1], kv[0])))
            trip = None
            if status != "cancelled":
                trip = self._breaker_check(status != "ok")
            if trip:
                self._breaker_msg = trip
                st_changes["breaker"] = trip
        self._update(**st_changes)
        if trip:
            self.stop_token.set()

    def _breaker_check(self, failed: bool) -> str | None:
        """Feed one finished call to the circuit breaker (under the lock); its paragraph when
        it trips, once."""
        opts = self.options
        if not opts.breaker or self._breaker_msg is not None:
            return None
        self._outcomes.append(failed)
        self._streak = self._streak + 1 if failed else 0
        first = self._outcomes[:self._window]
        why = None
        if len(self._outcomes) == self._window and \
                sum(first) >= opts.breaker_fail_share * len(first):
            why = (f"{sum(first)} of the first {len(first)} calls failed "
                   f"(breaker_fail_share = {opts.breaker_fail_share:g})")
        elif self._streak >= opts.breaker_consecutive:
            why = (f"{self._streak} calls in a row failed "
                   f"(breaker_consecutive = {opts.breaker_consecutive})")
        if why is None:
            return None
        return breaker_paragraph(why, dict(self._failures), self._example)


async def run_audit(store: Store, audit_id: str, screener: Any,
                    options: RunOptions | None = None, **kwargs: Any) -> RunStatus:
    """Convenience: ``await Runner(store, audit_id, screener, options, **kwargs).run()``."""
    return await Runner(store, audit_id, screener, options, **kwargs).run()


# ============================================================================ background
class RunHandle:
    """A run in a background thread, for the app (and the CLI).

    The thread owns its own event loop and HTTP client and never calls streamlit. The page
    polls :meth:`status` (or the database) from a ``st.fragment(run_every=…)``.

    Examples
    --------
    >>> handle = RunHandle(store, "eng-2291", screener, RunOptions(runs=15)).start()
    >>> handle.status().fraction        # poll
    >>> handle.stop(); handle.join()    # stop cleanly; start a new handle to resume
    """

    def __init__(self, store: Store, audit_id: str, screener: Any,
                 options: RunOptions | None = None, *, prices: PriceTable | None = None,
                 until: str = "all",
                 on_progress: Callable[[RunStatus], None] | None = None) -> None:
        self.audit_id = audit_id
        self.stop_token = StopToken()
        self._on_progress = on_progress
        self.runner = Runner(store, audit_id, screener, options, prices=prices,
                             stop=self.stop_token, until=until, progress=on_progress)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.result: RunStatus | None = None
        # Set when the run has ended. Waiting on an Event survives a Ctrl-C in the waiting
        # thread; Thread.join interrupted by KeyboardInterrupt can leave is_alive() False
        # while the thread still runs (CPython), and the store would be closed under it.
        self._done = threading.Event()

    def start(self) -> RunHandle:
        if self._thread is not None:
            raise GuardError("this run was started already; make a new handle to resume")
        self._thread = threading.Thread(target=self._main, name=f"run-{self.audit_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self.result = asyncio.run(self.runner.run())
        except BaseException as exc:  # noqa: BLE001 - kept for the page; the status says what happened
            self.error = exc
            st = self.runner.status()
            if st.state not in ("blocked", "failed"):
                state = "blocked" if isinstance(exc, GuardError) else "failed"
                self.runner._update(force=True, state=state, message=scrub(str(exc)))
        finally:
            self._done.set()

    def stop(self) -> None:
        """Ask the run to stop: in-flight calls are cancelled and recorded, writes flushed."""
        self.stop_token.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is None:
            return True
        return self._done.wait(timeout)

    def status(self) -> RunStatus:
        return self.runner.status()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._done.is_set()


class RunRegistry:
    """Process-wide handles by audit id (the app keeps one in ``st.cache_resource``)."""

    def __init__(self) -> None:
        self._handles: dict[str, RunHandle] = {}
        self._lock = threading.Lock()

    def start(self, store: Store, audit_id: str, screener: Any,
              options: RunOptions | None = None, **kwargs: Any) -> RunHandle:
        """Start (or resume) a run; refuses while one is running for the audit."""
        with self._lock:
            old = self._handles.get(audit_id)
            if old is not None and old.running:
                raise GuardError(f"a run of audit '{audit_id}' is already in progress")
            handle = RunHandle(store, audit_id, screener, options, **kwargs)
            self._handles[audit_id] = handle
        return handle.start()

    def get(self, audit_id: str) -> RunHandle | None:
        with self._lock:
            return self._handles.get(audit_id)

    def stop(self, audit_id: str) -> None:
        handle = self.get(audit_id)
        if handle is not None:
            handle.stop()

    def active(self) -> list[str]:
        with self._lock:
            return [a for a, h in self._handles.items() if h.running]


_REGISTRY = RunRegistry()


def registry() -> RunRegistry:
    """The process-wide :class:`RunRegistry`."""
    return _REGISTRY


# ============================================================================ guards
@dataclass(frozen=True)
class CacheVerdict:
    """The cache guard (SPEC §3.3): distinct raw payloads per candidate.

    ``cache_test`` is True when every candidate with ≥ 2 successful calls has exactly one
    distinct payload: the run measured a cache, not a screener, and statistics are withheld.
    ``single_payload`` lists the candidates with one distinct payload.
    """

    cache_test: bool
    candidates: int
    single_payload: tuple[str, ...]
    message: str
    table: pd.DataFrame = field(repr=False, compare=False, default_factory=pd.DataFrame)


def cache_verdict(store: Store, audit_id: str) -> CacheVerdict:
    """Count distinct raw payloads per candidate and give the verdict.

    The guard speaks only once every candidate with a successful call has at least two of them
    (SPEC §3.3: two payloads are the least that can differ); before that it says how many are
    judged so far.
    """
    counts = store.payload_counts(audit_id)
    judged = counts[counts["calls_with_payload"] >= 2]
    single = tuple(str(c) for c in judged.loc[judged["distinct_payloads"] == 1, "candidate_id"])
    n = len(judged)
    sample = max(len(counts), len(store.get_candidates(audit_id)))
    if n == 0 or n < sample:
        return CacheVerdict(False, n, (),
                            f"not judged yet: {n} of {sample} candidate(s) have the two "
                            "successful calls the cache guard needs",
                            counts)
    if len(single) == n:
        return CacheVerdict(True, n, single,
                            f"a cache test, not a variance test: every one of the {n} "
                            "candidates got byte-identical payloads on every run. Statistics "
                            "are withheld; turn off the result cache and run a new audit.",
                            counts)
    if single:
        return CacheVerdict(False, n, single,
                            f"{len(single)} of {n} candidates got one distinct payload on every "
                            f"run: {', '.join(single[:10])}{' …' if len(single) > 10 else ''}",
                            counts)
    return CacheVerdict(False, n, (), f"every one of the {n} candidates got varying payloads",
                        counts)


@dataclass(frozen=True)
class ModelPopulations:
    """Draws by reported model id (SPEC §3.1 alias / snapshot drift).

    ``split`` is True when any draw reports a model id different from the frozen one: those
    draws are a second population and must not be pooled silently with the frozen model's.
    """

    frozen_model: str
    split: bool
    table: pd.DataFrame
    message: str


def model_populations(store: Store, audit_id: str,
                      frozen_model: str | None = None) -> ModelPopulations:
    """Per reported model: draws (pairs), candidates, and whether it is the frozen one."""
    if frozen_model is None:
        frozen_model = str(store.get_audit(audit_id)["freeze"].get("model") or "")
    draws = store.load_draws(audit_id)
    totals = draws.drop_duplicates(["candidate_id", "run"])
    model = totals["model"].astype("object").where(totals["model"].notna(), "(not reported)")
    table = (pd.DataFrame({"model": model, "candidate_id": totals["candidate_id"]})
             .groupby("model", sort=True)
             .agg(draws=("candidate_id", "size"), candidates=("candidate_id", "nunique"))
             .reset_index())
    table["frozen"] = table["model"] == frozen_model
    others = table[(~table["frozen"]) & (table["model"] != "(not reported)")]
    if len(others):
        names = ", ".join(f"{m} ({d} draws)" for m, d in zip(others["model"], others["draws"]))
        msg = (f"the screener reported a model id other than the frozen '{frozen_model}': "
               f"{names}. Those draws are a second population (alias or snapshot drift); "
               "analyse them apart or re-run under one pinned snapshot.")
        return ModelPopulations(frozen_model, True, table, msg)
    return ModelPopulations(frozen_model, False, table,
                            "every draw reports the frozen model" if len(table) else "no draws")


# ============================================================================ estimates
def estimate_run(screener: Any, candidates: pd.DataFrame, runs: int, *,
                 completed: set[tuple[str, int]] | None = None, concurrency: int = 8,
                 latency_s: float | None = None, prices: PriceTable | None = None,
                 output_tokens_per_call: int | None = None,
                 rpm: float | None = None, max_calls_per_pair: int = 3) -> Estimate:
    """Calls, tokens, cost and wall time of the missing pairs.

    Input tokens come from each candidate's rendered prompt at ~4 characters per token; output
    tokens default to ``30 + 12·criteria`` per call. Cost uses ``prices`` for the screener's
    model (``None`` when the table has no price for it). Wall time is
    ``⌈calls / concurrency⌉ · latency`` (and no faster than ``rpm`` allows) and needs a
    latency, e.g. the pre-flight's median (:attr:`RunStatus.preflight_latency_s`).
    The worst case: every pair spends ``max_calls_per_pair`` calls (invalid answers re-called),
    each writing the adapter's ``max_tokens``.
    """
    done = completed or set()
    notes = ["token counts are estimates (about 4 characters a token)"]
    calls = 0
    in_tok = 0
    for r in candidates.itertuples():
        cid = str(r.candidate_id)
        app = getattr(r, "application", "") or ""
        if isinstance(app, float):
            app = ""
        missing = sum(1 for j in range(1, int(runs) + 1) if (cid, j) not in done)
        if not missing:
            continue
        prompt = screener.render_prompt(str(app), cid, "0" * 32)
        calls += missing
        in_tok += missing * max(1, math.ceil(len(prompt) / 4))
    n_crit = len(getattr(screener, "criteria", ()) or ())
    max_tokens = getattr(screener, "max_tokens", None)
    per_out = output_tokens_per_call or (30 + 12 * max(n_crit, 1))
    if max_tokens:
        per_out = min(per_out, int(max_tokens))
    out_tok = calls * per_out
    model = getattr(screener, "model", None)
    cost = worst_cost = None
    worst_calls = calls * int(max_calls_per_pair)
    table = prices or PriceTable()
    if table.get(model) is not None:
        cost = table.cost(model, in_tok, out_tok, 0)
        per_in = in_tok / calls if calls else 0
        worst_cost = table.cost(model, int(worst_calls * per_in),
                                worst_calls * int(max_tokens or per_out), 0)
        notes.append("cost assumes no prompt-cache reads (an upper bound when caching is on)")
    elif getattr(screener, "kind", "") == "simulated":
        cost = worst_cost = 0.0
    else:
        notes.append(f"no price for '{model}' in the price table: add it to get a cost")
    c = max(1, int(concurrency))
    wall = wall_time(calls, c, latency_s, rpm)
    if latency_s is not None:
        notes.append("wall time assumes no retries")
    else:
        notes.append("wall time needs a latency: run the pre-flight first")
    return Estimate(calls, in_tok, out_tok, cost, wall, latency_s, c, tuple(notes),
                    worst_calls=worst_calls, worst_cost=worst_cost)
