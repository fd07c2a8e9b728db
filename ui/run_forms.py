"""The Run page's console: the screener form, the price table and the estimate panel.

The rules live in core — :func:`core.screeners.registry.build_screener` validates a
configuration, :func:`core.estimate.audit_estimate` estimates, :class:`core.runner.PriceTable`
prices. This module only turns widgets into the options core expects, and back.

The helpers at the top take and return plain values (no widget), so they are tested without a
browser; the ``render_*`` functions draw widgets.

Never a secret: the form asks for the *name* of the environment variable that holds the API
key (``api_key_env``). The key itself is read from Streamlit secrets or the environment when the
screener is built, and is never shown, stored, or repeated in a message.

Code-running screeners (a command-line program, a Python function) are offered only when the
operator started the app with ``AUDIT_ALLOW_CODE_SCREENERS=1``; a saved one (from a database
file received from someone else, say) is otherwise never built, so nothing of it runs.

Saving the screener also writes what it is asked to answer (response format, the rubric schema,
the output limit) and the invalid-answer policy into the freeze sheet: they change what is
measured, so they change the harness hash — allowed until the audit's first draw.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core.errors import AuditError, InputError
from core.estimate import Estimate
from core.format import md_escape, money, num, seconds
from core.freeze import ON_INVALID, FreezeSheet
from core.run.options import PriceTable, RunOptions
from core.screeners.base import Screener
from core.screeners.http_json import DEFAULT_BODY
from core.screeners.openai_chat import DEFAULT_MAX_TOKENS, DEFAULT_PROMPT, DEFAULT_SYSTEM
from core.screeners.registry import (
    CODE_KINDS,
    COMMON_KEYS,
    KIND_KEYS,
    KINDS,
    answer_fields,
    build_screener,
    code_screeners_enabled,
)
from core.screeners.schema import RESPONSE_FORMATS, SCHEMA_STYLES
from ui.state import show_error

__all__ = [
    "KIND_LABELS", "LIMIT_KEYS", "available_kinds", "build", "destination",
    "frozen_answer_sheet", "check_env_name", "check_templates",
    "limits_from_form", "model_mismatch", "options_from_form", "parse_paths", "prices_frame",
    "prices_from_frame", "render_estimate", "render_prices", "render_screener_form",
    "render_screener_summary", "run_options", "saved_limits", "saved_screener",
    "streamlit_secrets",
]

KIND_LABELS: dict[str, str] = {
    "simulated": "Simulated (offline, for a dry run)",
    "openai-chat": "OpenAI-compatible chat (vLLM, llama.cpp, Ollama, hosted APIs)",
    "anthropic": "Anthropic Messages API",
    "http-json": "Your own HTTP endpoint (JSON in, JSON out)",
    "command": "A command-line program",
    "python": "A Python function",
}
PARSE_LABELS: dict[str, str] = {
    "flat": "flat: {criterion: score, …, total}",
    "nested": "nested: {scores: {criterion: {score, max}}, bonus_points, deductions}",
    "paths": "paths: one dotted path per criterion (below)",
}
HTTP_KINDS = frozenset({"http-json", "openai-chat", "anthropic"})
LLM_KINDS = ("openai-chat", "anthropic")
RESPONSE_FORMAT_LABELS = {
    "json_schema": "JSON schema from the rubric (the server enforces the keys and ranges)",
    "json_object": "any JSON object (the model chooses the keys)",
    "none": "no format requested",
}
SCHEMA_STYLE_LABELS = {
    "openai": "OpenAI shape: OpenAI, vLLM, llama.cpp server, Ollama /v1",
    "json-object-schema": "json_object + schema: llama-cpp-python",
    "ollama": "format field: Ollama's native API (its /v1 takes the OpenAI shape)",
}
ON_INVALID_LABELS = {
    "recall": "call again (draws then conditioned on validity; counted)",
    "clip": "clip scores outside 0..max (counted); other invalid answers called again",
    "keep-as-failed": "keep as failed (the pair stays without a draw)",
}
#: Run-level call limits kept in the audit settings next to the screener (RunOptions fields).
LIMIT_KEYS = ("timeout_s", "max_retries", "rpm", "on_invalid", "max_calls_per_pair")
_LIMIT_DEFAULTS = {"timeout_s": RunOptions.timeout_s, "max_retries": RunOptions.max_retries,
                   "rpm": None, "on_invalid": RunOptions.on_invalid,
                   "max_calls_per_pair": RunOptions.max_calls_per_pair}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: How common API keys start; such a value in the variable-name field is a pasted key.
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "xai-", "aiza", "hf_", "ghp_", "github_pat_", "pk_")
_DEFAULT_KEY_ENV = {"openai-chat": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY",
                    "http-json": "SCREENER_API_KEY"}


# ============================================================================ plain helpers
def available_kinds() -> list[str]:
    """Screener kinds the form offers: code-running kinds only when the operator enabled
    them (``AUDIT_ALLOW_CODE_SCREENERS=1``)."""
    allowed = code_screeners_enabled()
    return [k for k in KIND_LABELS if allowed or k not in CODE_KINDS]


def destination(screener: Screener) -> str:
    """Where the calls go and which host receives the key (shown before any call)."""
    fn = getattr(screener, "key_destination", None)
    dest = fn() if callable(fn) else None
    url = getattr(screener, "url", None)
    if dest is not None:
        return (f"Calls go to {url}; the API key in the variable {dest[0]} is sent to "
                f"{dest[1]} only.")
    if url:
        return f"Calls go to {url}; no API key is sent."
    return "Calls stay on this machine."


def frozen_answer_sheet(sheet: FreezeSheet, kind: str, options: Mapping[str, Any],
                        on_invalid: str) -> FreezeSheet:
    """The sheet with what the screener is asked to answer and the invalid-answer policy."""
    return dataclasses.replace(sheet, **answer_fields(kind, options, sheet.criteria,
                                                      on_invalid))


def saved_screener(settings: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The audit's saved screener: its kind and the options that kind accepts."""
    cfg = dict(settings.get("screener") or {"kind": "simulated"})
    kind = str(cfg.pop("kind", "simulated"))
    allowed = COMMON_KEYS | KIND_KEYS.get(kind, set())
    return kind, {k: v for k, v in cfg.items() if k in allowed and k != "kind"}


