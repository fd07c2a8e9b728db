"""The one small interface every screener adapter implements.

An adapter turns one :class:`ScreenRequest` (one application, one run, one request id) into one
:class:`RawResult` (the screener's answer text plus what the provider reported about the call),
and parses that text into scores with :meth:`Screener.parse`::

    raw = await screener.call(client, request)      # may raise CallFailed
    parsed = screener.parse(raw)                    # may raise ParseError

Each adapter is one class in one module of :mod:`core.screeners`, in the pattern of inspect_ai's
model providers: it names its ``kind``, declares its options as a pydantic model (``Options``,
see :mod:`core.screeners.options`), builds itself from them with one constructor shape
(:meth:`Screener.from_options`) and declares its own retry rule (:meth:`Screener.retryable_http`,
:meth:`Screener.should_retry`). Defining the class registers the kind
(:data:`core.screeners.registry.SCREENERS`); nothing else lists the kinds.

This module imports no pydantic: the engine and the pages that never build a screener load it.

Secrets (API keys) live only in adapter objects and in the process-wide scrub list; every error
text that leaves an adapter goes through :func:`scrub`.
"""

from __future__ import annotations

import abc
import base64
import math
import re
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from core.freeze import Criterion, FreezeSheet
from core.screeners.parsing import MAX_ANSWER_CHARS, Parsed, ParseSpec, parse_scores

if TYPE_CHECKING:
    from core.screeners.http import HttpClient

__all__ = [
    "REDACTED",
    "RETRY_STATUSES",
    "BuildContext",
    "CallFailed",
    "CallLimits",
    "RawResult",
    "ScreenRequest",
    "Screener",
    "as_count",
    "register_secret",
    "scrub",
]

#: HTTP statuses retried by default (with backoff); every other 4xx is a finding.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})

_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
_SECRET_RE: list[re.Pattern[str] | None] = [None]
REDACTED = "[redacted]"


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
    #: ``(payload, object)`` when the adapter decoded the payload as a JSON object already
    #: (http-json reads the reported model from it): :meth:`Screener.parse` then does not
    #: decode it again. Used only while ``payload`` is that very string; not copied by
    #: ``dataclasses.replace``.
    decoded: tuple[str, dict[str, Any]] | None = field(default=None, init=False, repr=False,
                                                       compare=False)


@dataclass(frozen=True)
class CallLimits:
    """Bounds of one call, set by the runner from its options.

    ``max_response_bytes``: a larger body is refused while it streams in (never read whole).
    ``deadline_s``: the call's total time; a server that drips bytes slower than the read
    timeout cannot hold a worker past it.
    """

    max_response_bytes: int = 2_000_000
    deadline_s: float = 300.0



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


@dataclass(frozen=True)
class BuildContext:
    """What every adapter is built with besides its options (one constructor shape).

    ``criteria`` the frozen rubric; ``sheet`` the freeze sheet (the model called unless the
    options name another, and the sampling parameters it records); ``seed`` the audit's seed;
    ``secrets`` Streamlit secrets (looked up before the environment for ``api_key_env``);
    ``base_dir`` the folder relative files (templates, a command's ``cwd``) resolve in.
    """

    criteria: tuple[Criterion, ...] = ()
    sheet: FreezeSheet | None = None
    seed: int = 0
    secrets: Mapping[str, Any] | None = None
    base_dir: Path = field(default_factory=lambda: Path("."))

    def sampling(self) -> dict[str, float]:
        """Sampling parameters to send: only when the sheet says they are settable and
        records them."""
        sheet = self.sheet
        if sheet is None or sheet.sampling != "settable":
            return {}
        out = {"temperature": sheet.temperature, "top_p": sheet.top_p, "top_k": sheet.top_k}
        return {k: v for k, v in out.items() if v is not None}


