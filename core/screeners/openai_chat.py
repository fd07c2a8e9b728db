"""The ``openai_chat`` adapter: chat completions at any OpenAI-compatible base URL.

vLLM, llama.cpp's server, Ollama, LM Studio and hosted APIs all speak it. The answer is the
message content (JSON extracted tolerantly, code fences included); the envelope's ``model``,
``system_fingerprint`` and ``usage`` are recorded.

Never a fixed ``seed``: a fixed seed can make every replication identical and erase the variance
being measured. With ``seed_per_draw`` a different seed goes with every call (and is recorded);
otherwise none is sent. ``temperature`` / ``top_p`` are sent only when the freeze sheet says
sampling is settable and records them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from core.freeze import Criterion
from core.screeners.base import (
    CallFailed,
    RawResult,
    Screener,
    ScreenRequest,
    post_json,
    render_template,
    rubric_text,
)
from core.screeners.parsing import ParseSpec

__all__ = ["DEFAULT_PROMPT", "DEFAULT_SYSTEM", "OpenAIChatScreener"]

DEFAULT_SYSTEM = (
    "You are a screening assistant. Score the application against this rubric and answer with "
    "one JSON object only, one key per criterion with its integer score, plus \"total\".\n"
    "Rubric:\n{rubric}")
DEFAULT_PROMPT = "Application:\n{application}"


class OpenAIChatScreener(Screener):
    """POST ``{base_url}/chat/completions``."""

    kind = "openai-chat"
    uses_http = True

    def __init__(self, *, base_url: str, model: str, criteria: tuple[Criterion, ...] = (),
                 parse: ParseSpec | None = None, prompt_template: str = DEFAULT_PROMPT,
                 system_template: str | None = DEFAULT_SYSTEM, api_key: str | None = None,
                 json_mode: bool = True, seed_per_draw: bool = False,
                 sampling: Mapping[str, float] | None = None, max_tokens: int | None = None,
                 extra_body: Mapping[str, Any] | None = None) -> None:
        super().__init__(model=model, criteria=criteria, parse=parse)
        self.base_url = base_url.rstrip("/")
        self.prompt_template = prompt_template
        self.system_template = system_template
        self._api_key = api_key
        self.json_mode = json_mode
        self.seed_per_draw = seed_per_draw
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})

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
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update(self.sampling)
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        if self.seed_per_draw:
            body["seed"] = int(request.seed)
        else:
            body.pop("seed", None)
        return body

    async def call(self, client: httpx.AsyncClient | None, request: ScreenRequest) -> RawResult:
        if client is None:
            raise CallFailed("the openai-chat screener needs an HTTP client")
        headers = {"X-Request-ID": request.request_id}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = self.body(request)
        resp = await post_json(client, self.url, body, headers)
        try:
            data = resp.json()
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise CallFailed("the response is not a chat completion (no "
                             "choices[0].message.content)", status=resp.status_code,
                             payload=resp.text) from None
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return RawResult(
            payload=content if isinstance(content, str) else str(content),
            http_status=resp.status_code,
            model=data.get("model"),
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            cached_input_tokens=details.get("cached_tokens"),
            seed=body.get("seed"),
            meta={"system_fingerprint": data.get("system_fingerprint"),
                  "response_id": data.get("id"),
                  "provider_request_id": resp.headers.get("x-request-id")},
        )

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        return "\n".join(m["content"] for m in self.messages(application, candidate_id,
                                                              request_id))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "json_mode": self.json_mode,
                "seed_per_draw": self.seed_per_draw, "sampling": self.sampling,
                "max_tokens": self.max_tokens}
