"""The Run page's screener form, generated from the adapter's options model.

Each screener kind declares its options as a pydantic model (:mod:`core.screeners.options`);
this module turns the fields of that model into widgets — the field's ``title`` (or its name)
is the label, its ``description`` the help, its type the widget:

==========================================  =================================================
field                                       widget
==========================================  =================================================
``bool``                                    checkbox
``int`` / ``float`` (``ge``/``le`` bounds)  number input with those bounds
``Literal[...]``                            select box (labels from ``choices``)
``str`` with ``widget = "textarea"``        text area (long text, kept as typed)
``dict[str, str]`` with ``widget="lines"``  text area of ``key = value`` lines
any JSON with ``widget = "json"``           text area holding JSON
any other ``str``                           text input (empty = not set)
==========================================  =================================================

A new kind therefore gets its form from its model alone. The kind-specific touches that stay:
a field marked ``secret_name`` (``api_key_env``) takes the *name* of a variable, never a key
(:func:`check_env_name`); a ``Literal`` marked ``default_for_rubric`` (``response_format``)
starts on the default for the frozen rubric; the run-level call limits show for kinds that use
HTTP (timeout, retries, rpm) and whose answers may be invalid (the invalid-answer policy).

Code-running kinds are offered only when the operator started the app with
``AUDIT_ALLOW_CODE_SCREENERS=1``; a saved one (from a database file received from someone else,
say) is otherwise never built, so nothing of it runs.

Saving the screener also writes what it is asked to answer (response format, the rubric schema,
the output limit) and the invalid-answer policy into the freeze sheet: they change what is
measured, so they change the harness hash — allowed until the audit's first draw.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import streamlit as st
from pydantic.fields import FieldInfo

from core.errors import AuditError, InputError
from core.format import md_escape, num
from core.freeze import ON_INVALID, FreezeSheet
from core.screeners.base import Screener
from core.screeners.options import ScreenerOptions, form_fields
from core.screeners.registry import (
    CODE_SCREENERS_VAR,
    SCREENERS,
    answer_fields,
    build_screener,
    code_screeners_enabled,
    validate_options,
)
from core.screeners.schema import default_response_format
from ui.run_forms import limits_from_form, model_mismatch, saved_limits
from ui.state import show_error

__all__ = ["Widget", "available_kinds", "build", "check_env_name", "form_widgets",
           "frozen_answer_sheet", "kind_title", "options_from_form", "parse_paths",
           "render_screener_form", "render_screener_summary", "saved_screener"]

ON_INVALID_LABELS = {
    "recall": "call again (draws then conditioned on validity; counted)",
    "clip": "clip scores outside 0..max (counted); other invalid answers called again",
    "keep-as-failed": "keep as failed (the pair stays without a draw)",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: How common API keys start; such a value in the variable-name field is a pasted key.
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "xai-", "aiza", "hf_", "ghp_", "github_pat_", "pk_")


# ============================================================================ plain helpers
def kind_title(kind: str) -> str:
    """The kind's name on the page (its adapter's ``title``)."""
    cls = SCREENERS.get(kind)
    return cls.title if cls is not None and cls.title else kind


def available_kinds() -> list[str]:
    """Screener kinds the form offers: code-running kinds only when the operator enabled
    them (``AUDIT_ALLOW_CODE_SCREENERS=1``)."""
    allowed = code_screeners_enabled()
    return [k for k, c in SCREENERS.items() if allowed or not c.runs_code]


def saved_screener(settings: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The audit's saved screener: its kind and the options that kind accepts."""
    cfg = dict(settings.get("screener") or {"kind": "simulated"})
    kind = str(cfg.pop("kind", "simulated"))
    cls = SCREENERS.get(kind)
    allowed = set(cls.Options.model_fields) - {"kind"} if cls is not None else set()
    return kind, {k: v for k, v in cfg.items() if k in allowed}


