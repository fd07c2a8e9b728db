"""The ``anthropic`` adapter: the Messages API over plain HTTP (no SDK).

* No ``temperature`` / ``top_p`` / ``top_k`` unless the freeze sheet says sampling is settable
  for this model and records them (recent Claude models reject them with HTTP 400; such a 400 is
  a finding, never retried — :meth:`AnthropicScreener.retryable_http` is its retry rule).
* The rubric prefix (the system prompt) may carry ``cache_control`` (prompt caching): prefix
  reuse does not remove sampling variance, and cached reads bill at a fraction of the input rate.
* Structured answers: with ``response_format = "json_schema"`` (the default when every
  criterion has its max) the rubric schema is the ``input_schema`` of one tool the model is
  forced to call (``tool_choice``); the answer is that tool call's input. ``max_tokens`` is always
  sent; ``stop_reason = "max_tokens"`` is a *truncated* answer, ``"refusal"`` a *refused* one.
* Records the reported ``model``, the ``request-id`` response header and usage, with
  ``cache_read_input_tokens`` as cached input. ``input_tokens`` stored = uncached input + cache
  reads + cache writes, so that it counts every input token as the other adapters do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

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
from core.screeners.options import ChatOptions
from core.screeners.parsing import ParseSpec
from core.screeners.prompts import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROMPT,
    DEFAULT_SYSTEM,
    render_template,
    rubric_text,
)
from core.screeners.schema import SCHEMA_NAME, default_response_format, rubric_schema

__all__ = ["ANTHROPIC_VERSION", "AnthropicOptions", "AnthropicScreener"]

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicOptions(ChatOptions):
    """``[screener]`` with ``kind = "anthropic"``."""

    kind: Literal["anthropic"] = "anthropic"
    base_url: str = Field(
        "https://api.anthropic.com", title="Base URL", description="Calls go to …/v1/messages",
        json_schema_extra={"placeholder": "https://api.anthropic.com", "columns": 1,
                           "order": -1})
    prompt_caching: bool = Field(
        True, title="Prompt caching of the rubric prefix",
        description="Marks the system prompt for caching: cached reads bill at a fraction of "
                    "the input rate (prefix reuse does not remove sampling variance).")


class AnthropicScreener(Screener):
    """POST ``{base_url}/v1/messages``."""

    kind = "anthropic"
    title = "Anthropic Messages API"
    order = 20
    Options = AnthropicOptions
    uses_http = True

    def __init__(self, *, model: str, base_url: str = "https://api.anthropic.com",
                 criteria: tuple[Criterion, ...] = (), parse: ParseSpec | None = None,
                 prompt_template: str = DEFAULT_PROMPT,
                 system_template: str | None = DEFAULT_SYSTEM, api_key: str | None = None,
                 api_key_env: str | None = None, response_format: str | None = None,
                 schema_total: bool = False,
                 sampling: Mapping[str, float] | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, prompt_caching: bool = True) -> None:
        super().__init__(model=model, criteria=criteria, parse=parse)
        self.base_url = base_url.rstrip("/")
        self.prompt_template = prompt_template
        self.system_template = system_template
        self._api_key = api_key
        self.api_key_env = api_key_env
        self.response_format = response_format or default_response_format(self.criteria)
        self.schema_style = "anthropic-tool"
        self.schema = (rubric_schema(self.criteria, total=schema_total)
                       if self.response_format == "json_schema" else None)
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.max_tokens = int(max_tokens)
        self.prompt_caching = prompt_caching

    @classmethod
    def from_options(cls, options: AnthropicOptions, context: BuildContext
                     ) -> AnthropicScreener:
        model = options.model_id(context)
        base_url = options.checked_url(options.base_url, "base_url") or ""
        api_key = options.api_key(context)
        return cls(model=model, base_url=base_url, criteria=context.criteria,
                   parse=options.parse_spec(),
                   prompt_template=options.prompt_text(context.base_dir),
                   system_template=options.system_text(context.base_dir), api_key=api_key,
                   sampling=context.sampling(), max_tokens=options.max_tokens,
                   prompt_caching=options.prompt_caching, api_key_env=options.api_key_env,
                   response_format=options.effective_response_format(),
                   schema_total=options.schema_total)

    @classmethod
    def answer_fields(cls, options: AnthropicOptions,
                      criteria: tuple[Criterion, ...]) -> dict[str, Any]:
        return options.answer_fields(criteria, "anthropic-tool")

    def retryable_http(self, status: int, text: str) -> bool:
        """The default rule, and an overloaded or internal-error body whatever its status
        (the API may report overload inside a 4xx or 200-then-error reply; inspect_ai's
        Anthropic provider retries it too)."""
        low = text[:2000].lower()
        return super().retryable_http(status, text) or (
            "overloaded_error" in low or "internal server error" in low)

    @property
    def url(self) -> str:
        base = self.base_url
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def _values(self, application: str, candidate_id: str, request_id: str) -> dict[str, str]:
        return {"application": application, "rubric": rubric_text(self.criteria),
                "candidate_id": candidate_id, "request_id": request_id}

    def body(self, request: ScreenRequest) -> dict[str, Any]:
        v = self._values(request.application, request.candidate_id, request.request_id)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user",
                          "content": render_template(self.prompt_template, v)}],
        }
        if self.system_template:
            block: dict[str, Any] = {"type": "text",
                                     "text": render_template(self.system_template, v)}
            if self.prompt_caching:
                block["cache_control"] = {"type": "ephemeral"}
            body["system"] = [block]
        if self.schema is not None:
            body["tools"] = [{"name": SCHEMA_NAME,
                              "description": "Record the rubric scores of this application.",
                              "input_schema": self.schema}]
            body["tool_choice"] = {"type": "tool", "name": SCHEMA_NAME}
        body.update(self.sampling)
        return body

    async def call(self, client: HttpClient | None, request: ScreenRequest) -> RawResult:
        if client is None:
            raise CallFailed("the anthropic screener needs an HTTP client")
        headers = {"anthropic-version": ANTHROPIC_VERSION, "X-Request-ID": request.request_id}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        resp = await post_json(client, self.url, self.body(request), headers,
                               self.call_limits, self.retryable_http)
        try:
            data = resp.json()
            blocks = data["content"]
            tool = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
            if self.schema is not None and tool:
                text = json.dumps(tool[0].get("input"))
            else:
                text = "".join(str(b.get("text", "")) for b in blocks
                               if isinstance(b, dict) and b.get("type") == "text")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CallFailed("the response is not a Messages API reply (no content blocks)",
                             status=resp.status_code, payload=resp.text) from None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        uncached = as_count(usage.get("input_tokens"))
        read = as_count(usage.get("cache_read_input_tokens")) or 0
        written = as_count(usage.get("cache_creation_input_tokens")) or 0
        stop = data.get("stop_reason")
        invalid = detail = None
        if stop == "max_tokens":
            invalid = "truncated"
            detail = f"stop_reason = \"max_tokens\": the answer hit max_tokens = {self.max_tokens}"
        elif stop == "refusal":
            invalid, detail = "refused", "stop_reason = \"refusal\""
        return RawResult(
            payload=text, invalid=invalid, invalid_detail=detail,
            http_status=resp.status_code,
            model=None if data.get("model") is None else str(data.get("model"))[:200],
            input_tokens=None if uncached is None else uncached + read + written,
            output_tokens=as_count(usage.get("output_tokens")),
            cached_input_tokens=read if usage else None,
            meta={"provider_request_id": resp.headers.get("request-id"),
                  "response_id": data.get("id"), "stop_reason": data.get("stop_reason"),
                  "cache_creation_input_tokens": written},
        )

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        v = self._values(application, candidate_id, request_id)
        parts = [render_template(self.system_template, v)] if self.system_template else []
        parts.append(render_template(self.prompt_template, v))
        return "\n".join(parts)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "sampling": self.sampling,
                "response_format": self.response_format, "schema": self.schema,
                "max_tokens": self.max_tokens, "prompt_caching": self.prompt_caching}
