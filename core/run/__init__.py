"""Step 3 — run N independent replications per candidate, store every call, guard the result.

The engine (:class:`core.run.engine.Runner`) drives a screener adapter (:mod:`core.screeners`)
over the missing ``(candidate, run)`` pairs of an audit:

* **Concurrency**: a fixed pool of ``concurrency`` workers (the semaphore) over one
  ``aiohttp.ClientSession`` whose connector has exactly as many connections, so no request ever
  waits for a connection slot (:mod:`core.run.clients`; aiohttp rather than httpx for its CPU
  per request, about a sixth of httpx's). No ``asyncio.wait_for`` around requests; the session's
  own timeouts (connect, and a long read between bytes: 120 s by default).
* **Retries** (tenacity's ``AsyncRetrying``, :mod:`core.run.retry`): 408/409/429/5xx, timeouts
  and transport errors, with exponential backoff and full jitter, honouring ``retry-after-ms``
  then ``Retry-After`` (capped); never another 4xx — that is a finding, shown to the user, and
  by default it stops the run. The ``rpm`` ceiling is aiolimiter's ``AsyncLimiter``.
* **One request id per call** (uuid4, sent as ``X-Request-ID`` and, for your own endpoint,
  ``Idempotency-Key``; retries of a call reuse it; it is the key of the call row).
* **Order**: rounds of runs, candidates shuffled in each round by a seeded generator, so
  candidates are interleaved and a stopped run leaves every candidate with about as many runs.
* **One writer**: a thread that batches call and draw rows into the store (every ``flush_s``
  seconds, sooner at ``batch_rows`` results), each batch one transaction, a call row and its
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
:func:`core.guards.cache_verdict` ("a cache test, not a variance test");
:func:`core.guards.model_populations` (reported model ≠ frozen model → a second population).

For the app: :class:`core.run.handle.RunHandle` runs the engine in a background thread (never
touching streamlit) with ``start()``, ``stop()``, ``status()``; :func:`core.run.handle.registry`
is the process-wide registry of handles. For the terminal: :mod:`core.run_cli`.

Modules, in the order of the method: :mod:`~core.run.options` (settings and prices),
:mod:`~core.run.engine` (plan, guards, pre-flight, workers, one call, its record),
:mod:`~core.run.retry` (retries and the rate limit), :mod:`~core.run.breaker`,
:mod:`~core.run.writer`, :mod:`~core.run.clients`, :mod:`~core.run.status`,
:mod:`~core.run.handle`.
"""
