"""The engine: :class:`Runner` drives a screener adapter over the missing pairs of an audit.

Plan (:func:`plan_pairs`: rounds of runs, candidates shuffled per round by a seeded
generator), guards before any call (side-effect clearance, what the sheet froze about the
answers), the determinism pre-flight, ``concurrency`` workers, one call with its retries
(:mod:`core.run.retry`), its record (one writer, :mod:`core.run.writer`) and the circuit
breaker (:mod:`core.run.breaker`). See :mod:`core.run` for the whole method.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from core import guards
from core.errors import AuditError, GuardError, InputError, StoreError
from core.freeze import FreezeSheet
from core.invalid import KIND_NAMES
from core.run.breaker import Breaker, error_kind
from core.run.clients import make_client, new_request_id
from core.run.options import MAX_CANDIDATES, PriceTable, RunOptions
from core.run.retry import CallResult, Retrier
from core.run.status import RunStatus, StopToken
from core.run.writer import Writer
from core.screeners.base import CallLimits, RawResult, ScreenRequest, scrub
from core.screeners.http import HttpClient
from core.screeners.parsing import INVALID_KINDS, Parsed, ParseError
from core.store import Store

__all__ = ["Runner", "plan_pairs"]


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
        for i in rng.permutation(len(ids)).tolist():
            pair = (ids[i], run)
            if pair not in done:
                out.append(pair)
    return out


def _derive_seed(seed: int, candidate_id: str, run: int, call_no: int) -> int:
    h = hashlib.sha256(f"{seed}|{candidate_id}|{run}|{call_no}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


#: The counters of :class:`RunStatus` that calls add to.
_COUNTERS = ("done", "calls", "errors", "parse_errors", "retries", "cancelled", "cost")
#: States in which :meth:`Runner.status` reads the counters and the clock afresh.
_LIVE = ("preflight", "running", "stopping")


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)



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
    client : aiohttp.ClientSession, optional
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
                 client: HttpClient | None = None,
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
        # the counters of the status, kept apart and read into it by _snapshot (a call adds to
        # them; building a new RunStatus for each call would cost more than the call's record)
        self._counts: dict[str, Any] = dict.fromkeys(_COUNTERS, 0)
        self._counts["cost"] = 0.0
        self._last_emit = 0.0
        self._t0 = time.monotonic()
        self._session_done = 0
        self._models: set[str] = set()
        self._findings: list[str] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
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
        self._breaker = Breaker(self.options)
        self._deadline_hit = False
        self._example: dict[str, str] = {}   # kind → one raw answer (or error) of that kind

    # ------------------------------------------------------------------ status
    def status(self) -> RunStatus:
        """The status now (while the run works), or as the run left it."""
        with self._lock:
            if self._status.state in _LIVE:
                return self._snapshot()
            return self._status

    def _snapshot(self) -> RunStatus:
        """The counters, the clock and the findings read into the status (under the lock)."""
        counts = self._counts
        elapsed = time.monotonic() - self._t0
        remaining = self._status.total - counts["done"]
        eta = None
        if remaining <= 0:
            eta = 0.0
        elif self._session_done > 0 and elapsed > 0:
            eta = remaining * elapsed / self._session_done
        self._status = replace(
            self._status, **counts, elapsed_s=elapsed, eta_s=eta,
            findings=tuple(self._findings), reported_models=tuple(sorted(self._models)),
            failures=tuple(sorted(self._failures.items(), key=lambda kv: (-kv[1], kv[0]))))
        return self._status

    def _update(self, force: bool = False, **changes: Any) -> None:
        """Apply ``changes`` to the status; tell ``progress`` (at most ~10 times a second
        unless ``force``)."""
        now = time.monotonic()
        emit = self._progress is not None and (force or now - self._last_emit >= 0.1)
        if not (emit or changes):
            return
        with self._lock:
            for key in [k for k in changes if k in self._counts]:
                self._counts[key] = changes.pop(key)
            if changes:
                self._status = replace(self._status, **changes)
            st = self._snapshot()
        if emit and self._progress is not None:
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
        self._breaker = Breaker(self.options, pairs_left=len(all_pairs) - done)
        self._retrier = Retrier(self.options, self._count_retry)
        self._apps = apps
        writer = Writer(self.store, self.audit_id, self.options.batch_rows,
                        self.options.flush_s)
        self._writer = writer
        own_client: HttpClient | None = None
        client = self._client
        if client is None and getattr(self.screener, "uses_http", False):
            client = own_client = make_client(self.options)
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
                guard = await self._preflight(client, apps, strata, completed)
            if guard is None and self.until == "all" and not self.stop_token.is_set():
                self._update(force=True, state="running")
                completed = completed | self._new_pairs()
                pairs = plan_pairs(apps, runs, self.options.seed, completed)
                await self._drive(client, pairs)
        finally:
            if deadline is not None:
                deadline.cancel()
            if own_client is not None:
                await own_client.close()
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
        if self._breaker.message is not None:
            state, msg = "stopped", self._breaker.message
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
            label = KIND_NAMES.get(kind, kind) if kind else "not called (stopped before them)"
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
    async def _preflight(self, client: HttpClient | None, apps: dict[str, str],
                         strata: dict[str, Any],
                         completed: set[tuple[str, int]]) -> GuardError | None:
        band = sorted(c for c, s in strata.items() if s == "band")
        cid = band[0] if band else min(apps)
        # never more pre-flight runs than the audit's runs: no candidate gets extra draws
        n_pre = min(3, int(self.options.runs))
        judged, stop = guards.determinism_verdict(self.store.payload_counts(self.audit_id),
                                                  cid, n_pre)
        if judged:               # resumed: the verdict comes from the stored payloads
            return GuardError(stop) if stop else None
        todo = [(cid, r) for r in range(1, n_pre + 1) if (cid, r) not in completed]
        await self._drive(client, todo, preflight=True)
        self._writer.flush()
        with self._lock:
            lat = list(self._preflight_latency)
        self._update(force=True, preflight_latency_s=(float(np.median(lat)) if lat else None))
        _, stop = guards.determinism_verdict(self.store.payload_counts(self.audit_id), cid,
                                             n_pre)
        if stop:
            return GuardError(stop)
        with self._lock:
            reported = sorted(self._models)
        stop = guards.preflight_model_verdict(reported, self.frozen_model)
        return GuardError(stop) if stop else None

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

    async def _drive(self, client: HttpClient | None,
                     pairs: list[tuple[str, int]], preflight: bool = False) -> None:
        if not pairs or self.stop_token.is_set():
            return
        it = iter(pairs)
        ended: list[bool] = []
        n_workers = max(1, min(int(self.options.concurrency), len(pairs)))

        async def worker(client: HttpClient | None) -> None:
            for cid, run in it:
                if self.stop_token.is_set():
                    return
                await self._do_pair(client, cid, run, preflight)
            if not ended:          # the last pairs are in flight: write what waits meanwhile
                ended.append(True)
                self._writer.write_soon()

        # the client's connector holds as many connections as there are workers, so no
        # request ever waits for a connection slot
        self._tasks = [asyncio.create_task(worker(client)) for _ in range(n_workers)]
        try:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._tasks = []

    async def _do_pair(self, client: HttpClient | None, cid: str, run: int,
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

    def _count_retry(self) -> None:
        with self._lock:
            self._counts["retries"] += 1

    async def _one_call(self, client: HttpClient | None, cid: str, run: int,
                        call_no: int, preflight: bool) -> tuple[bool, bool, str | None]:
        """One call with its retries. Returns (a draw was stored, a finding, failure kind)."""
        request_id = new_request_id()
        seed = _derive_seed(self.options.seed, cid, run, call_no)
        req = ScreenRequest(request_id, cid, run, self._apps.get(cid, ""), seed)
        started = _now()
        res = CallResult()
        try:
            await self._retrier.call(self.screener, client, req, res)
        except asyncio.CancelledError:
            self._record(req, res.attempts, started, res.latency_ms, None, None, "cancelled",
                         "cancelled by stop", None)
            raise
        attempts, latency, raw, failure = res.attempts, res.latency_ms, res.raw, res.failure
        if failure is not None:
            kind = error_kind(failure)
            self._record(req, attempts, started, latency, failure.status, failure.payload,
                         "error", failure.message, None, kind=kind)
            if failure.finding:
                with self._lock:
                    if failure.message not in self._findings:
                        self._findings.append(failure.message)
            return False, failure.finding, kind
        if raw is None:  # unreachable: a call ends with a result or a failure
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
                         kind, f"{KIND_NAMES[kind]}: {exc}", raw)
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
        with self._lock:
            counts = self._counts
            counts["calls"] += 1
            counts["cost"] += cost or 0.0
            if status == "ok":
                counts["done"] += 1
                self._session_done += 1
                self._done_pairs.add((req.candidate_id, req.run))
                if model:
                    self._models.add(model)
            elif status == "cancelled":
                counts["cancelled"] += 1
            else:
                if status in INVALID_KINDS:
                    counts["parse_errors"] += 1
                counts["errors"] += 1
                label = kind or status
                self._failures[label] = self._failures.get(label, 0) + 1
                self._pair_failure[(req.candidate_id, req.run)] = label
                self._example.setdefault(label, payload if payload else (error or ""))
            trip = None
            if status != "cancelled":
                trip = self._breaker.feed(status != "ok", self._failures, self._example)
        if trip:
            self._update(force=True, breaker=trip)
            self.stop_token.set()
        else:
            self._update()