def saved_limits(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Timeout, retries and requests-per-minute kept with the audit (defaults when unset)."""
    return {k: settings.get(k, d) if settings.get(k) is not None else d
            for k, d in _LIMIT_DEFAULTS.items()}


def check_env_name(name: str) -> str | None:
    """The variable *name* for ``api_key_env`` (``None`` when empty).

    Raises :class:`InputError` when the value cannot be a variable name — most likely a pasted
    key. The message never repeats the value.
    """
    name = (name or "").strip()
    if not name:
        return None
    if len(name) > 64 or not _ENV_NAME.match(name) or name.lower().startswith(_KEY_PREFIXES):
        raise InputError("'API key variable' takes the name of an environment variable, such "
                         "as OPENAI_API_KEY, never the key itself: put the key in that variable "
                         "(or in Streamlit secrets) and type only its name (field "
                         "'api_key_env')")
    return name


def check_templates(kind: str, prompt: str | None = None, system: str | None = None,
                    body: str | None = None) -> None:
    """Refuse templates that would send every candidate the same text.

    The application must reach the screener: ``{application}`` in the prompt or the system
    template (chat kinds), or in the JSON body (http-json).
    """
    if kind in ("openai-chat", "anthropic"):
        if "{application}" not in f"{prompt or ''}\n{system or ''}":
            raise InputError("the prompt template has no {application} placeholder, so every "
                             "call would send the same text without the candidate's "
                             "application: put {application} where it belongs (field "
                             "'prompt_template')")
    elif kind == "http-json" and body and "{application}" not in body:
        raise InputError("the JSON body has no {application} placeholder, so the endpoint "
                         "would never see the candidate's application (field 'body')")


def parse_paths(text: str) -> dict[str, str]:
    """``criterion = dotted.path`` lines → a mapping (blank lines and ``#`` comments ignored)."""
    out: dict[str, str] = {}
    for i, line in enumerate((text or "").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, path = line.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InputError(f"score paths, line {i}: write 'criterion = dotted.path', e.g. "
                             "'technical_skills = result.scores.technical' (field 'paths')")
        out[name.strip()] = path.strip()
    return out


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def options_from_form(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[screener]`` options for ``kind`` from the form's values (empty fields left out).

    Checks what ``build_screener`` does not: the key field is a variable name, the templates
    carry ``{application}``, the JSON body is JSON, the score paths are well formed.
    """
    if kind not in KINDS:
        raise InputError(f"screener kind must be one of {', '.join(KINDS)} (field 'kind')")
    v = {k: (x.strip() if isinstance(x, str) and k not in ("prompt", "system", "body")
             else x) for k, x in values.items()}
    opts: dict[str, Any] = {}

    def put(key: str, val: Any) -> None:
        if val is not None and val != "":
            opts[key] = val

    put("model", v.get("model") or "")
    if kind == "simulated":
        opts["latency_ms"] = max(0, _int(v.get("latency_ms"), 0))
        return opts
    if kind in HTTP_KINDS:
        put("api_key_env", check_env_name(str(v.get("api_key_env") or "")))
    opts["parse"] = str(v.get("parse") or "flat")
    put("paths", parse_paths(str(v.get("paths") or "")) or None)
    put("payload_path", v.get("payload_path") or "")
    if v.get("clip"):
        opts["out_of_range"] = "clip"
    if kind in ("openai-chat", "anthropic"):
        prompt, system = str(v.get("prompt") or ""), str(v.get("system") or "")
        check_templates(kind, prompt, system)
        put("base_url", v.get("base_url") or "")
        opts["prompt"] = prompt
        opts["system"] = system
        opts["max_tokens"] = _int(v.get("max_tokens"), DEFAULT_MAX_TOKENS)
        if v.get("response_format"):
            opts["response_format"] = str(v["response_format"])
        if kind == "openai-chat":
            if v.get("schema_style"):
                opts["schema_style"] = str(v["schema_style"])
            opts["seed_per_draw"] = bool(v.get("seed_per_draw", False))
        else:
            opts["prompt_caching"] = bool(v.get("prompt_caching", True))
    elif kind == "http-json":
        put("url", v.get("url") or "")
        body = str(v.get("body") or "").strip()
        if body:
            check_templates(kind, body=body)
            try:
                opts["body"] = json.loads(body)
            except json.JSONDecodeError as exc:
                raise InputError(f"the JSON body is not JSON: {exc.msg} at line {exc.lineno} "
                                 "(field 'body')") from None
        put("api_key_header", v.get("api_key_header") or "")
        put("model_path", v.get("model_path") or "")
    elif kind == "command":
        put("command", v.get("command") or "")
        opts["input"] = str(v.get("input") or "stdin")
        opts["timeout_s"] = float(v.get("timeout_s") or RunOptions.timeout_s)
    elif kind == "python":
        put("function", v.get("function") or "")
    return opts


def limits_from_form(values: Mapping[str, Any]) -> dict[str, Any]:
    """Timeout, retries, requests-per-minute (0 = no limit), calls per pair and the invalid-answer
    policy, validated by RunOptions."""
    rpm = float(values.get("rpm") or 0)
    limits = {"timeout_s": float(values.get("timeout_s") or RunOptions.timeout_s),
              "max_retries": _int(values.get("max_retries"), RunOptions.max_retries),
              "rpm": rpm if rpm > 0 else None,
              "on_invalid": str(values.get("on_invalid") or RunOptions.on_invalid),
              "max_calls_per_pair": _int(values.get("max_calls_per_pair"),
                                         RunOptions.max_calls_per_pair)}
    RunOptions(**limits)  # raises InputError with the field's name
    return limits


def run_options(settings: Mapping[str, Any], *, runs: int, concurrency: int,
                seed: int) -> RunOptions:
    """The engine's options: the page's runs / concurrency / seed plus the saved limits."""
    return RunOptions(runs=int(runs), concurrency=int(concurrency), seed=int(seed),
                      **saved_limits(settings))


def build(kind: str, options: Mapping[str, Any], sheet: FreezeSheet, *, seed: int = 0,
          secrets: Mapping[str, Any] | None = None,
          settings: Mapping[str, Any] | None = None) -> Screener:
    """The adapter (reads the API key). Relative paths of a config-made screener resolve
    against its config file's folder."""
    config_file = (settings or {}).get("config_file")
    base_dir = Path(str(config_file)).resolve().parent if config_file else Path(".")
    return build_screener(kind, options, criteria=sheet.criteria, sheet=sheet, seed=int(seed),
                          secrets=secrets, base_dir=base_dir,
                          allow_code=code_screeners_enabled())


def model_mismatch(options: Mapping[str, Any], sheet: FreezeSheet | None) -> str | None:
    """A warning when the configured model is not the frozen one (None when they agree)."""
    model = str(options.get("model") or "").strip()
    frozen = (sheet.model if sheet is not None else "") or ""
    if not model or not frozen or model == frozen:
        return None
    return (f"The screener is set to call the model '{model}', but the frozen sheet says "
            f"'{frozen}'. Its draws would report another model and be set apart as a second "
            "population. Leave the model empty to call the frozen one, or start a new audit "
            "whose sheet freezes this model.")


def prices_frame(prices: Mapping[str, Any] | None, models: tuple[str, ...] = ()) -> pd.DataFrame:
    """The price table as rows (model, input, output, cached_input); ``models`` without a
    price get an empty row to fill in."""
    table = PriceTable.from_dict(prices).to_dict()
    rows = [{"model": m, **p} for m, p in table.items()]
    rows += [{"model": m, "input": None, "output": None, "cached_input": None}
             for m in models if m and m not in table]
    df = pd.DataFrame(rows, columns=["model", "input", "output", "cached_input"])
    df["model"] = df["model"].astype("object")
    for col in ("input", "output", "cached_input"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df


def prices_from_frame(df: pd.DataFrame) -> dict[str, dict[str, float | None]]:
    """The edited table → ``settings["prices"]``. Rows with no model and no price are
    skipped; a row with a model needs input and output prices (numbers ≥ 0)."""
    table = PriceTable()
    for i, row in enumerate(df.to_dict("records"), start=1):
        model = "" if row.get("model") is None or (isinstance(row.get("model"), float)
                                                    and math.isnan(row["model"])) \
            else str(row["model"]).strip()
        vals = {k: row.get(k) for k in ("input", "output", "cached_input")}
        vals = {k: (None if x is None or (isinstance(x, float) and math.isnan(x)) else x)
                for k, x in vals.items()}
        if not model and all(x is None for x in vals.values()):
            continue
        if not model:
            raise InputError(f"price table, row {i}: name the model the prices are for")
        if vals["input"] is None and vals["output"] is None and vals["cached_input"] is None:
            continue  # a model listed without prices: no cost, as before
        if vals["input"] is None or vals["output"] is None:
            raise InputError(f"price table, row {i} ('{model}'): give both the input and the "
                             "output price in $ per million tokens")
        if any(x is not None and float(x) < 0 for x in vals.values()):
            raise InputError(f"price table, row {i} ('{model}'): prices cannot be negative")
        if model in table.prices:
            raise InputError(f"price table: '{model}' is listed twice; keep one row")
        table.set(model, vals)
    return table.to_dict()


def streamlit_secrets() -> dict[str, Any] | None:
    """Streamlit secrets when a secrets file exists (API keys are read there or from env)."""
    try:
        return {k: st.secrets[k] for k in st.secrets}
    except Exception:  # noqa: BLE001 - no secrets file is the normal case
        return None


def _summary(kind: str, options: Mapping[str, Any], limits: Mapping[str, Any],
             sheet: FreezeSheet | None) -> pd.DataFrame:
    rows: list[tuple[str, str]] = [("kind", KIND_LABELS.get(kind, kind)),
                                   ("model", str(options.get("model") or
                                                 f"{sheet.model if sheet else ''} (frozen)"))]
    skip = {"model", "prompt", "system"}
    for key, val in options.items():
        if key in skip:
            continue
        if isinstance(val, (dict, list)):
            val = json.dumps(val, sort_keys=True)
        rows.append((key, str(val)))
    if kind in HTTP_KINDS:
        rows += [("timeout_s", num(limits["timeout_s"])),
                 ("max_retries", num(limits["max_retries"])),
                 ("rpm", "no limit" if not limits["rpm"] else num(limits["rpm"]))]
    return pd.DataFrame(rows, columns=["setting", "value"])


def _key(audit_id: str, kind: str, name: str) -> str:
    return f"scr-{audit_id}-{kind}-{name}"


# ============================================================================ widgets
def render_screener_summary(kind: str, options: Mapping[str, Any], settings: Mapping[str, Any],
                            sheet: FreezeSheet | None) -> None:
    """The saved screener, read-only (the harness is frozen once the audit has draws)."""
    st.dataframe(_summary(kind, options, saved_limits(settings), sheet), hide_index=True,
                 width="stretch", key="screener-summary")
    for field, label in (("prompt", "Prompt template"), ("system", "System template")):
        if options.get(field):
            st.caption(label)
            st.code(str(options[field]), language=None, wrap_lines=True)
    warn = model_mismatch(options, sheet)
    if warn:
        st.warning(md_escape(warn))


def render_screener_form(store: Any, audit_id: str, settings: Mapping[str, Any],
                         sheet: FreezeSheet, secrets: Mapping[str, Any] | None) -> bool:
    """The screener form; saves into the audit settings when valid. True when it saved."""
    saved_kind, saved = saved_screener(settings)
    limits = saved_limits(settings)
    kinds = available_kinds()
    if saved_kind in CODE_KINDS and saved_kind not in kinds:
        st.error("This audit's saved screener runs code on this machine "
                 f"({KIND_LABELS[saved_kind].lower()}); code-running screeners are off unless "
                 "the operator starts the app with AUDIT_ALLOW_CODE_SCREENERS=1, so it is not "
                 "used. Choose another kind below.")
    kind = st.selectbox("Screener kind", kinds,
                        index=kinds.index(saved_kind) if saved_kind in kinds else 0,
                        format_func=KIND_LABELS.__getitem__, key=f"scr-{audit_id}-kind")
    cur = saved if kind == saved_kind else {}

    def k(name: str) -> str:
        return _key(audit_id, kind, name)

    values: dict[str, Any] = {}
    frozen = sheet.model or ""
    with st.form(f"screener-form-{audit_id}-{kind}", border=True):
        c1, c2 = st.columns(2)
        if kind in ("openai-chat", "anthropic"):
            default = "https://api.anthropic.com" if kind == "anthropic" else ""
            values["base_url"] = c1.text_input(
                "Base URL", value=str(cur.get("base_url") or default), key=k("base_url"),
                placeholder="http://127.0.0.1:8000/v1" if kind == "openai-chat" else default,
                help="The server's API root; calls go to …/chat/completions"
                if kind == "openai-chat" else "Calls go to …/v1/messages")
        elif kind == "http-json":
            values["url"] = c1.text_input("URL", value=str(cur.get("url") or ""), key=k("url"),
                                          placeholder="https://screener.internal/score")
        elif kind == "command":
            cmd = cur.get("command") or ""
            values["command"] = c1.text_input(
                "Command", value=cmd if isinstance(cmd, str) else " ".join(cmd),
                key=k("command"), placeholder="python my_screener.py --rubric r7.json",
                help="Run once per draw (no shell); the application arrives on stdin or as a "
                     "file; the answer is JSON on stdout.")
        elif kind == "python":
            values["function"] = c1.text_input("Function", value=str(cur.get("function") or ""),
                                               key=k("function"),
                                               placeholder="my_package.screen:score")
        values["model"] = c2.text_input(
            "Model", value=str(cur.get("model") or ""), key=k("model"),
            placeholder=frozen or "the exact model id",
            help="Empty = the model frozen on the sheet. Another id makes its draws a second "
                 "population.")
        if kind == "simulated":
            values["latency_ms"] = c1.number_input(
                "Simulated latency per call (ms)", min_value=0, step=50,
                value=_int(cur.get("latency_ms", 0), 0), key=k("latency_ms"))
        if kind in HTTP_KINDS:
            values["api_key_env"] = c1.text_input(
                "API key variable (its name, not the key)",
                value=str(cur.get("api_key_env") or ""), key=k("api_key_env"),
                placeholder=_DEFAULT_KEY_ENV[kind],
                help="The NAME of an environment variable (or Streamlit secret) holding the "
                     "key. The key is read when the screener is built and never shown or "
                     "stored. Empty for a local server without authentication.")
        if kind in ("openai-chat", "anthropic"):
            values["prompt"] = st.text_area(
                "Prompt template", value=str(cur.get("prompt") or DEFAULT_PROMPT),
                key=k("prompt"), height=110,
                help="{application} is replaced by the candidate's application, {rubric} by "
                     "the frozen criteria, {candidate_id} and {request_id} by theirs.")
            values["system"] = st.text_area(
                "System template", value=str(cur.get("system", DEFAULT_SYSTEM)),
                key=k("system"), height=110,
                help="Sent as the system message (empty: none). Same placeholders.")
        if kind == "http-json":
            body = cur.get("body")
            values["body"] = st.text_area(
                "JSON body", value=json.dumps(body if body is not None else DEFAULT_BODY,
                                              indent=2),
                key=k("body"), height=110,
                help="Any JSON; strings may hold {application}, {candidate_id}, {request_id}, "
                     "{run}, {seed}, {model}.")
            h1, h2 = st.columns(2)
            values["api_key_header"] = h1.text_input(
                "Header that carries the key", value=str(cur.get("api_key_header") or
                                                         "Authorization"),
                key=k("api_key_header"))
            values["model_path"] = h2.text_input(
                "Where the response reports its model (dotted path)",
                value=str(cur.get("model_path") or ""), key=k("model_path"),
                placeholder="model")
        if kind == "command":
            i1, i2 = st.columns(2)
            values["input"] = i1.radio("The application goes", ["stdin", "file"],
                                       index=1 if cur.get("input") == "file" else 0,
                                       horizontal=True, key=k("input"))
            values["timeout_s"] = i2.number_input(
                "Timeout per call (s)", min_value=1, step=10,
                value=int(math.ceil(float(cur.get("timeout_s") or limits["timeout_s"]))),
                key=k("timeout_s"))
        if kind != "simulated":
            p1, p2 = st.columns(2)
            presets = list(PARSE_LABELS)
            values["parse"] = p1.selectbox(
                "Answer format (parse preset)", presets,
                index=presets.index(cur.get("parse")) if cur.get("parse") in presets else 0,
                format_func=PARSE_LABELS.__getitem__, key=k("parse"))
            values["payload_path"] = p2.text_input(
                "Scores sit under (dotted path, optional)",
                value=str(cur.get("payload_path") or ""), key=k("payload_path"),
                placeholder="result")
            values["paths"] = st.text_area(
                "Score paths (one per line: criterion = dotted.path)",
                value="\n".join(f"{a} = {b}" for a, b in (cur.get("paths") or {}).items()),
                key=k("paths"), height=80,
                placeholder="technical_skills = result.scores.technical\ntotal = result.total",
                help="Needed for the 'paths' preset; with the others they override single "
                     "criteria.")
            values["clip"] = st.checkbox(
                "Clip scores outside 0..max (recorded as clipped) instead of rejecting them",
                value=cur.get("out_of_range") == "clip", key=k("clip"))
        if kind in ("openai-chat", "anthropic"):
            f1, f2 = st.columns(2)
            formats = list(RESPONSE_FORMATS)
            default_rf = ("json_schema" if sheet.criteria and all(
                c.max_points is not None for c in sheet.criteria) else "json_object")
            rf = cur.get("response_format") or ("none" if cur.get("json_mode") is False
                                                else default_rf)
            values["response_format"] = f1.selectbox(
                "Answer format", formats, index=formats.index(rf) if rf in formats else 0,
                format_func=RESPONSE_FORMAT_LABELS.__getitem__, key=k("response_format"),
                help="A JSON schema built from the frozen criteria (one number per criterion "
                     "within 0..max, nothing else) keeps a small model from inventing keys. "
                     "Frozen with the sheet.")
            if kind == "openai-chat":
                styles = list(SCHEMA_STYLES)
                style = cur.get("schema_style") or "openai"
                values["schema_style"] = f2.selectbox(
                    "How the server takes a schema", styles,
                    index=styles.index(style) if style in styles else 0,
                    format_func=SCHEMA_STYLE_LABELS.__getitem__, key=k("schema_style"))
            o1, o2, o3 = st.columns(3)
            values["max_tokens"] = o1.number_input(
                "Max output tokens per call", min_value=1, max_value=32_768, step=64,
                key=k("max_tokens"),
                value=_int(cur.get("max_tokens", DEFAULT_MAX_TOKENS), DEFAULT_MAX_TOKENS),
                help="Always sent: an answer cut off by it is counted as truncated. Frozen "
                     "with the sheet.")
            if kind == "openai-chat":
                values["seed_per_draw"] = o3.checkbox(
                    "Send a different seed with every call", key=k("seed_per_draw"),
                    value=bool(cur.get("seed_per_draw", False)),
                    help="Never a fixed seed: one seed for every run can make the runs "
                         "identical.")
            else:
                values["prompt_caching"] = o2.checkbox(
                    "Prompt caching of the rubric prefix", key=k("prompt_caching"),
                    value=bool(cur.get("prompt_caching", True)))
        lim: dict[str, Any] = {}
        if kind in HTTP_KINDS:
            l1, l2, l3 = st.columns(3)
            lim["timeout_s"] = l1.number_input("Timeout per call (s)", min_value=1, step=10,
                                               value=int(math.ceil(limits["timeout_s"])),
                                               key=k("limit-timeout"))
            lim["max_retries"] = l2.number_input("Max retries per call", min_value=0,
                                                 max_value=20, step=1,
                                                 value=int(limits["max_retries"]),
                                                 key=k("limit-retries"))
            lim["rpm"] = l3.number_input("Requests per minute (0 = no limit)", min_value=0,
                                         step=60, value=int(limits["rpm"] or 0),
                                         key=k("limit-rpm"))
        if kind != "simulated":
            i1, i2 = st.columns(2)
            policies = list(ON_INVALID)
            lim["on_invalid"] = i1.selectbox(
                "An invalid answer (unparseable, out of range, truncated, refused)", policies,
                index=policies.index(limits["on_invalid"]) if limits["on_invalid"] in policies
                else 0, format_func=ON_INVALID_LABELS.__getitem__, key=k("on-invalid"),
                help="Whatever the policy, the rate of invalid answers is measured and "
                     "reported. Frozen with the sheet.")
            lim["max_calls_per_pair"] = i2.number_input(
                "Calls per (candidate, run) at most", min_value=1, max_value=20, step=1,
                value=int(limits["max_calls_per_pair"]), key=k("max-calls"),
                help="The worst case of the estimate uses it.")
        submitted = st.form_submit_button("Save the screener", type="primary")
    if not submitted:
        warn = model_mismatch(cur, sheet)
        if warn:
            st.warning(md_escape(warn))
        return False
    if kind == "command":
        lim["timeout_s"] = values.get("timeout_s")
    try:
        options = options_from_form(kind, values)
        new_limits = limits_from_form(lim) if lim else {}
        build(kind, options, sheet, secrets=secrets, settings=settings)  # validates; reads key
        new_sheet = frozen_answer_sheet(sheet, kind, options,
                                        str(new_limits.get("on_invalid", "recall")))
        store.save_audit(audit_id, new_sheet.to_dict(), new_sheet.hash,
                         {"screener": {**options, "kind": kind}, **new_limits,
                          "preflight_latency_s": None})
    except AuditError as exc:
        show_error(exc, "The screener was not saved")
        return False
    st.success(f"Screener saved: {KIND_LABELS[kind]}.")
    warn = model_mismatch(options, sheet)
    if warn:
        st.warning(md_escape(warn))
    return True


def render_prices(store: Any, audit_id: str, settings: Mapping[str, Any],
                  model: str | None) -> None:
    """The editable price table ($ per million tokens), saved with the audit."""
    prices = settings.get("prices") or {}
    version = hashlib.sha256(json.dumps([prices, model], sort_keys=True,
                                        default=str).encode()).hexdigest()[:10]
    frame = prices_frame(prices, (model,) if model else ())
    edited = st.data_editor(
        frame, num_rows="dynamic", hide_index=True, width="stretch",
        key=f"prices-{audit_id}-{version}",
        column_config={
            "model": st.column_config.TextColumn("model id", required=True),
            "input": st.column_config.NumberColumn("input $/M tokens", min_value=0.0,
                                                   format="%.4g"),
            "output": st.column_config.NumberColumn("output $/M tokens", min_value=0.0,
                                                    format="%.4g"),
            "cached_input": st.column_config.NumberColumn("cached input $/M tokens",
                                                          min_value=0.0, format="%.4g"),
        })
    if st.button("Save the prices", key=f"save-prices-{audit_id}"):
        try:
            new = prices_from_frame(edited)
        except AuditError as exc:
                show_error(exc, "The prices were not saved")
        else:
            store.update_settings(audit_id, {"prices": new})
            st.rerun()


def render_estimate(est: Estimate, key: str = "run-estimate") -> None:
    """Calls, tokens, cost and wall time (:func:`core.estimate.audit_estimate`), each with its
    source, and the worst case. The Sample and Run pages both draw it."""
    src = est.sources
    with st.container(key=key):
        e1, e2, e3, e4, e5 = st.columns(5)
        e1.metric("Calls to make", num(est.calls),
                  help=f"Of {num(est.whole_calls)} for the whole run"
                  if est.whole_calls is not None else None)
        e2.metric("Input tokens", num(est.input_tokens), help=src.get("input tokens"))
        e3.metric("Output tokens", num(est.output_tokens), help=src.get("output tokens"))
        e4.metric("Cost", money(est.cost), help=src.get("cost"))
        e5.metric("Wall time", seconds(est.wall_time_s),
                  help="⌈calls ÷ calls in flight⌉ × latency per call")
        lines = [f"{name[:1].upper()}{name[1:]}: {text}" for name, text in src.items()]
        lines.append(f"{est.concurrency} calls in flight; {'; '.join(est.notes)}")
        if est.worst_calls is not None:
            worst = "" if est.worst_cost is None else f", {money(est.worst_cost)}"
            lines.append(f"Worst case: {num(est.worst_calls)} calls{worst} — every pair "
                         "using all its calls, every answer as long as max tokens allows")
        st.caption(md_escape(". ".join(lines) + "."))