def as_count(value: Any) -> int | None:
    """A token count from a provider's usage block, or ``None`` when it is not a count."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 2**62 else None
    if isinstance(value, float) and math.isfinite(value) and 0 <= value < 2**62:
        return int(value)
    return None


class Screener(abc.ABC):
    """Base class of the adapters.

    A subclass sets ``kind`` (which registers it), ``title`` (the Run page's label), ``Options``
    (a :class:`core.screeners.options.ScreenerOptions` subclass with ``kind`` as its
    ``Literal`` tag), implements :meth:`from_options` and :meth:`call`, and may refine its retry
    rule. ``uses_http`` tells the engine whether to open an HTTP client session; ``model`` is
    the model id sent (the frozen one).
    """

    #: The ``kind`` of a config's ``[screener]`` table ("" = not a concrete adapter).
    kind: ClassVar[str] = ""
    #: The adapter's name on the Run page.
    title: ClassVar[str] = ""
    #: Its place in the Run page's list of kinds.
    order: ClassVar[int] = 100
    #: The pydantic model of its options (kept untyped here: no pydantic on the engine path).
    Options: ClassVar[Any] = None
    uses_http: ClassVar[bool] = False
    #: Whether the adapter runs code on this machine (operator opt-in, never a visitor's).
    runs_code: ClassVar[bool] = False
    #: Whether its answers may be invalid (parse errors, out of range): the invalid-answer
    #: policy then applies (a simulated screener always answers well).
    answers_may_be_invalid: ClassVar[bool] = True
    #: HTTP statuses this adapter retries (its retry rule, see :meth:`retryable_http`).
    retry_statuses: ClassVar[frozenset[int]] = RETRY_STATUSES
    #: Set by the runner from its options before any call.
    call_limits: CallLimits = CallLimits()

    def __init__(self, *, model: str, criteria: tuple[Criterion, ...] = (),
                 parse: ParseSpec | None = None) -> None:
        self.model = model
        self.criteria = tuple(criteria)
        self.parse_spec = parse or ParseSpec()

    # ------------------------------------------------------------------ building
    @classmethod
    @abc.abstractmethod
    def from_options(cls, options: Any, context: BuildContext) -> Screener:
        """The adapter from its validated ``Options`` and the build context (the one
        constructor shape every adapter shares). Reads the API key, if any."""

    @classmethod
    def answer_fields(cls, options: Any, criteria: tuple[Criterion, ...]) -> dict[str, Any]:
        """What the screener is asked to answer (``response_format``, ``schema_style``,
        ``answer_schema``, ``max_tokens``), from its options without building it (no key
        needed). These go into the freeze sheet: they change what is measured."""
        return {"response_format": None, "schema_style": None, "answer_schema": None,
                "max_tokens": None}

    @classmethod
    def endpoint(cls, options: Any) -> str:
        """Where its calls go, for the freeze sheet's ``endpoint`` (hashed with the sheet):
        the ``base_url`` or ``url`` the options set, else the kind."""
        given = getattr(options, "model_fields_set", set())
        for key in ("base_url", "url"):
            if key in given and getattr(options, key, None):
                return str(getattr(options, key))
        return cls.kind

    @classmethod
    def describe_code(cls, options: Any) -> str:
        """What a code-running adapter would run, in one line (printed before it runs)."""
        return f"a {cls.kind} screener"

    # ------------------------------------------------------------------ retry rule
    def retryable_http(self, status: int, text: str) -> bool:
        """Whether an HTTP error ``status`` (with response ``text``) is worth a retry with
        backoff: :attr:`retry_statuses` and every 5xx by default. Any other 4xx is a finding
        about the harness and is never retried."""
        return status in self.retry_statuses or status >= 500

    def should_retry(self, failure: BaseException) -> bool:
        """The engine's question after a failed call: retry it? (inspect_ai's
        ``ModelAPI.should_retry``.) True for a :class:`CallFailed` the adapter classified as
        retryable when it raised it (timeouts, transport errors, :meth:`retryable_http`)."""
        return isinstance(failure, CallFailed) and failure.retryable

    # ------------------------------------------------------------------ calling
    @abc.abstractmethod
    async def call(self, client: HttpClient | None,
                   request: ScreenRequest) -> RawResult:
        """One call of the screener on one application (the adapter's whole job)."""

    def parse(self, raw: RawResult) -> Parsed:
        """Scores from the answer text (raises :class:`~core.screeners.parsing.ParseError`)."""
        answer: Any = raw.payload
        memo = raw.decoded
        # the object json.loads made of this very text: what extract_json would return
        if memo is not None and memo[0] is answer and len(answer) <= MAX_ANSWER_CHARS:
            answer = memo[1]
        return parse_scores(answer, self.criteria, self.parse_spec)

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
