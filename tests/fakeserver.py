"""A real HTTP/1.1 screener server on 127.0.0.1 (random port) for the runner tests and benchmark.

A minimal keep-alive HTTP/1.1 implementation over asyncio streams, in its own thread and event
loop (or its own process: ``python -m tests.fakeserver --latency-ms 50`` prints the port), so
it is fast enough to measure the runner's overhead rather than its own. No mocks: the runner
talks to it over TCP with its real HTTP client.

It answers three shapes, by path:

* ``POST /score`` — your own endpoint: JSON body with ``candidate_id`` / ``application``; flat
  scores back;
* ``POST /v1/chat/completions`` — OpenAI-shaped (scores as JSON in the message content,
  optionally in a code fence);
* ``POST /v1/messages`` — Anthropic-shaped (rejects temperature/top_p/top_k with HTTP 400 for
  the models that do; ``request-id`` header; usage with cache reads).

Behaviour is set by :class:`Settings` (changeable while running with :meth:`FakeServer.set`):
stochastic by default; ``cache`` (byte-identical answer per application); flaky (500s, 429 with
``Retry-After`` / ``retry-after-ms``, slow replies past the client's timeout, malformed JSON); a
different reported model id after N answers; and what small real models do (``answer``: prose,
invented keys, out-of-range scores, deeply nested JSON; ``finish_reason = "length"``; a
refusal; ``content: null``; a 400 for a ``json_schema`` it does not take, in llama.cpp's error
shape; a body dripped one byte at a time; a huge body). With a ``json_schema`` response format it
answers only the schema's keys, as a grammar-constrained server does. Every request is logged (time, path, request id,
status, body) for the assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["FakeServer", "LogEntry", "Settings", "DEMO_RUBRIC"]

DEMO_RUBRIC = (("technical_skills", 30), ("experience", 25), ("projects", 25),
               ("communication", 20))
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            408: "Request Timeout", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}


@dataclass(frozen=True)
class Settings:
    latency_ms: float = 0.0
    p500: float = 0.0
    p429: float = 0.0
    retry_after: str | None = None          # Retry-After header value on 429
    retry_after_ms: str | None = None       # retry-after-ms header value on 429
    first_attempt_429: bool = False          # every request id's first attempt gets a 429
    pslow: float = 0.0
    slow_s: float = 2.0
    pmalformed: float = 0.0
    cache: bool = False                      # byte-identical answer per application
    model: str | None = None                 # reported model (None: echo the requested one)
    switch_model_after: int | None = None    # after N answers, report switch_model
    switch_model: str = "fake-model-2"
    reject_sampling_for: tuple[str, ...] = ("claude-opus-5", "claude-opus-4-8",
                                            "claude-opus-4-7", "claude-sonnet-5",
                                            "claude-fable-5")
    status_override: int | None = None       # always answer this status
    echo_auth_on_error: bool = False         # error bodies quote the credentials received
    echo_transform: str = ""                 # "", "base64" or "upper": how they are quoted
    fence: bool = False                      # wrap chat content in a ```json fence
    rubric: tuple[tuple[str, float], ...] = DEMO_RUBRIC
    seed: int = 0
    answer: str = "scores"                   # scores | prose | invented | out_of_range | nested
    finish_reason: str = "stop"              # e.g. "length" (chat) — "max_tokens" for messages
    refusal: bool = False                    # message.refusal / stop_reason "refusal"
    content_null: bool = False               # content: null (llama.cpp with a reasoning model)
    reject_schema: bool = False              # 400 on response_format json_schema (llama.cpp's words)
    drip_s: float = 0.0                      # seconds between body bytes (a dripping server)
    huge_bytes: int = 0                      # pad the body to this many bytes


@dataclass
class LogEntry:
    t: float
    path: str
    request_id: str | None
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class FakeServer:
    """The server; ``with FakeServer(latency_ms=5) as srv: srv.url …``."""

    def __init__(self, **settings: Any) -> None:
        self.settings = Settings(**settings)
        self.log: list[LogEntry] = []
        self._lock = threading.Lock()
        self._rng = random.Random(self.settings.seed)
        self._answers = 0
        self._cache: dict[str, str] = {}
        self._seen_ids: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0
        self.keep_log = True
        self.arrivals = 0          # requests received (logged entries come when answered)

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, **changes: Any) -> None:
        with self._lock:
            self.settings = replace(self.settings, **changes)

    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._main, name="fakeserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start")
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def _shutdown() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            # let the handlers see their cancellation before the loop stops
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()
        asyncio.run_coroutine_threadsafe(_shutdown(), loop)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0") or 0)
                raw = await reader.readexactly(n) if n else b""
                status, extra, body = await self._respond(method, path, headers, raw)
                data = body.encode("utf-8")
                if self.settings.huge_bytes and status == 200:
                    data = data + b" " * max(0, self.settings.huge_bytes - len(data))
                out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
                       "Content-Type: application/json", f"Content-Length: {len(data)}"]
                out += [f"{k}: {v}" for k, v in extra.items()]
                head_bytes = ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")
                drip = self.settings.drip_s
                if drip and status == 200:
                    writer.write(head_bytes)
                    await writer.drain()
                    for i in range(len(data)):
                        writer.write(data[i:i + 1])
                        await writer.drain()
                        await asyncio.sleep(drip)
                else:
                    writer.write(head_bytes + data)
                    await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            try:
                writer.close()
            except RuntimeError:
                pass

    def _record(self, path: str, rid: str | None, status: int, body: Any,
                headers: dict[str, str]) -> None:
        if self.keep_log:
            with self._lock:
                self.log.append(LogEntry(time.monotonic(), path, rid, status, body, headers))

    async def _respond(self, method: str, path: str, headers: dict[str, str],
                       raw: bytes) -> tuple[int, dict[str, str], str]:
        s = self.settings
        rid = headers.get("x-request-id")
        with self._lock:
            self.arrivals += 1
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            self._record(path, rid, 400, raw[:200], headers)
            return 400, {}, json.dumps({"error": {"message": "body is not JSON"}})
        if s.latency_ms:
            await asyncio.sleep(s.latency_ms / 1000.0)
        with self._lock:
            r = self._rng.random()
            first = rid is not None and rid not in self._seen_ids
            if rid is not None:
                self._seen_ids.add(rid)
        auth = headers.get("authorization") or headers.get("x-api-key") or ""
        if s.echo_transform == "base64":
            import base64
            auth = base64.b64encode(auth.removeprefix("Bearer ").encode()).decode()
        elif s.echo_transform == "upper":
            auth = auth.upper()
        err_extra = f" (received credentials: {auth})" if s.echo_auth_on_error else ""
        if s.status_override:
            self._record(path, rid, s.status_override, body, headers)
            return s.status_override, {}, json.dumps(
                {"error": {"message": f"forced status{err_extra}"}})
        if method != "POST":
            return 404, {}, json.dumps({"error": {"message": "POST only"}})
        if path.endswith("/messages"):
            bad = [k for k in ("temperature", "top_p", "top_k") if k in body]
            model = str(body.get("model", ""))
            if bad and any(model.startswith(m) for m in s.reject_sampling_for):
                self._record(path, rid, 400, body, headers)
                return 400, {"request-id": "req_" + uuid.uuid4().hex[:16]}, json.dumps(
                    {"type": "error", "error": {"type": "invalid_request_error",
                     "message": f"{bad[0]}: not supported for model {model}"}})
        rf = body.get("response_format") if isinstance(body, dict) else None
        if s.reject_schema and isinstance(rf, dict) and rf.get("type") == "json_schema":
            self._record(path, rid, 400, body, headers)
            return 400, {}, json.dumps({"error": {
                "code": 400, "type": "invalid_request_error",
                "message": "Either \"json_schema\" or \"grammar\" can be specified, but not "
                           "both"}})
        if (s.first_attempt_429 and first) or r < s.p429:
            extra = {}
            if s.retry_after is not None:
                extra["Retry-After"] = s.retry_after
            if s.retry_after_ms is not None:
                extra["retry-after-ms"] = s.retry_after_ms
            self._record(path, rid, 429, body, headers)
            return 429, extra, json.dumps({"error": {"message": f"rate limited{err_extra}"}})
        r -= s.p429
        if 0 <= r < s.p500:
            self._record(path, rid, 500, body, headers)
            return 500, {}, json.dumps({"error": {"message": f"internal error{err_extra}"}})
        r -= s.p500
        if 0 <= r < s.pslow:
            self._record(path, rid, 0, body, headers)
            await asyncio.sleep(s.slow_s)
        r -= s.pslow
        malformed = 0 <= r < s.pmalformed
        content = self._answer(path, body)
        if malformed:
            content = content[: max(1, len(content) // 2)] + " …truncated"
        with self._lock:
            self._answers += 1
            n = self._answers
        requested = str(body.get("model") or "fake-model-1")
        model = s.model or requested
        if s.switch_model_after is not None and n > s.switch_model_after:
            model = s.switch_model
        self._record(path, rid, 200, body, headers)
        if path.endswith("/chat/completions"):
            if s.fence:
                content = f"Here are the scores:\n```json\n{content}\n```"
            message: dict[str, Any] = {"role": "assistant",
                                       "content": None if s.content_null else content}
            if s.refusal:
                message["refusal"] = "I can't help with scoring this person."
            return 200, {"x-request-id": "srv-" + uuid.uuid4().hex[:12]}, json.dumps({
                "id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion",
                "created": int(time.time()), "model": model,
                "system_fingerprint": "fp_fake01",
                "choices": [{"index": 0, "finish_reason": s.finish_reason,
                             "message": message}],
                "usage": {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160,
                          "prompt_tokens_details": {"cached_tokens": 64}}})
        if path.endswith("/messages"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}]
            forced = (body.get("tool_choice") or {}).get("name") if isinstance(
                body.get("tool_choice"), dict) else None
            if forced:
                try:
                    blocks = [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:8],
                               "name": forced, "input": json.loads(content)}]
                except json.JSONDecodeError:
                    pass
            stop = ("refusal" if s.refusal else
                    "max_tokens" if s.finish_reason in ("length", "max_tokens") else
                    "tool_use" if forced else "end_turn")
            return 200, {"request-id": "req_" + uuid.uuid4().hex[:16]}, json.dumps({
                "id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant",
                "model": model, "stop_reason": stop,
                "content": blocks,
                "usage": {"input_tokens": 30, "output_tokens": 40,
                          "cache_read_input_tokens": 90, "cache_creation_input_tokens": 0}})
        answer = (json.loads(content) if not malformed
                  and s.answer in ("scores", "out_of_range", "invented") else None)
        if answer is None:
            return 200, {}, content
        answer["model"] = model
        return 200, {}, json.dumps(answer)

    def _answer(self, path: str, body: dict[str, Any]) -> str:
        """The scores JSON for this request: stochastic, or cached per application."""
        s = self.settings
        if path.endswith("/score"):
            key = str(body.get("candidate_id") or body.get("application") or "")
        elif path.endswith("/messages"):
            key = json.dumps(body.get("messages"), sort_keys=True)
        else:
            key = json.dumps(body.get("messages"), sort_keys=True)
        if s.cache:
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
        h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        base_rng = random.Random(h)
        with self._lock:
            noise = random.Random(self._rng.random())
        scores: dict[str, Any] = {}
        for name, mx in s.rubric:
            mean = base_rng.uniform(0.35, 0.9) * mx
            x = round(min(max(mean + noise.gauss(0, 0.08 * mx), 0), mx))
            scores[name] = x
        schema = _schema_of(body)
        if s.answer == "out_of_range":
            scores = {name: int(mx * 3 + noise.randint(1, 9)) for name, mx in s.rubric}
        if schema is not None:          # a grammar-constrained server: the schema's keys only
            props = schema.get("properties") or {}
            scores = {k: min(v, props[k].get("maximum", v)) if s.answer != "out_of_range"
                      else v for k, v in scores.items() if k in props}
            if "total" in props:
                scores["total"] = sum(v for k, v in scores.items() if k != "total")
        else:
            scores["total"] = sum(scores[n] for n, _ in s.rubric if n in scores)
            scores["rationale"] = noise.choice(["solid", "mixed evidence", "thin portfolio",
                                                "strong systems work"])
        content = json.dumps(scores)
        if s.answer == "prose":
            content = (f"This candidate looks {noise.choice(['strong', 'promising', 'weak'])} "
                       "overall; I would rate the technical skills highly and the rest average.")
        elif s.answer == "invented":
            content = json.dumps({"title": "Senior Backend Engineer",
                                  "Technical Skills": noise.randint(5, 30), "verdict": "hire"})
        elif s.answer == "nested":
            content = "[" * 100_000 + "]" * 100_000
        if s.cache:
            with self._lock:
                content = self._cache.setdefault(key, content)
        return content


def _schema_of(body: Any) -> dict[str, Any] | None:
    """The JSON schema a request asks for, in any of the shapes the servers take."""
    if not isinstance(body, dict):
        return None
    rf = body.get("response_format")
    if isinstance(rf, dict):
        if rf.get("type") == "json_schema":
            return (rf.get("json_schema") or {}).get("schema")
        if rf.get("type") == "json_object" and isinstance(rf.get("schema"), dict):
            return rf["schema"]
    if isinstance(body.get("format"), dict):
        return body["format"]
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        return tools[0].get("input_schema")
    return None


def main() -> None:  # pragma: no cover - used by the benchmark
    ap = argparse.ArgumentParser(description="Run the fake screener server in this process.")
    ap.add_argument("--latency-ms", type=float, default=50.0)
    args = ap.parse_args()
    srv = FakeServer(latency_ms=args.latency_ms)
    srv.keep_log = False
    srv.start()
    print(srv.port, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