def frozen_answer_sheet(sheet: FreezeSheet, kind: str, options: Mapping[str, Any],
                        on_invalid: str) -> FreezeSheet:
    """The sheet with what the screener is asked to answer and the invalid-answer policy."""
    return dataclasses.replace(sheet, **answer_fields(kind, options, sheet.criteria,
                                                      on_invalid))


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


def parse_paths(text: str, field_name: str = "paths") -> dict[str, str]:
    """``key = value`` lines → a mapping (blank lines and ``#`` comments ignored)."""
    out: dict[str, str] = {}
    for i, line in enumerate((text or "").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, path = line.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InputError(f"score paths, line {i}: write 'criterion = dotted.path', e.g. "
                             "'technical_skills = result.scores.technical' (field "
                             f"'{field_name}')")
        out[name.strip()] = path.strip()
    return out


@dataclass(frozen=True)
class Widget:
    """How one options field is drawn: ``kind`` is one of ``checkbox``, ``number``,
    ``select``, ``textarea``, ``lines``, ``json``, ``text``."""

    name: str
    kind: str
    label: str
    help: str | None
    default: Any = None
    choices: tuple[Any, ...] = ()
    choice_labels: Mapping[Any, str] = dataclasses.field(default_factory=dict)
    min_value: float | None = None
    max_value: float | None = None
    step: float | None = None
    integer: bool = False
    placeholder: str | None = None
    narrow: bool = False
    secret_name: bool = False
    default_for_rubric: bool = False


def _extra(f: FieldInfo) -> dict[str, Any]:
    return f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}


def _bare(annotation: Any) -> tuple[Any, ...]:
    """The non-``None`` members of an annotation (``X | None`` → ``(X,)``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _bounds(f: FieldInfo) -> tuple[float | None, float | None]:
    lo = hi = None
    for m in f.metadata:
        lo = getattr(m, "ge", None) if getattr(m, "ge", None) is not None else lo
        hi = getattr(m, "le", None) if getattr(m, "le", None) is not None else hi
        if getattr(m, "gt", None) is not None and lo is None:
            lo = m.gt
    return lo, hi


def _widget(name: str, f: FieldInfo) -> Widget:
    extra = _extra(f)
    members = _bare(f.annotation)
    label = f.title or name.replace("_", " ").capitalize()
    common = {"name": name, "label": label, "help": f.description or None,
              "placeholder": extra.get("placeholder"), "narrow": extra.get("columns") == 1,
              "secret_name": bool(extra.get("secret_name")),
              "default": extra.get("default_value", f.default)}
    style = extra.get("widget")
    first = members[0]
    if style in ("textarea", "lines", "json"):
        return Widget(kind=style, **common)
    if first is bool:
        return Widget(kind="checkbox", **common)
    if typing.get_origin(first) is Literal:
        choices = typing.get_args(first)
        return Widget(kind="select", choices=choices,
                      choice_labels=extra.get("choices") or {c: str(c) for c in choices},
                      default_for_rubric=bool(extra.get("default_for_rubric")), **common)
    if first in (int, float):
        lo, hi = _bounds(f)
        integer = first is int
        return Widget(kind="number", min_value=lo, max_value=hi, integer=integer,
                      step=extra.get("step", 1 if integer else None), **common)
    return Widget(kind="text", **common)


def form_widgets(kind: str) -> list[Widget]:
    """The widgets of ``kind``'s form, one per shown field of its options model, primary
    fields (``order`` < 0) first."""
    model: type[ScreenerOptions] = SCREENERS[kind].Options
    names = form_fields(model)
    names.sort(key=lambda n: _extra(model.model_fields[n]).get("order", 0))
    return [_widget(n, model.model_fields[n]) for n in names]


def _shown(w: Widget, current: Mapping[str, Any], criteria: tuple[Any, ...]) -> Any:
    """The value a widget starts with: the saved option, else the field's default."""
    value = current.get(w.name, w.default)
    if w.kind == "select" and value is None and w.default_for_rubric:
        value = ("none" if current.get("json_mode") is False
                 else default_response_format(tuple(criteria)))
    if w.kind == "lines":
        return "\n".join(f"{a} = {b}" for a, b in (value or {}).items())
    if w.kind == "json":
        return "" if value is None else json.dumps(value, indent=2)
    if w.kind == "text":
        return " ".join(value) if isinstance(value, list) else ("" if value is None
                                                                  else str(value))
    if w.kind == "textarea":
        return "" if value is None else str(value)
    return value


