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
import base64
import email.utils
import ipaddress
import json
import math
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.parsing import Parsed, ParseSpec, parse_scores

__all__ = [
    "KEY_ENV_ALLOW_VAR",
    "RETRY_STATUSES",
    "CallFailed",
    "CallLimits",
    "HttpReply",
    "RawResult",
    "ScreenRequest",
    "Screener",
    "as_count",
    "check_base_url",
    "check_key_env_name",
    "is_loopback",
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
_SECRET_RE: list[re.Pattern[str] | None] = [None]
REDACTED = "[redacted]"

#: Environment variable holding extra allowed ``api_key_env`` names (comma-separated), for a
#: key whose variable name does not look like one (an operator's decision, never a config's).
KEY_ENV_ALLOW_VAR = "AUDIT_API_KEY_ENV_ALLOW"
_KEY_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_KEY")
#: Parts of a variable name that mark a credential for something other than a model API
#: (cloud accounts, databases, source hosting, signing keys): refused unless allow-listed.
_KEY_ENV_DENIED = ("SECRET", "PASSWORD", "PASSWD", "PRIVATE", "ACCESS_KEY", "AWS_", "AZURE_",
                   "GCP_", "GOOGLE_APPLICATION", "GITHUB", "GH_", "GITLAB", "SSH", "SESSION",
                   "DATABASE", "DB_", "PG", "MYSQL", "REDIS", "SIGNING", "ENCRYPTION", "NPM_",
                   "PYPI", "DOCKER", "SLACK", "STRIPE")


def _variants(value: str) -> set[str]:
    """The key and the transformations a server may echo it in: base64 (plain and URL-safe,
    of the key and of ``user:key`` / ``key:`` Basic-auth pairs) and percent-encoding."""
    out = {value, urllib.parse.quote(value, safe="")}
    for raw in (value, f":{value}", f"{value}:"):
        b = raw.encode("utf-8")
        for enc in (base64.b64encode(b), base64.urlsafe_b64encode(b)):
            text = enc.decode("ascii")
            out.add(text)
            out.add(text.rstrip("="))
    return {v for v in out if len(v) >= 4}


def register_secret(value: str | None) -> None:
    """Add ``value`` (and its base64 / percent-encoded forms) to the process-wide list of
    strings :func:`scrub` removes, in any letter case."""
    if value and len(value) >= 4:
        with _SECRETS_LOCK:
            _SECRETS.update(_variants(value))
            _SECRET_RE[0] = re.compile(
                "|".join(re.escape(s) for s in sorted(_SECRETS, key=len, reverse=True)),
                re.IGNORECASE)


def scrub(text: Any) -> str:
    """``text`` as a string with every registered secret replaced by ``[redacted]``.

    Matches ignore letter case, so an upper- or lower-cased echo of a key is removed too.
    """
    out = "" if text is None else str(text)
    with _SECRETS_LOCK:
        pattern = _SECRET_RE[0]
    if pattern is None or not out:
        return out
    return pattern.sub(REDACTED, out)


def check_key_env_name(name: str, allow: Any = None) -> str:
    """``name`` when it may name an API key; :class:`InputError` otherwise.

    A key variable ends in ``_API_KEY``, ``_TOKEN`` or ``_KEY`` and names no credential of
    another kind (``AWS_SECRET_ACCESS_KEY``, ``GITHUB_TOKEN``, ``DATABASE_…``), unless it is
    listed in ``allow`` or in the environment variable ``AUDIT_API_KEY_ENV_ALLOW``
    (comma-separated) — the operator's allow-list. The check keeps a config from elsewhere from
    sending an unrelated secret to its ``base_url``.
    """
    allowed = {a.strip() for a in os.environ.get(KEY_ENV_ALLOW_VAR, "").split(",") if a.strip()}
    allowed |= {str(a) for a in (allow or ())}
    if name in allowed:
        return name
    up = name.upper()
    if not up.endswith(_KEY_ENV_SUFFIXES) or any(d in up for d in _KEY_ENV_DENIED):
        raise InputError(f"api_key_env '{name}' does not look like a model API key variable "
                         "(a name ending in _API_KEY, _TOKEN or _KEY, not a cloud, database or "
                         "source-hosting credential): rename the variable, or let the operator "
                         f"allow it in {KEY_ENV_ALLOW_VAR} (field 'api_key_env')")
    return name


def is_loopback(host: str | None) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if not host:
        return False
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


_CRED_PARAMS = {"key", "api-key", "api_key", "apikey", "access_token", "token", "auth",
                "password", "secret", "sig", "signature", "code"}


def check_base_url(url: str, field_name: str = "base_url") -> str:
    """A screener URL that is safe to send applications and a key to.

    Refused: no scheme/host; credentials in the URL (``user:pw@host``, ``?api-key=…``,
    ``?key=…``) — name a variable in ``api_key_env`` instead; plain ``http://`` to a host that
    is not loopback (the key and the applications would cross the network in clear text).
    """
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
        host = parts.hostname
    except ValueError:
        raise InputError(f"'{field_name}' is not a URL (field '{field_name}')") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InputError(f"'{field_name}' must be an http(s) URL with a host, e.g. "
                         f"http://127.0.0.1:8080/v1 (field '{field_name}')")
    query = {k.lower() for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)}
    if parts.username or parts.password or query & _CRED_PARAMS:
        raise InputError(f"'{field_name}' carries credentials (user:password@ or a key "
                         "parameter): remove them and name the environment variable that holds "
                         f"the key in api_key_env (field '{field_name}')")
    if parts.scheme == "http" and not is_loopback(host):
        raise InputError(f"'{field_name}' uses plain http:// to {host}, which is not this "
                         "machine: use https:// (plain http is allowed for 127.0.0.1 / "
                         f"localhost only) (field '{field_name}')")
    return str(url).strip()


