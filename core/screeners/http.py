"""The HTTP plumbing the HTTP adapters share: one size- and deadline-bounded POST.

Errors are classified by the calling adapter's retry rule (PITFALLS "HTTP and model APIs"):
:func:`post_json` raises :class:`~core.screeners.base.CallFailed` with ``retryable`` from the
rule it is given (:meth:`core.screeners.base.Screener.retryable_http`; by default 408 / 409 /
425 / 429 / 5xx) and the server's ``retry-after-ms`` / ``Retry-After`` hint; timeouts and
transport errors are retryable; any other 4xx is ``finding=True`` — a 400 such as "temperature
is not supported for this model" is a fact about the harness, not noise, and is never retried.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from core.screeners.base import CallFailed, CallLimits

__all__ = ["RETRY_STATUSES", "HttpReply", "default_retryable", "parse_retry_after",
           "post_json"]

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


async def post_json(client: httpx.AsyncClient, url: str, body: Any,
                    headers: Mapping[str, str], limits: CallLimits | None = None,
                    retryable: Callable[[int, str], bool] = default_retryable) -> HttpReply:
    """POST ``body`` as JSON; return a 2xx reply or raise a classified :class:`CallFailed`.

    The body is streamed in and refused past ``limits.max_response_bytes`` or
    ``limits.deadline_s`` (checked as each chunk arrives: a server dripping one byte a second
    trips it). No ``asyncio.wait_for`` here: the client's own timeouts apply (PITFALLS:
    cancelling a request that waits for a pool slot leaks the slot in httpx 0.28).
    """
    lim = limits or CallLimits()
    t0 = time.monotonic()
    try:
        # what ``client.stream`` does, without its async context manager (a generator frame
        # that every resumption of the call passes through)
        request = client.build_request("POST", url, json=body, headers=headers)
        resp = await client.send(request, stream=True)
        try:
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > lim.max_response_bytes:
                    raise CallFailed(f"the response from {url} is over "
                                     f"{lim.max_response_bytes:,} bytes (max_response_bytes); "
                                     "it was not read further", status=resp.status_code)
                if time.monotonic() - t0 > lim.deadline_s:
                    raise CallFailed(f"the call to {url} ran past its deadline of "
                                     f"{lim.deadline_s:g} s while the response was still "
                                     "arriving (call_deadline_s)", status=resp.status_code)
                chunks.append(chunk)
            reply = HttpReply(resp.status_code, resp.headers, b"".join(chunks))
        finally:
            await resp.aclose()
    except httpx.TimeoutException as exc:
        raise CallFailed(f"timeout ({type(exc).__name__}) calling {url}",
                         retryable=True) from None
    except httpx.TransportError as exc:
        raise CallFailed(f"transport error ({type(exc).__name__}: {exc}) calling {url}",
                         retryable=True) from None
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
