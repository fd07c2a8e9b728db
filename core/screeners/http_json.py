"""The ``http_json`` adapter: POST a JSON body built from a template to your own endpoint.

The body template is any JSON value; every string in it may contain ``{application}``,
``{candidate_id}``, ``{request_id}``, ``{run}``, ``{seed}`` (replaced inside the string, so the
application text is JSON-escaped correctly whatever it contains). A string that is exactly one
placeholder is replaced by the value itself. The answer is the whole response body (or the part
at ``parse.payload_path``); the reported model is read at ``model_path`` when given.
"""

from __future__ import annotations

import json
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
)
from core.screeners.parsing import ParseError, ParseSpec, get_path

__all__ = ["HttpJsonScreener", "fill_body"]

DEFAULT_BODY = {"candidate_id": "{candidate_id}", "request_id": "{request_id}",
                "application": "{application}"}


def fill_body(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with placeholders filled in every string (recursively)."""
    if isinstance(template, str):
        for key, val in values.items():
            if template == "{" + key + "}":
                return val
        return render_template(template, values)
    if isinstance(template, Mapping):
        return {k: fill_body(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_body(v, values) for v in template]
    return template


class HttpJsonScreener(Screener):
    """POST ``body_template`` to ``url``; scores from the JSON response."""

    kind = "http-json"
    uses_http = True

    def __init__(self, *, url: str, model: str, criteria: tuple[Criterion, ...] = (),
                 parse: ParseSpec | None = None, body_template: Any = None,
                 headers: Mapping[str, str] | None = None, api_key: str | None = None,
                 api_key_header: str = "Authorization", model_path: str | None = None,
                 api_key_env: str | None = None) -> None:
        super().__init__(model=model, criteria=criteria, parse=parse)
        self.url = url
        self.api_key_env = api_key_env
        self.body_template = DEFAULT_BODY if body_template is None else body_template
        self.headers = dict(headers or {})
        self._api_key = api_key
        self.api_key_header = api_key_header
        self.model_path = model_path

    def _headers(self, request: ScreenRequest) -> dict[str, str]:
        h = {"X-Request-ID": request.request_id, "Idempotency-Key": request.request_id,
             **self.headers}
        if self._api_key:
            h[self.api_key_header] = (f"Bearer {self._api_key}"
                                      if self.api_key_header.lower() == "authorization"
                                      else self._api_key)
        return h

    def _values(self, request: ScreenRequest) -> dict[str, Any]:
        return {"application": request.application, "candidate_id": request.candidate_id,
                "request_id": request.request_id, "run": request.run, "seed": request.seed,
                "model": self.model}

    async def call(self, client: httpx.AsyncClient | None, request: ScreenRequest) -> RawResult:
        if client is None:
            raise CallFailed("the http-json screener needs an HTTP client")
        body = fill_body(self.body_template, self._values(request))
        resp = await post_json(client, self.url, body, self._headers(request),
                               self.call_limits)
        text = resp.text
        model = None
        if self.model_path:
            try:
                model = str(get_path(json.loads(text), self.model_path))[:200]
            except (json.JSONDecodeError, ParseError, ValueError, RecursionError):
                model = None
        return RawResult(payload=text, http_status=resp.status_code, model=model,
                         meta={"provider_request_id": resp.headers.get("x-request-id")})

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        req = ScreenRequest(request_id or "x" * 32, candidate_id, 1, application, 0)
        return json.dumps(fill_body(self.body_template, self._values(req)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "url": self.url, "model_path": self.model_path,
                "body_template": self.body_template,
                "headers": sorted(self.headers)}  # header names only
