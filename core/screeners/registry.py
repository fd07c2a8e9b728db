"""Build a screener adapter from its kind and options (the ``[screener]`` table of a config).

Code-running kinds (``command``, ``python``) run programs on this machine: they are built only
with ``allow_code=True``, which the app passes when the operator set
``AUDIT_ALLOW_CODE_SCREENERS=1`` and the command line when the user gave ``--allow-code``. A
config, a visitor of the app or a database file received from someone else cannot turn them on.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.freeze import Criterion, FreezeSheet
from core.screeners.anthropic import AnthropicScreener
from core.screeners.base import Screener, check_base_url, resolve_api_key
from core.screeners.command import CommandScreener
from core.screeners.http_json import HttpJsonScreener
from core.screeners.openai_chat import (
    DEFAULT_PROMPT,
    DEFAULT_SYSTEM,
    OpenAIChatScreener,
)
from core.screeners.parsing import ParseSpec
from core.screeners.python_fn import PythonScreener
from core.screeners.schema import RESPONSE_FORMATS
from core.screeners.simulated import SimulatedScreener

__all__ = ["CODE_KINDS", "CODE_SCREENERS_VAR", "COMMON_KEYS", "KINDS", "KIND_KEYS",
           "answer_fields", "build_screener", "code_screeners_enabled", "describe_code",
           "inside_folder", "parse_spec_from"]

KINDS = ("simulated", "http-json", "openai-chat", "anthropic", "command", "python")
#: Kinds that run code on this machine (operator opt-in only).
CODE_KINDS = frozenset({"command", "python"})
#: The operator's switch for code-running screeners in the app (off unless set to 1).
CODE_SCREENERS_VAR = "AUDIT_ALLOW_CODE_SCREENERS"
MAX_TOKENS_CAP = 32_768
COMMON_KEYS = {"kind", "model", "api_key_env", "parse", "out_of_range", "payload_path", "paths"}
KIND_KEYS: dict[str, set[str]] = {
    "simulated": {"latency_ms", "seed"},
    "http-json": {"url", "base_url", "body", "body_template", "headers", "api_key_header",
                  "model_path"},
    "openai-chat": {"base_url", "prompt_template", "system_template", "prompt", "system",
                    "json_mode", "seed_per_draw", "max_tokens", "extra_body",
                    "response_format", "schema_style", "schema_total"},
    "anthropic": {"base_url", "prompt_template", "system_template", "prompt", "system",
                  "max_tokens", "prompt_caching", "response_format", "schema_total"},
    "command": {"command", "input", "timeout_s", "cwd"},
    "python": {"function"},
}
_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "proxy-authorization"}


def inside_folder(folder: str | Path, relative: str, field_name: str) -> Path:
    """``folder / relative`` resolved, refused when it leaves ``folder`` (``..``, an absolute
    path, a symlink pointing out): a config or a sample must not read other files of the
    machine and send them to a screener."""
    base = Path(folder).resolve()
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise InputError(f"'{relative}' must be a path inside {base.name or base}/ (no absolute "
                         f"path, no '..') (field '{field_name}')")
    path = (base / rel).resolve()
    if not path.is_relative_to(base):
        raise InputError(f"'{relative}' leads outside {base.name or base}/ (a symlink pointing "
                         f"elsewhere) (field '{field_name}')")
    return path


def code_screeners_enabled() -> bool:
    """True when the operator enabled code-running screeners (``AUDIT_ALLOW_CODE_SCREENERS=1``)."""
    return os.environ.get(CODE_SCREENERS_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def describe_code(kind: str, options: Mapping[str, Any]) -> str:
    """What a code-running screener would run, in one line (printed before it runs)."""
    if kind == "command":
        cmd = options.get("command")
        argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in (cmd or [])]
        return "the program " + shlex.join(argv) + " (once per draw, the application on " \
            + ("stdin)" if str(options.get("input", "stdin")) == "stdin" else "a file)")
    if kind == "python":
        return f"the Python function {options.get('function')} (imported into this process)"
    return f"a {kind} screener"


def _max_tokens(options: Mapping[str, Any]) -> int:
    from core.screeners.openai_chat import DEFAULT_MAX_TOKENS
    raw = options.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not (
            1 <= raw <= MAX_TOKENS_CAP) or int(raw) != raw:
        raise InputError(f"max_tokens must be a whole number from 1 to {MAX_TOKENS_CAP:,} "
                         "(field 'max_tokens')")
    return int(raw)


def _response_format(options: Mapping[str, Any]) -> str | None:
    rf = options.get("response_format")
    if rf is None and options.get("json_mode") is False:
        return "none"          # an older saved setting: json mode switched off
    if rf is not None and rf not in RESPONSE_FORMATS:
        raise InputError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got "
                         f"'{rf}' (field 'response_format')")
    return None if rf is None else str(rf)


def answer_fields(kind: str, options: Mapping[str, Any], criteria: tuple[Criterion, ...],
                  on_invalid: str) -> dict[str, Any]:
    """The freeze-sheet fields that say what the screener is asked to answer and what an
    invalid answer leads to (``response_format``, ``schema_style``, ``answer_schema``,
    ``max_tokens``, ``on_invalid``), computed from the options without building the adapter
    (no key needed). They change what is measured, so they are hashed with the sheet."""
    out: dict[str, Any] = {"on_invalid": on_invalid, "response_format": None,
                           "schema_style": None, "answer_schema": None, "max_tokens": None}
    if kind in ("openai-chat", "anthropic"):
        from core.screeners.schema import default_response_format, rubric_schema
        rf = _response_format(options) or default_response_format(tuple(criteria))
        out["response_format"] = rf
        out["max_tokens"] = _max_tokens(options)
        if rf == "json_schema":
            out["answer_schema"] = rubric_schema(tuple(criteria),
                                                 total=bool(options.get("schema_total")))
            out["schema_style"] = ("anthropic-tool" if kind == "anthropic"
                                   else str(options.get("schema_style", "openai")))
    return out


def parse_spec_from(options: Mapping[str, Any]) -> ParseSpec:
    return ParseSpec(preset=str(options.get("parse", "flat")),
                     paths={str(k): str(v) for k, v in (options.get("paths") or {}).items()},
                     payload_path=options.get("payload_path"),
                     out_of_range=str(options.get("out_of_range", "error")))


def _text(options: Mapping[str, Any], file_key: str, inline_key: str, base_dir: Path,
          default: str | None) -> str | None:
    if options.get(file_key):
        path = inside_folder(base_dir, str(options[file_key]), file_key)
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
                   base_dir: str | Path = ".", allow_code: bool = False) -> Screener:
    """The adapter for ``kind`` with ``options``; the API key comes from ``api_key_env``.

    ``secrets`` (Streamlit secrets) is looked up before the environment. Keys never come from
    ``options`` themselves. ``command`` / ``python`` need ``allow_code`` (nothing of theirs is
    imported or run without it). URLs must not carry credentials and use https unless they
    point at this machine (:func:`~core.screeners.base.check_base_url`).
    """
    if kind not in KINDS:
        raise InputError(f"screener kind must be one of {', '.join(KINDS)}; got '{kind}' "
                         "(field 'kind')")
    if kind in CODE_KINDS and not allow_code:
        raise InputError(f"the '{kind}' screener runs code on this machine "
                         f"({describe_code(kind, options)}) and is off unless the operator "
                         f"enables it: {CODE_SCREENERS_VAR}=1 for the app, --allow-code for the "
                         "command line (field 'kind')")
    unknown = sorted(set(options) - COMMON_KEYS - KIND_KEYS[kind])
    if unknown:
        raise InputError(f"unknown [screener] field(s) for kind '{kind}': {', '.join(unknown)}")
    base = Path(base_dir)
    parse = parse_spec_from(options)
    model = str(options.get("model") or (sheet.model if sheet else "") or "")
    for key in ("url", "base_url"):
        if options.get(key) and kind in ("http-json", "openai-chat", "anthropic"):
            check_base_url(str(options[key]), key)
    api_key = resolve_api_key(options.get("api_key_env"), secrets)
    key_env = options.get("api_key_env") or None
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
                                model_path=options.get("model_path"), api_key_env=key_env)
    if kind == "openai-chat":
        if not options.get("base_url"):
            raise InputError("the openai-chat screener needs base_url, e.g. "
                             "http://127.0.0.1:8000/v1 (field 'base_url')")
        return OpenAIChatScreener(
            base_url=str(options["base_url"]), model=model, criteria=criteria, parse=parse,
            prompt_template=_prompt(options, base),
            system_template=_text(options, "system_template", "system", base, DEFAULT_SYSTEM),
            api_key=api_key,
            seed_per_draw=bool(options.get("seed_per_draw", False)), sampling=sampling,
            max_tokens=_max_tokens(options), extra_body=options.get("extra_body"),
            api_key_env=key_env, response_format=_response_format(options),
            schema_style=str(options.get("schema_style", "openai")),
            schema_total=bool(options.get("schema_total", False)))
    if kind == "anthropic":
        return AnthropicScreener(
            model=model, base_url=str(options.get("base_url", "https://api.anthropic.com")),
            criteria=criteria, parse=parse,
            prompt_template=_prompt(options, base),
            system_template=_text(options, "system_template", "system", base, DEFAULT_SYSTEM),
            api_key=api_key, sampling=sampling, max_tokens=_max_tokens(options),
            prompt_caching=bool(options.get("prompt_caching", True)), api_key_env=key_env,
            response_format=_response_format(options),
            schema_total=bool(options.get("schema_total", False)))
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
