"""The one small interface every screener adapter implements, and the HTTP plumbing they share.

An adapter turns one :class:`ScreenRequest` (one application, one run, one request id) into one
:class:`RawResult` (the screener's answer text plus what the provider reported about the call),
and parses that text into scores with :meth:`Screener.parse`::

    raw = await screener.call(client, request)      # may raise CallFailed
    parsed = screener.parse(raw)                    # may raise ParseError

Errors are classified here, once, for every HTTP adapter (PITFALLS "HTTP and model APIs"):

* 408 / 409 / 429 / 5xx, timeouts and transport errors → :class:`CallFailed` with
  ``retryable=True`` and the server's ``retry-after-ms`` / ``Retry-After`` hint;
* any other 4xx → ``retryable=False, finding=True``: a 400 such as "temperature is not supported
  for this model" is a fact about the harness, not noise, and is never retried.

Secrets (API keys) live only in adapter objects and in the process-wide scrub list; every error
text that leaves an adapter goes through :func:`scrub`.
"""

from __future__ import annotations

import abc
import email.utils
import json
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.parsing import Parsed, ParseSpec, parse_scores

__all__ = [
    "RETRY_STATUSES",
    "CallFailed",
    "RawResult",
    "ScreenRequest",
    "Screener",
    "parse_retry_after",
    "post_json",
    "register_secret",
    "render_template",
    "resolve_api_key",
    "rubric_text",
    "scrub",
]

#: HTTP statuses that are retried (with backoff); every other 4xx is a finding.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})

_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
REDACTED = "[redacted]"


def register_secret(value: str | None) -> None:
    """Add ``value`` to the process-wide list of strings :func:`scrub` removes."""
    if value and len(value) >= 4:
        with _SECRETS_LOCK:
            _SECRETS.add(value)


def scrub(text: Any) -> str:
    """``text`` as a string with every registered secret replaced by ``[redacted]``."""
    out = "" if text is None else str(text)
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for s in secrets:
        if s in out:
            out = out.replace(s, REDACTED)
    return out


def resolve_api_key(env_name: str | None, secrets: Mapping[str, Any] | None = None) -> str | None:
    """The API key named ``env_name``: from ``secrets`` (Streamlit secrets) first, else the env.

    Returns ``None`` when no name is configured (a local server without auth). The key's value
    is registered for scrubbing and never appears in a message.

    Raises
    ------
    InputError
        When a name is configured but neither source has it.
    """
    if not env_name:
        return None
    value = None
    if secrets is not None and env_name in secrets:
        value = secrets[env_name]
    if value is None:
        value = os.environ.get(env_name)
    if not value:
        raise InputError(f"the API key variable '{env_name}' is not set: export it in the "
                         "environment (or add it to Streamlit secrets) before running "
                         "(field 'api_key_env')")
    register_secret(str(value))
    return str(value)


@dataclass(frozen=True)
class ScreenRequest:
    """One call: one application, one run, one fresh request id."""

    request_id: str
    candidate_id: str
    run: int
    application: str
    seed: int


