"""The ``openai_chat`` adapter: chat completions at any OpenAI-compatible base URL.

vLLM, llama.cpp's server, Ollama, LM Studio and hosted APIs all speak it. The answer is the
message content (JSON extracted tolerantly, code fences included); the envelope's ``model``,
``system_fingerprint`` and ``usage`` are recorded.

Structured answers: ``response_format`` (``json_schema`` — the rubric as a strict schema, the
default when every criterion has its max — ``json_object`` or ``none``) in the wire shape named
by ``schema_style`` (:mod:`core.screeners.schema`). Bounded output: ``max_tokens`` is always
sent (default :data:`DEFAULT_MAX_TOKENS`); an answer cut off by it (``finish_reason =
"length"``) is a *truncated* answer, a refusal (``message.refusal`` or ``finish_reason =
"content_filter"``) a *refused* one — both recorded as invalid answers, never parse errors.
llama.cpp's server may send ``content: null`` with a ``reasoning_content``: that is an empty
answer (a parse error), not a broken response.

Never a fixed ``seed``: a fixed seed can make every replication identical and erase the variance
being measured. With ``seed_per_draw`` a different seed goes with every call (and is recorded);
otherwise none is sent. ``temperature`` / ``top_p`` are sent only when the freeze sheet says
sampling is settable and records them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import (
    BuildContext,
    CallFailed,
    RawResult,
    Screener,
    ScreenRequest,
    as_count,
)
from core.screeners.http import HttpClient, post_json
from core.screeners.options import ChatOptions, config_only
from core.screeners.parsing import ParseSpec
from core.screeners.prompts import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROMPT,
    DEFAULT_SYSTEM,
    render_template,
    rubric_text,
)
from core.screeners.schema import (
    SCHEMA_STYLES,
    default_response_format,
    openai_response_fields,
    rubric_schema,
)

__all__ = ["OpenAIChatOptions", "OpenAIChatScreener"]


class OpenAIChatOptions(ChatOptions):
    """``[screener]`` with ``kind = "openai-chat"``."""

    kind: Literal["openai-chat"] = "openai-chat"
    base_url: str | None = Field(
        None, title="Base URL", description="The server's API root; calls go to "
        "…/chat/completions",
        json_schema_extra={"placeholder": "http://127.0.0.1:8000/v1", "columns": 1,
                           "order": -1})
    schema_style: Literal[SCHEMA_STYLES] = Field(  # type: ignore[valid-type]
        "openai", title="How the server takes a schema",
        description="The wire shape of the rubric schema.",
        json_schema_extra={"columns": 1, "choices": {
            "openai": "OpenAI shape: OpenAI, vLLM, llama.cpp server, Ollama /v1",
            "json-object-schema": "json_object + schema: llama-cpp-python",
            "ollama": "format field: Ollama's native API (its /v1 takes the OpenAI shape)"}})
    seed_per_draw: bool = Field(
        False, title="Send a different seed with every call",
        description="Never a fixed seed: one seed for every run can make the runs identical.")
    extra_body: dict[str, Any] | None = config_only(
        description="Extra fields merged into every request body.")
    json_mode: bool | None = config_only(
        description="Older setting: false means response_format = \"none\".")


class OpenAIChatScreener(Screener):
    """POST ``{base_url}/chat/completions``."""

    kind = "openai-chat"
    title = "OpenAI-compatible chat (vLLM, llama.cpp, Ollama, hosted APIs)"
    order = 10
    Options = OpenAIChatOptions
    uses_http = True
    #: The OpenAI SDK's rule: 408, 409, 429 and every 5xx.
    retry_statuses: ClassVar[frozenset[int]] = frozenset({408, 409, 425, 429})

    def __init__(self, *, base_url: str, model: str, criteria: tuple[Criterion, ...] = (),
                 parse: ParseSpec | None = None, prompt_template: str = DEFAULT_PROMPT,
                 system_template: str | None = DEFAULT_SYSTEM, api_key: str | None = None,
                 api_key_env: str | None = None, response_format: str | None = None,
                 schema_style: str = "openai", schema_total: bool = False,
                 seed_per_draw: bool = False, sampling: Mapping[str, float] | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS,
                 extra_body: Mapping[str, Any] | None = None) -> None:
        super().__init__(model=model, criteria=criteria, parse=parse)
        self.base_url = base_url.rstrip("/")
        self.prompt_template = prompt_template
        self.system_template = system_template
        self._api_key = api_key
        self.api_key_env = api_key_env
        self.response_format = response_format or default_response_format(self.criteria)
        self.schema_style = schema_style
        self.schema = (rubric_schema(self.criteria, total=schema_total)
                       if self.response_format == "json_schema" else None)
        self._format_fields = openai_response_fields(self.response_format, schema_style,
                                                     self.schema)
        self.seed_per_draw = seed_per_draw
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.max_tokens = int(max_tokens)
        self.extra_body = dict(extra_body or {})

    @classmethod
    def from_options(cls, options: OpenAIChatOptions, context: BuildContext
                     ) -> OpenAIChatScreener:
        model = options.model_id(context)
        if not options.base_url:
            raise InputError("the openai-chat screener needs base_url, e.g. "
                             "http://127.0.0.1:8000/v1 (field 'base_url')")
        base_url = options.checked_url(options.base_url, "base_url") or ""
        api_key = options.api_key(context)
        return cls(base_url=base_url, model=model,
                   criteria=context.criteria, parse=options.parse_spec(),
                   prompt_template=options.prompt_text(context.base_dir),
                   system_template=options.system_text(context.base_dir), api_key=api_key,
                   api_key_env=options.api_key_env,
                   response_format=options.effective_response_format(),
                   schema_style=options.schema_style, schema_total=options.schema_total,
                   seed_per_draw=options.seed_per_draw, sampling=context.sampling(),
                   max_tokens=options.max_tokens, extra_body=options.extra_body)

    @classmethod
    def answer_fields(cls, options: OpenAIChatOptions,
                      criteria: tuple[Criterion, ...]) -> dict[str, Any]:
        return options.answer_fields(criteria, options.schema_style)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _values(self, application: str, candidate_id: str, request_id: str) -> dict[str, str]:
        return {"application": application, "rubric": rubric_text(self.criteria),
                "candidate_id": candidate_id, "request_id": request_id}

    def messages(self, application: str, candidate_id: str = "",
                 request_id: str = "") -> list[dict[str, str]]:
        v = self._values(application, candidate_id, request_id)
        out = []
        if self.system_template:
            out.append({"role": "system", "content": render_template(self.system_template, v)})
        out.append({"role": "user", "content": render_template(self.prompt_template, v)})
        return out

    def body(self, request: ScreenRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages(request.application, request.candidate_id,
                                      request.request_id),
            **self.extra_body,
        }
        body.update(self._format_fields)
        body.update(self.sampling)
        body["max_tokens"] = self.max_tokens
        if self.seed_per_draw:
            body["seed"] = int(request.seed)
        else:
            body.pop("seed", None)
        return body

    async def call(self, client: HttpClient | None, request: ScreenRequest) -> RawResult:
        if client is None:
            raise CallFailed("the openai-chat screener needs an HTTP client")
        headers = {"X-Request-ID": request.request_id}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = self.body(request)
        resp = await post_json(client, self.url, body, headers, self.call_limits,
                               self.retryable_http)
        try:
            data = resp.json()
            choice = data["choices"][0]
            message = choice["message"]
            content = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise CallFailed("the response is not a chat completion (no "
                             "choices[0].message)", status=resp.status_code,
                             payload=resp.text) from None
        if not isinstance(data, dict):
            raise CallFailed("the response is not a chat completion", status=resp.status_code,
                             payload=resp.text)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details") or {}
        if not isinstance(details, dict):
            details = {}
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        refusal = message.get("refusal") if isinstance(message, dict) else None
        invalid = detail = None
        if finish == "length":
            invalid, detail = "truncated", (f"finish_reason = \"length\": the answer hit "
                                            f"max_tokens = {self.max_tokens}")
        elif refusal or finish == "content_filter":
            invalid = "refused"
            detail = (f"refusal: {str(refusal)[:200]}" if refusal
                      else "finish_reason = \"content_filter\"")
        if content is None:
            content = "" if not refusal else str(refusal)
        return RawResult(
            invalid=invalid, invalid_detail=detail,
            payload=content if isinstance(content, str) else json.dumps(content),
            http_status=resp.status_code,
            model=None if data.get("model") is None else str(data.get("model"))[:200],
            input_tokens=as_count(usage.get("prompt_tokens")),
            output_tokens=as_count(usage.get("completion_tokens")),
            cached_input_tokens=as_count(details.get("cached_tokens")),
            seed=body.get("seed"),
            meta={"system_fingerprint": data.get("system_fingerprint"),
                  "finish_reason": finish,
                  "response_id": data.get("id"),
                  "provider_request_id": resp.headers.get("x-request-id")},
        )

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        return "\n".join(m["content"] for m in self.messages(application, candidate_id,
                                                              request_id))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url,
                "response_format": self.response_format, "schema_style": self.schema_style,
                "schema": self.schema, "seed_per_draw": self.seed_per_draw,
                "sampling": self.sampling, "max_tokens": self.max_tokens}
