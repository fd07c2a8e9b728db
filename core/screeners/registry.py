"""Build a screener adapter from its kind and options (the ``[screener]`` table of a config)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.freeze import Criterion, FreezeSheet
from core.screeners.anthropic import AnthropicScreener
from core.screeners.base import Screener, resolve_api_key
from core.screeners.command import CommandScreener
from core.screeners.http_json import HttpJsonScreener
from core.screeners.openai_chat import (
    DEFAULT_PROMPT,
    DEFAULT_SYSTEM,
    OpenAIChatScreener,
)
from core.screeners.parsing import ParseSpec
from core.screeners.python_fn import PythonScreener
from core.screeners.simulated import SimulatedScreener

__all__ = ["COMMON_KEYS", "KINDS", "KIND_KEYS", "build_screener", "parse_spec_from"]

KINDS = ("simulated", "http-json", "openai-chat", "anthropic", "command", "python")
COMMON_KEYS = {"kind", "model", "api_key_env", "parse", "out_of_range", "payload_path", "paths"}
KIND_KEYS: dict[str, set[str]] = {
    "simulated": {"latency_ms", "seed"},
    "http-json": {"url", "base_url", "body", "body_template", "headers", "api_key_header",
                  "model_path"},
    "openai-chat": {"base_url", "prompt_template", "system_template", "prompt", "system",
                    "json_mode", "seed_per_draw", "max_tokens", "extra_body"},
    "anthropic": {"base_url", "prompt_template", "system_template", "prompt", "system",
                  "max_tokens", "prompt_caching"},
    "command": {"command", "input", "timeout_s", "cwd"},
    "python": {"function"},
}
_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "proxy-authorization"}


def parse_spec_from(options: Mapping[str, Any]) -> ParseSpec:
    return ParseSpec(preset=str(options.get("parse", "flat")),
                     paths={str(k): str(v) for k, v in (options.get("paths") or {}).items()},
                     payload_path=options.get("payload_path"),
                     out_of_range=str(options.get("out_of_range", "error")))


def _text(options: Mapping[str, Any], file_key: str, inline_key: str, base_dir: Path,
          default: str | None) -> str | None:
    if options.get(file_key):
        path = (base_dir / str(options[file_key])).resolve()
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read {file_key} '{path}': {exc.strerror} "
                             f"(field '{file_key}')") from None
    if inline_key in options:
        return str(options[inline_key])
    return default


def _prompt(options: Mapping[str, Any], base_dir: Path) -> str:
    """The prompt template; it must insert the application, or every call scores nothing."""
    text = _text(options, "prompt_template", "prompt", base_dir, DEFAULT_PROMPT) or DEFAULT_PROMPT
    if "{application}" not in text:
        raise InputError("the prompt template never inserts the application: add "
                         "{application} where the application text goes (field "
                         "'prompt_template')")
    return text


def _sampling(sheet: FreezeSheet | None) -> dict[str, float]:
    """Sampling parameters to send: only when the sheet says they are settable and records them."""
    if sheet is None or sheet.sampling != "settable":
        return {}
    out = {"temperature": sheet.temperature, "top_p": sheet.top_p, "top_k": sheet.top_k}
    return {k: v for k, v in out.items() if v is not None}


def build_screener(kind: str, options: Mapping[str, Any], *, criteria: tuple[Criterion, ...],
                   sheet: FreezeSheet | None = None, seed: int = 0,
                   secrets: Mapping[str, Any] | None = None,
                   base_dir: str | Path = ".") -> Screener:
    """The adapter for ``kind`` with ``options``; the API key comes from ``api_key_env``.

    ``secrets`` (Streamlit secrets) is looked up before the environment. Keys never come from
    ``options`` themselves.
    """
    if kind not in KINDS:
        raise InputError(f"screener kind must be one of {', '.join(KINDS)}; got '{kind}' "
                         "(field 'kind')")
    unknown = sorted(set(options) - COMMON_KEYS - KIND_KEYS[kind])
    if unknown:
        raise InputError(f"unknown [screener] field(s) for kind '{kind}': {', '.join(unknown)}")
    base = Path(base_dir)
    parse = parse_spec_from(options)
    model = str(options.get("model") or (sheet.model if sheet else "") or "")
    api_key = resolve_api_key(options.get("api_key_env"), secrets)
    sampling = _sampling(sheet)
    if kind == "simulated":
        return SimulatedScreener(criteria=criteria, model=model or "sim-screener-1",
                                 seed=int(options.get("seed", seed)),
                                 latency_s=float(options.get("latency_ms", 0)) / 1000.0,
                                 parse=parse)
    if not model:
        raise InputError("the screener needs a model id ([harness] model)")
    if kind == "http-json":
        url = options.get("url") or options.get("base_url")
        if not url:
            raise InputError("the http-json screener needs a url (field 'url')")
        body: Any = options.get("body")
        if options.get("body_template"):
            raw = _text(options, "body_template", "body", base, None) or ""
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InputError(f"body_template is not JSON: {exc.msg} at line {exc.lineno} "
                                 "(field 'body_template')") from None
        if body is not None and "{application}" not in json.dumps(body):
            raise InputError("the body template never inserts the application: add "
                             "\"{application}\" where the application text goes (field "
                             "'body_template')")
        headers = {str(k): str(v) for k, v in (options.get("headers") or {}).items()}
        bad = sorted(h for h in headers if h.lower() in _SECRET_HEADERS)
        if bad:
            raise InputError(f"header(s) {', '.join(bad)} carry credentials: never put a key in "
                             "the config; name its environment variable in api_key_env")
        return HttpJsonScreener(url=str(url), model=model, criteria=criteria, parse=parse,
                                body_template=body, headers=headers, api_key=api_key,
                                api_key_header=str(options.get("api_key_header",
                                                               "Authorization")),
                                model_path=options.get("model_path"))
    if kind == "openai-chat":
        if not options.get("base_url"):
            raise InputError("the openai-chat screener needs base_url, e.g. "
                             "http://127.0.0.1:8000/v1 (field 'base_url')")
        return OpenAIChatScreener(
            base_url=str(options["base_url"]), model=model, criteria=criteria, parse=parse,
            prompt_template=_prompt(options, base),
            system_template=_text(options, "system_template", "system", base, DEFAULT_SYSTEM),
            api_key=api_key, json_mode=bool(options.get("json_mode", True)),
            seed_per_draw=bool(options.get("seed_per_draw", False)), sampling=sampling,
            max_tokens=options.get("max_tokens"), extra_body=options.get("extra_body"))
    if kind == "anthropic":
        return AnthropicScreener(
            model=model, base_url=str(options.get("base_url", "https://api.anthropic.com")),
            criteria=criteria, parse=parse,
            prompt_template=_prompt(options, base),
            system_template=_text(options, "system_template", "system", base, DEFAULT_SYSTEM),
            api_key=api_key, sampling=sampling, max_tokens=int(options.get("max_tokens", 1024)),
            prompt_caching=bool(options.get("prompt_caching", True)))
    if kind == "command":
        cmd = options.get("command")
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd or [])
        return CommandScreener(argv=argv, model=model, criteria=criteria, parse=parse,
                               input_mode=str(options.get("input", "stdin")),
                               timeout_s=float(options.get("timeout_s", 120)),
                               cwd=str((base / options["cwd"]).resolve()) if options.get("cwd")
                               else str(base.resolve()))
    if not options.get("function"):
        raise InputError("the python screener needs function = \"module:function\"")
    return PythonScreener(function=str(options["function"]), model=model, criteria=criteria,
                          parse=parse)
