"""The Run page's console around the screener: call limits, the price table, the estimate panel.

The rules live in core — :func:`core.estimate.audit_estimate` estimates,
:class:`core.run.options.PriceTable` prices, :class:`core.run.options.RunOptions` bounds the
limits. This module only turns widgets into the values core expects, and back.
The screener form itself is :mod:`ui.screener_form` (generated from the adapters' options models).

No pydantic here: the Sample page draws the estimate panel from this module, and only the Run
page's form loads the options models.

The helpers at the top take and return plain values (no widget), so they are tested without a
browser; the ``render_*`` functions draw widgets.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from core.errors import AuditError, InputError
from core.estimate import Estimate
from core.format import md_escape, money, num, seconds
from core.freeze import FreezeSheet
from core.run.options import PriceTable, RunOptions
from core.screeners.base import Screener
from ui.state import show_error

__all__ = [
    "LIMIT_KEYS", "destination", "limits_from_form", "model_mismatch", "prices_frame",
    "prices_from_frame", "render_estimate", "render_prices", "run_options", "saved_limits",
    "streamlit_secrets",
]

#: Run-level call limits kept in the audit settings next to the screener (RunOptions fields).
LIMIT_KEYS = ("timeout_s", "max_retries", "rpm", "on_invalid", "max_calls_per_pair")
_LIMIT_DEFAULTS = {"timeout_s": RunOptions.timeout_s, "max_retries": RunOptions.max_retries,
                   "rpm": None, "on_invalid": RunOptions.on_invalid,
                   "max_calls_per_pair": RunOptions.max_calls_per_pair}


# ============================================================================ plain helpers
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


def saved_limits(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Timeout, retries and requests-per-minute kept with the audit (defaults when unset)."""
    return {k: settings.get(k, d) if settings.get(k) is not None else d
            for k, d in _LIMIT_DEFAULTS.items()}


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


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