def resolve_api_key(env_name: str | None, secrets: Mapping[str, Any] | None = None) -> str | None:
    """The API key named ``env_name``: from ``secrets`` (Streamlit secrets) first, else the env.

    Returns ``None`` when no name is configured (a local server without auth). The key's value
    is registered for scrubbing and never appears in a message.

    Raises
    ------
    InputError
        When a name is configured but neither source has it, or the name does not look like
        a model API key (:func:`check_key_env_name`).
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
    check_key_env_name(env_name)
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
    #: ``"truncated"`` (cut off by the output limit: finish_reason "length", stop_reason
    #: "max_tokens"), ``"refused"`` (a refusal or content filter) or ``None`` (a full answer).
    invalid: str | None = None
    #: Why, in the provider's words (e.g. ``finish_reason = "length"``).
    invalid_detail: str | None = None


@dataclass(frozen=True)
class CallLimits:
    """Bounds of one call, set by the runner from its options.

    ``max_response_bytes``: a larger body is refused while it streams in (never read whole).
    ``deadline_s``: the call's total time; a server that drips bytes slower than the read
    timeout cannot hold a worker past it.
    """

    max_response_bytes: int = 2_000_000
    deadline_s: float = 300.0


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
                    headers: Mapping[str, str], limits: CallLimits | None = None) -> HttpReply:
    """POST ``body`` as JSON; return a 2xx reply or raise a classified :class:`CallFailed`.

    The body is streamed in and refused past ``limits.max_response_bytes`` or
    ``limits.deadline_s`` (checked as each chunk arrives: a server dripping one byte a second
    trips it). No ``asyncio.wait_for`` here: the client's own timeouts apply (PITFALLS:
    cancelling a request that waits for a pool slot leaks the slot in httpx 0.28).
    """
    lim = limits or CallLimits()
    t0 = time.monotonic()
    try:
        async with client.stream("POST", url, json=body, headers=dict(headers)) as resp:
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
    if reply.status_code in RETRY_STATUSES or reply.status_code >= 500:
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


def as_count(value: Any) -> int | None:
    """A token count from a provider's usage block, or ``None`` when it is not a count."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 2**62 else None
    if isinstance(value, float) and math.isfinite(value) and 0 <= value < 2**62:
        return int(value)
    return None


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
    #: Whether the adapter runs code on this machine (operator opt-in, never a visitor's).
    runs_code = False
    #: Set by the runner from its options before any call.
    call_limits: CallLimits = CallLimits()

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

    def key_destination(self) -> tuple[str, str] | None:
        """``(variable name, host)`` when the adapter sends an API key, else ``None``: the run
        states it before the first call."""
        env = getattr(self, "api_key_env", None)
        url = getattr(self, "url", None)
        if not env or not getattr(self, "_api_key", None) or not url:
            return None
        return str(env), str(urllib.parse.urlsplit(str(url)).netloc.rsplit("@", 1)[-1])

    def __repr__(self) -> str:  # never print a key
        return f"<{type(self).__name__} kind={self.kind} model={self.model!r}>"
