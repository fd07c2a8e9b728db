"""The ratings panel: read, validate, or build it from stored audits (SPEC §2, §5).

A panel has one row per rating: ``batch`` (ISO date), ``rater``, ``score`` and optionally
``item`` and ``category``. :func:`read_panel` reads CSV / Parquet / JSON Lines (or a DataFrame)
and :func:`validate_panel` checks it, naming the file, the 1-based row and the column of the
first bad value. :func:`panel_from_audits` builds a panel from this database's audits.
:func:`parse_dates` reads the deployment and step dates every stage uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from core.errors import InputError
from core.tables import numeric_column, read_table, require_columns

__all__ = ["DAYS_PER_MONTH", "DAYS_PER_WEEK", "item_level", "panel_from_audits", "parse_dates",
           "read_panel", "validate_panel"]

_REQUIRED = ["batch", "rater", "score"]
#: The clocks of the method: the state moves per week (stage 2), trends are per month.
DAYS_PER_WEEK = 7.0
DAYS_PER_MONTH = 365.25 / 12.0


def parse_dates(values: Iterable[Any], *, what: str = "deployments") -> list[pd.Timestamp]:
    """Parse ISO dates (``2026-04-12``) from a list or a comma-separated string.

    Raises :class:`InputError` naming ``what`` and the offending text.
    """
    if values is None:
        return []
    if isinstance(values, str):
        values = [v for v in values.split(",")]
    out = []
    for v in values:
        if v is None or (isinstance(v, str) and not v.strip()):
            continue
        if isinstance(v, (pd.Timestamp, date)):
            out.append(pd.Timestamp(v).normalize())
            continue
        ts = pd.to_datetime(str(v).strip(), format="ISO8601", errors="coerce")
        if pd.isna(ts):
            raise InputError(f"{what}: {str(v).strip()!r} is not an ISO date (YYYY-MM-DD)")
        out.append(pd.Timestamp(ts).tz_localize(None).normalize()
                   if getattr(ts, "tzinfo", None) else pd.Timestamp(ts).normalize())
    return sorted(set(out))


def validate_panel(df: pd.DataFrame, display: str = "panel") -> pd.DataFrame:
    """Check and normalise a ratings panel (SPEC §2).

    Parameters
    ----------
    df : DataFrame
        Columns ``batch`` (ISO date), ``rater``, ``score`` and optionally ``item``,
        ``category``; other columns are ignored.
    display : str
        File name used in messages.

    Returns
    -------
    DataFrame
        ``batch`` as normalised ``datetime64``, ``rater`` / ``item`` / ``category`` as stripped
        strings, ``score`` as float64; sorted by batch, original order otherwise.

    Raises
    ------
    InputError
        Missing columns; a batch that is not an ISO date, an empty rater/item/category or a score
        that is not a finite number — each with its 1-based data row and the column.
    """
    if df is None or len(df) == 0:
        raise InputError("the panel has no rows", file=display)
    require_columns(df, _REQUIRED, display, "a ratings panel (batch, rater, score)")
    out = pd.DataFrame(index=range(len(df)))
    raw = df["batch"].reset_index(drop=True)
    if pd.api.types.is_datetime64_any_dtype(raw):
        parsed = pd.to_datetime(raw, errors="coerce")
    else:
        parsed = pd.to_datetime(raw.astype("string").str.strip(), format="ISO8601",
                                errors="coerce", utc=True)
    bad = parsed.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        shown = raw.iloc[i]
        shown = "empty" if pd.isna(shown) or str(shown).strip() == "" else repr(str(shown))
        raise InputError(f"{shown} is not an ISO date (YYYY-MM-DD)", file=display, row=i + 1,
                         column="batch")
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert(None)
    out["batch"] = parsed.dt.normalize().astype("datetime64[ns]")
    for col in ("rater", "item", "category"):
        if col not in df.columns:
            continue
        s = df[col].reset_index(drop=True)
        text = s.astype("string").str.strip()
        empty = (s.isna() | (text == "")).fillna(True).to_numpy()
        if empty.any():
            i = int(np.flatnonzero(empty)[0])
            raise InputError("is empty; every row needs a value here", file=display,
                             row=i + 1, column=col)
        out[col] = text.astype(str).to_numpy()
    out["score"] = numeric_column(df.reset_index(drop=True), "score", display)
    return out.sort_values("batch", kind="stable").reset_index(drop=True)


def read_panel(source: str | Path | bytes | IO[bytes] | pd.DataFrame, *,
               name: str | None = None) -> pd.DataFrame:
    """Read and validate a ratings panel from CSV / Parquet / JSON Lines (or a DataFrame).

    See :func:`validate_panel` for the columns and the errors.
    """
    if isinstance(source, pd.DataFrame):
        return validate_panel(source, name or "panel")
    df, _sha, display = read_table(source, name=name)
    return validate_panel(df, display)


def panel_from_audits(store: Any, audit_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Build a ratings panel from stored audits (``core.store.Store``).

    batch = the audit's date (its first call's ``started_at``, else its creation time),
    rater = the model snapshot that produced the draw (``draws.model``; the frozen model id
    when missing), item = candidate, score = the draw's total (the screener's ``total`` when
    stored, else the weighted sum of its criterion scores, weights from the audit's criteria).
    Raises :class:`InputError` when no audit has draws.
    """
    audits = store.list_audits()
    ids = list(audits["audit_id"]) if audit_ids is None else list(audit_ids)
    frames = []
    for aid in ids:
        draws = store.load_draws(aid)
        if draws.empty:
            continue
        info = store.get_audit(aid)
        calls = store.load_calls(aid)
        started = pd.to_datetime(calls["started_at"]).min() if len(calls) else pd.NaT
        when = started if pd.notna(started) else pd.Timestamp(info["created_at"])
        frozen_model = str(info["freeze"].get("model") or info["freeze"].get("model_id")
                           or "unknown")
        totals = draws[draws["criterion"] == "total"]
        if totals.empty:
            crit = store.get_criteria(aid)
            weights = dict(zip(crit["criterion"], crit["weight"].fillna(1.0))) if len(crit) else {}
            w = draws["criterion"].map(weights).fillna(1.0)
            totals = (draws.assign(score=draws["score"] * w)
                      .groupby(["candidate_id", "run"], as_index=False)
                      .agg(score=("score", "sum"), model=("model", "first")))
        frames.append(pd.DataFrame({
            "batch": pd.Timestamp(when).date().isoformat(),
            "rater": totals["model"].fillna(frozen_model).astype(str).to_numpy(),
            "item": totals["candidate_id"].astype(str).to_numpy(),
            "score": totals["score"].to_numpy(dtype=float)}))
    if not frames:
        raise InputError("no stored audit has draws; run or import an audit first, or upload "
                         "a ratings panel")
    return validate_panel(pd.concat(frames, ignore_index=True), "stored audits")




def item_level(panel: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The panel the overall analysis uses, and a note saying how it was formed.

    With both ``category`` and ``item`` columns each item's overall score is the mean of its
    category scores (one row per batch, rater and item); otherwise the panel as it is and
    ``None``.
    """
    if "category" in panel.columns and "item" in panel.columns:
        agg = (panel.groupby(["batch", "rater", "item"], sort=False, as_index=False)["score"]
               .mean())
        return agg, ("the panel has categories and items: the overall score is each item's "
                     "mean over its categories")
    return panel, None
