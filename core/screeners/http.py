"""The HTTP plumbing the HTTP adapters share: one size- and deadline-bounded POST.

Errors are classified by the calling adapter's retry rule (PITFALLS "HTTP and model APIs"):
:func:`post_json` raises :class:`~core.screeners.base.CallFailed` with ``retryable`` from the
rule it is given (:meth:`core.screeners.base.Screener.retryable_http`; by default 408 / 409 /
425 / 429 / 5xx) and the server's ``retry-after-ms`` / ``Retry-After`` hint; timeouts and
transport errors are retryable; any other 4xx is ``finding=True`` — a 400 such as "temperature
is not supported for this model" is a fact about the harness, not noise, and is never retried.

The client is an ``aiohttp.ClientSession`` (made by :func:`core.run.clients.make_client`):
at a fixed latency its CPU per request is about a sixth of httpx's (0.43 against 2.4–2.7 ms on
the 2-core benchmark machine, benchmarks/RESULTS.md), which decides whether a run of 2,000
calls at concurrency 64 keeps up with the endpoint at all.
"""

from __future__ import annotations

import email.utils
import json
import math
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import aiohttp

from core.screeners.base import CallFailed, CallLimits

__all__ = ["RETRY_STATUSES", "HttpClient", "HttpReply", "default_retryable",
           "parse_retry_after", "post_json", "proxy_for", "tls"]

#: The HTTP client the adapters are handed (one per run, shared by its workers).
HttpClient = aiohttp.ClientSession

#: HTTP statuses retried by default (with backoff); every other 4xx is a finding.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})


def default_retryable(status: int, text: str) -> bool:
    """The default retry rule: :data:`RETRY_STATUSES` and every 5xx."""
    return status in RETRY_STATUSES or status >= 500


@dataclass
class HttpReply:
    """A fully read, size-checked HTTP response."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None



def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``Retry-After`` (seconds or date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            v = float(ms) / 1000.0
            if math.isfinite(v) and v >= 0:
                return v
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra:
        ra = ra.strip()
        try:
            v = float(ra)
            return v if math.isfinite(v) and v >= 0 else None
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(ra)
            except (TypeError, ValueError):
                return None
            if when is None:
                return None
            return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return None


async def post_json(client: HttpClient, url: str, body: Any,
                    headers: Mapping[str, str], limits: CallLimits | None = None,
                    retryable: Callable[[int, str], bool] = default_retryable) -> HttpReply:
    """POST ``body`` as JSON; return a 2xx reply or raise a classified :class:`CallFailed`.

    The body is streamed in and refused past ``limits.max_response_bytes`` or
    ``limits.deadline_s`` (checked as each chunk arrives: a server dripping one byte a second
    trips it). No ``asyncio.wait_for`` here: the session's own timeouts apply (a connect
    timeout and a read timeout between bytes, :func:`core.run.clients.make_client`).
    Redirects are not followed (a screener endpoint that redirects is a finding).
    """
    lim = limits or CallLimits()
    t0 = time.monotonic()
    try:
        # httpx's encoding (compact, UTF-8, no NaN: a NaN is no JSON and fails the call)
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode()
        async with client.post(url, data=data, headers=_with_json_type(headers),
                               allow_redirects=False, proxy=proxy_for(url),
                               ssl=tls() if url[:6].lower() == "https:" else True) as resp:
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_any():
                size += len(chunk)
                if size > lim.max_response_bytes:
                    resp.close()   # the rest is not read: the connection is dropped
                    raise CallFailed(f"the response from {url} is over "
                                     f"{lim.max_response_bytes:,} bytes (max_response_bytes); "
                                     "it was not read further", status=resp.status)
                if time.monotonic() - t0 > lim.deadline_s:
                    resp.close()
                    raise CallFailed(f"the call to {url} ran past its deadline of "
                                     f"{lim.deadline_s:g} s while the response was still "
                                     "arriving (call_deadline_s)", status=resp.status)
                chunks.append(chunk)
            reply = HttpReply(resp.status, resp.headers, b"".join(chunks))
    except TimeoutError as exc:  # aiohttp's ServerTimeoutError too
        raise CallFailed(f"timeout ({type(exc).__name__}) calling {url}",
                         retryable=True) from None
    except aiohttp.ClientError as exc:
        raise CallFailed(f"transport error ({type(exc).__name__}: {_transport_detail(exc)}) "
                         f"calling {url}", retryable=True) from None
    if reply.status_code < 300:
        return reply
    text = reply.text
    detail = _error_detail(text)
    if retryable(reply.status_code, text):
        raise CallFailed(f"HTTP {reply.status_code}: {detail}", status=reply.status_code,
                         retryable=True, retry_after=parse_retry_after(reply.headers),
                         payload=text)
    hint = _rejection_hint(reply.status_code, text, body)
    raise CallFailed(f"HTTP {reply.status_code} (not retried; a finding about the harness): "
                     f"{detail}{hint}", status=reply.status_code, finding=True, payload=text)


@lru_cache(maxsize=64)
def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (urllib's reading of ``*_PROXY`` and
    ``NO_PROXY``, as httpx does), or None; loopback is never proxied."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    if urllib.request.proxy_bypass_environment(host, proxies):
        return None
    return proxy


_TLS: list[ssl.SSLContext] = []


def tls() -> ssl.SSLContext:
    """A default, certificate-verifying context (certifi's roots, as httpx used), made once,
    at the first https request (~50 ms)."""
    if not _TLS:
        try:
            import certifi
            _TLS.append(ssl.create_default_context(cafile=certifi.where()))
        except ImportError:  # pragma: no cover - certifi is a dependency
            _TLS.append(ssl.create_default_context())
    return _TLS[0]


def _with_json_type(headers: Mapping[str, str]) -> Mapping[str, str]:
    """The headers with ``Content-Type: application/json`` unless they set their own."""
    for k in headers:
        if k.lower() == "content-type":
            return headers
    return {"Content-Type": "application/json", **headers}


def _transport_detail(exc: aiohttp.ClientError) -> str:
    """The error's words without the request it carries (never its headers: they hold keys)."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status}, {exc.message}"
    return str(exc) or type(exc).__name__


def _rejection_hint(status: int, text: str, body: Any) -> str:
    """One sentence naming the setting to change when a 400 is about the answer format or the
    output limit (the server's own words decide; nothing is guessed otherwise)."""
    if status not in (400, 422) or not isinstance(body, Mapping):
        return ""
    low = text.lower()
    if ("response_format" in body or "format" in body or "tools" in body) and any(
            w in low for w in ("response_format", "json_schema", "schema", "grammar", "format",
                               "tool")):
        return (" — the server rejects the structured-answer request: set [screener] "
                "schema_style to the shape it accepts (\"openai\", \"json-object-schema\", "
                "\"ollama\") or response_format = \"json_object\"")
    if "context" in low and any(w in low for w in ("exceed", "too long", "size", "length")):
        return (" — the prompt and the output limit do not fit the model's context: lower "
                "[screener] max_tokens, shorten the prompt, or give the server a larger "
                "context")
    if "max_tokens" in low or "max_completion_tokens" in low:
        return " — the server rejects the output limit: change [screener] max_tokens"
    return ""


def _error_detail(text: str, limit: int = 300) -> str:
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error", data)
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])[:limit]
            if isinstance(err, str):
                return err[:limit]
    except (json.JSONDecodeError, ValueError, RecursionError):
        pass
    return text.strip().replace("\n", " ")[:limit] or "(empty body)"