def options_from_form(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[screener]`` options for ``kind`` from the form's values, checked by its
    options model (empty text fields left out).

    Checks what the model cannot: a key-variable field holds a variable name (never a key),
    a JSON field is JSON, ``key = value`` lines are well formed.
    """
    widgets = {w.name: w for w in form_widgets(kind)}
    opts: dict[str, Any] = {}
    for name, raw in values.items():
        w = widgets.get(name)
        if w is None:
            continue
        if w.kind == "text":
            text = str(raw or "").strip()
            val: Any = check_env_name(text) if w.secret_name else (text or None)
        elif w.kind == "lines":
            val = parse_paths(str(raw or ""), name) or None
        elif w.kind == "json":
            text = str(raw or "").strip()
            try:
                val = json.loads(text) if text else None
            except json.JSONDecodeError as exc:
                raise InputError(f"{w.label} is not JSON: {exc.msg} at line {exc.lineno} "
                                 f"(field '{name}')") from None
        elif w.kind == "textarea":
            val = "" if raw is None else str(raw)
        else:
            val = raw
        if val is not None:
            opts[name] = val
    validate_options(kind, opts)
    return opts


# ============================================================================ widgets
def _key(audit_id: str, kind: str, name: str) -> str:
    return f"scr-{audit_id}-{kind}-{name}"


def _draw(where: Any, w: Widget, value: Any, key: str) -> Any:
    """One widget in ``where`` (a column or the page)."""
    if w.kind == "checkbox":
        return where.checkbox(w.label, value=bool(value), key=key, help=w.help)
    if w.kind == "number":
        cast = int if w.integer else float
        lo = None if w.min_value is None else cast(w.min_value)
        hi = None if w.max_value is None else cast(w.max_value)
        start = cast(value if value is not None else (lo or 0))
        if w.integer is False and lo is not None and start < lo:
            start = lo
        return where.number_input(w.label, min_value=lo, max_value=hi, value=start,
                                  step=None if w.step is None else cast(w.step), key=key,
                                  help=w.help)
    if w.kind == "select":
        choices = list(w.choices)
        return where.selectbox(w.label, choices,
                               index=choices.index(value) if value in choices else 0,
                               format_func=lambda c: w.choice_labels.get(c, str(c)), key=key,
                               help=w.help)
    if w.kind in ("textarea", "lines", "json"):
        return where.text_area(w.label, value=value, key=key, help=w.help,
                               placeholder=w.placeholder,
                               height=80 if w.kind == "lines" else 110)
    return where.text_input(w.label, value=value, key=key, help=w.help,
                            placeholder=w.placeholder)


def _options_fields(audit_id: str, kind: str, current: Mapping[str, Any],
                    sheet: FreezeSheet) -> dict[str, Any]:
    """The options fields of ``kind``, two narrow fields to a row, the others full width."""
    values: dict[str, Any] = {}
    row: list[Any] = []
    for w in form_widgets(kind):
        value = _shown(w, current, sheet.criteria)
        if w.name == "model":
            w = dataclasses.replace(w, placeholder=sheet.model or w.placeholder)
        if w.narrow:
            if not row:
                row = list(st.columns(2))
            values[w.name] = _draw(row.pop(0), w, value, _key(audit_id, kind, w.name))
        else:
            row = []
            values[w.name] = _draw(st, w, value, _key(audit_id, kind, w.name))
    return values


def _limits_fields(audit_id: str, kind: str, limits: Mapping[str, Any]) -> dict[str, Any]:
    """The run-level call limits kept with the screener (RunOptions fields)."""
    cls = SCREENERS[kind]
    lim: dict[str, Any] = {}

    def k(name: str) -> str:
        return _key(audit_id, kind, name)

    if cls.uses_http:
        l1, l2, l3 = st.columns(3)
        lim["timeout_s"] = l1.number_input("Timeout per call (s)", min_value=1, step=10,
                                           value=int(math.ceil(limits["timeout_s"])),
                                           key=k("limit-timeout"))
        lim["max_retries"] = l2.number_input("Max retries per call", min_value=0,
                                             max_value=20, step=1,
                                             value=int(limits["max_retries"]),
                                             key=k("limit-retries"))
        lim["rpm"] = l3.number_input("Requests per minute (0 = no limit)", min_value=0,
                                     step=60, value=int(limits["rpm"] or 0), key=k("limit-rpm"))
    if cls.answers_may_be_invalid:
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
    return lim


def render_screener_form(store: Any, audit_id: str, settings: Mapping[str, Any],
                         sheet: FreezeSheet, secrets: Mapping[str, Any] | None) -> bool:
    """The screener form; saves into the audit settings when valid. True when it saved."""
    saved_kind, saved = saved_screener(settings)
    limits = saved_limits(settings)
    kinds = available_kinds()
    saved_cls = SCREENERS.get(saved_kind)
    if saved_cls is not None and saved_cls.runs_code and saved_kind not in kinds:
        st.error("This audit's saved screener runs code on this machine "
                 f"({kind_title(saved_kind).lower()}); code-running screeners are off unless "
                 f"the operator starts the app with {CODE_SCREENERS_VAR}=1, so it is not "
                 "used. Choose another kind below.")
    kind = st.selectbox("Screener kind", kinds,
                        index=kinds.index(saved_kind) if saved_kind in kinds else 0,
                        format_func=kind_title, key=f"scr-{audit_id}-kind")
    cur = saved if kind == saved_kind else {}
    with st.form(f"screener-form-{audit_id}-{kind}", border=True):
        values = _options_fields(audit_id, kind, cur, sheet)
        lim = _limits_fields(audit_id, kind, limits)
        submitted = st.form_submit_button("Save the screener", type="primary")
    if not submitted:
        warn = model_mismatch(cur, sheet)
        if warn:
            st.warning(md_escape(warn))
        return False
    if "timeout_s" in values and "timeout_s" not in lim:
        lim["timeout_s"] = values["timeout_s"]    # a program's timeout is the call's
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
    st.success(f"Screener saved: {kind_title(kind)}.")
    warn = model_mismatch(options, sheet)
    if warn:
        st.warning(md_escape(warn))
    return True


def _summary(kind: str, options: Mapping[str, Any], limits: Mapping[str, Any],
             sheet: FreezeSheet | None) -> pd.DataFrame:
    rows: list[tuple[str, str]] = [("kind", kind_title(kind)),
                                   ("model", str(options.get("model") or
                                                 f"{sheet.model if sheet else ''} (frozen)"))]
    skip = {"model", "prompt", "system"}
    for key, val in options.items():
        if key in skip:
            continue
        if isinstance(val, (dict, list)):
            val = json.dumps(val, sort_keys=True)
        rows.append((key, str(val)))
    cls = SCREENERS.get(kind)
    if cls is not None and cls.uses_http:
        rows += [("timeout_s", num(limits["timeout_s"])),
                 ("max_retries", num(limits["max_retries"])),
                 ("rpm", "no limit" if not limits["rpm"] else num(limits["rpm"]))]
    return pd.DataFrame(rows, columns=["setting", "value"])


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
