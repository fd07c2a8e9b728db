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
from typing import Any, Literal

from pydantic import Field

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import (
    BuildContext,
    CallFailed,
    RawResult,
    Screener,
    ScreenRequest,
)
from core.screeners.http import HttpClient, post_json
from core.screeners.options import HttpOptions, config_only
from core.screeners.parsing import ParseError, ParseSpec, get_path
from core.screeners.prompts import render_template, require_application, template_text
from core.screeners.safety import check_headers

__all__ = ["DEFAULT_BODY", "HttpJsonOptions", "HttpJsonScreener", "fill_body"]

DEFAULT_BODY = {"candidate_id": "{candidate_id}", "request_id": "{request_id}",
                "application": "{application}"}


class HttpJsonOptions(HttpOptions):
    """``[screener]`` with ``kind = "http-json"``."""

    kind: Literal["http-json"] = "http-json"
    url: str | None = Field(
        None, title="URL", description="Where each call is POSTed.",
        json_schema_extra={"placeholder": "https://screener.internal/score", "columns": 1,
                           "order": -1})
    base_url: str | None = config_only(description="Another name for url.")
    body: Any = Field(
        None, title="JSON body",
        description="Any JSON; strings may hold {application}, {candidate_id}, {request_id}, "
                    "{run}, {seed}, {model}.",
        json_schema_extra={"widget": "json", "default_value": DEFAULT_BODY})
    body_template: str | None = config_only(
        description="A file (relative to the config) holding the JSON body.")
    headers: dict[str, str] | None = config_only(
        description="Extra HTTP headers (never a credential: name it in api_key_env).")
    api_key_header: str = Field(
        "Authorization", title="Header that carries the key",
        description="Authorization sends 'Bearer <key>'; any other header the key itself.",
        json_schema_extra={"columns": 1})
    model_path: str | None = Field(
        None, title="Where the response reports its model (dotted path)",
        description="Read into the call record as the reported model.",
        json_schema_extra={"placeholder": "model", "columns": 1})


def fill_body(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with placeholders filled in every string (recursively)."""
    if isinstance(template, str):
        if "{" not in template:            # no placeholder in it
            return template
        key = template[1:-1]
        if template[0] == "{" and template[-1] == "}" and key in values:
            return values[key]             # exactly one placeholder: the value itself
        return render_template(template, values)
    if type(template) is dict or isinstance(template, Mapping):
        return {k: fill_body(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_body(v, values) for v in template]
    return template


class HttpJsonScreener(Screener):
    """POST ``body_template`` to ``url``; scores from the JSON response."""

    kind = "http-json"
    title = "Your own HTTP endpoint (JSON in, JSON out)"
    order = 30
    Options = HttpJsonOptions
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

    @classmethod
    def from_options(cls, options: HttpJsonOptions, context: BuildContext
                     ) -> HttpJsonScreener:
        for key in ("url", "base_url"):
            options.checked_url(getattr(options, key), key)
        api_key = options.api_key(context)
        model = options.model_id(context)
        url = options.url or options.base_url
        if not url:
            raise InputError("the http-json screener needs a url (field 'url')")
        body: Any = options.body
        if options.body_template:
            raw = template_text(options.model_dump(), "body_template", "body",
                                context.base_dir, None) or ""
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InputError(f"body_template is not JSON: {exc.msg} at line {exc.lineno} "
                                 "(field 'body_template')") from None
        if body is not None:
            require_application(json.dumps(body), "JSON body", "body_template")
        return cls(url=url, model=model, criteria=context.criteria,
                   parse=options.parse_spec(), body_template=body,
                   headers=check_headers(options.headers or {}), api_key=api_key,
                   api_key_header=options.api_key_header, model_path=options.model_path,
                   api_key_env=options.api_key_env)

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

    async def call(self, client: HttpClient | None, request: ScreenRequest) -> RawResult:
        if client is None:
            raise CallFailed("the http-json screener needs an HTTP client")
        body = fill_body(self.body_template, self._values(request))
        resp = await post_json(client, self.url, body, self._headers(request),
                               self.call_limits, self.retryable_http)
        text = resp.text
        model = None
        doc: Any = None
        if self.model_path:
            try:
                doc = json.loads(text)
                model = str(get_path(doc, self.model_path))[:200]
            except (json.JSONDecodeError, ParseError, ValueError, RecursionError):
                model = None
        raw = RawResult(payload=text, http_status=resp.status_code, model=model,
                        meta={"provider_request_id": resp.headers.get("x-request-id")})
        if type(doc) is dict:   # parse reads the scores from it (one decoding per answer)
            raw.decoded = (text, doc)
        return raw

    def render_prompt(self, application: str, candidate_id: str = "",
                      request_id: str = "") -> str:
        req = ScreenRequest(request_id or "x" * 32, candidate_id, 1, application, 0)
        return json.dumps(fill_body(self.body_template, self._values(req)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "url": self.url, "model_path": self.model_path,
                "body_template": self.body_template,
                "headers": sorted(self.headers)}  # header names only