@dataclass
class RawResult:
    """What one call returned.

    ``payload`` is the screener's answer text — for chat APIs the message content, not the
    envelope (whose response id and timestamp differ on every call and would hide a cache).
    Token counts: ``input_tokens`` includes cached input, ``cached_input_tokens`` is the
    cached part.
    """

    payload: str
    http_status: int | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    seed: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class CallFailed(Exception):
    """A call that returned no usable answer.

    Parameters
    ----------
    message : str
        Already scrubbed of secrets.
    status : int, optional
        HTTP status (``None`` for timeouts and transport errors).
    retryable : bool
        Whether backoff-and-retry may help (408/409/429/5xx, timeouts).
    retry_after : float, optional
        Seconds the server asked to wait.
    finding : bool
        A non-retried 4xx: a fact about the harness to show the user.
    payload : str, optional
        The response body, scrubbed, for the call record.
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None, finding: bool = False,
                 payload: str | None = None) -> None:
        super().__init__(scrub(message))
        self.message = scrub(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.finding = finding
        self.payload = None if payload is None else scrub(payload)


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
                    headers: Mapping[str, str]) -> httpx.Response:
    """POST ``body`` as JSON; return a 2xx response or raise a classified :class:`CallFailed`.

    No ``asyncio.wait_for`` here: the client's own timeouts apply (PITFALLS: cancelling a
    request that waits for a pool slot leaks the slot in httpx 0.28).
    """
    try:
        resp = await client.post(url, json=body, headers=dict(headers))
    except httpx.TimeoutException as exc:
        raise CallFailed(f"timeout ({type(exc).__name__}) calling {url}",
                         retryable=True) from None
    except httpx.TransportError as exc:
        raise CallFailed(f"transport error ({type(exc).__name__}: {exc}) calling {url}",
                         retryable=True) from None
    if resp.status_code < 300:
        return resp
    text = resp.text
    detail = _error_detail(text)
    if resp.status_code in RETRY_STATUSES or resp.status_code >= 500:
        raise CallFailed(f"HTTP {resp.status_code}: {detail}", status=resp.status_code,
                         retryable=True, retry_after=parse_retry_after(resp.headers),
                         payload=text)
    raise CallFailed(f"HTTP {resp.status_code} (not retried; a finding about the harness): "
                     f"{detail}", status=resp.status_code, finding=True, payload=text)


def _error_detail(text: str, limit: int = 300) -> str:
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error", data)
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])[:limit]
            if isinstance(err, str):
                return err[:limit]
    except (json.JSONDecodeError, ValueError):
        pass
    return text.strip().replace("\n", " ")[:limit] or "(empty body)"


def rubric_text(criteria: tuple[Criterion, ...]) -> str:
    """The rubric as lines for a prompt: ``- technical_skills: 0-30 points (weight 1)``."""
    lines = []
    for c in criteria:
        mx = "?" if c.max_points is None else f"{c.max_points:g}"
        lines.append(f"- {c.name}: 0-{mx} points (weight {c.weight:g})")
    return "\n".join(lines)


def render_template(template: str, values: Mapping[str, Any]) -> str:
    """Replace ``{name}`` for the known names only; every other brace is left as written.

    ``str.format`` would choke on the JSON examples prompts usually contain.
    """
    out = template
    for key, val in values.items():
        out = out.replace("{" + key + "}", str(val))
    return out


class Screener(abc.ABC):
    """Base class of the adapters.

    Subclasses set ``kind`` and implement :meth:`call`. ``uses_http`` tells the engine whether
    to open an ``httpx.AsyncClient``. ``model`` is the model id sent (the frozen one).
    """

    kind = "base"
    uses_http = False

    def __init__(self, *, model: str, criteria: tuple[Criterion, ...] = (),
                 parse: ParseSpec | None = None) -> None:
        self.model = model
        self.criteria = tuple(criteria)
        self.parse_spec = parse or ParseSpec()

    @abc.abstractmethod
    async def call(self, client: httpx.AsyncClient | None,
                   request: ScreenRequest) -> RawResult:
        """One call of the screener on one application (the adapter's whole job)."""

    def parse(self, raw: RawResult) -> Parsed:
        """Scores from the answer text (raises :class:`~core.screeners.parsing.ParseError`)."""
        return parse_scores(raw.payload, self.criteria, self.parse_spec)

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        """The text sent for one application (for token estimates); adapters refine it."""
        return application

    def describe(self) -> dict[str, Any]:
        """Settings safe to store with the audit (never a secret)."""
        return {"kind": self.kind, "model": self.model, "parse": self.parse_spec.to_dict()}

    def __repr__(self) -> str:  # never print a key
        return f"<{type(self).__name__} kind={self.kind} model={self.model!r}>"
