"""The ratings panel: read, validate, or build it from stored audits (SPEC §2, §5).

A panel has one row per rating: ``batch`` (ISO date), ``rater``, ``score`` and optionally
``item`` and ``category``. :func:`read_panel` reads CSV / Parquet / JSON Lines (or a DataFrame)
and :func:`validate_panel` checks it, listing every bad value with its line (as a spreadsheet
shows it), column and value. :func:`panel_from_audits` builds a panel from this database's audits.
:func:`parse_dates` reads the deployment and step dates every stage uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from core.errors import InputError
from core.store.files import open_table
from core.tables import FAULT_CAP, Fault, FileFaults, require_columns, shown_value

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


def validate_panel(df: pd.DataFrame, display: str = "panel", *,
                   lines: Sequence[int] | None = None, locator: str = "row") -> pd.DataFrame:
    """Check and normalise a ratings panel (SPEC §2).

    Parameters
    ----------
    df : DataFrame
        Columns ``batch`` (ISO date), ``rater``, ``score`` and optionally ``item``,
        ``category``; other columns are ignored.
    display : str
        File name used in messages.
    lines, locator : where each row of ``df`` stands in its file (the line a spreadsheet
        shows, the header being line 1; or a Parquet row) and the word for it; without them a
        fault names the 1-based row of ``df``.

    Returns
    -------
    DataFrame
        ``batch`` as normalised ``datetime64``, ``rater`` / ``item`` / ``category`` as stripped
        strings, ``score`` as float64; sorted by batch, original order otherwise.

    Raises
    ------
    InputError
        Missing columns or no rows.
    FileFaults
        Every bad value (up to :data:`~core.tables.FAULT_CAP`, with the count of all): a batch
        that is not an ISO date, an empty rater / item / category, a score that is not a finite
        number — each with its line (or row), column and value.
    """
    if df is None or len(df) == 0:
        raise InputError("the panel has no rows", file=display)
    require_columns(df, _REQUIRED, display, "a ratings panel (batch, rater, score)")
    df = df.reset_index(drop=True)
    where = np.asarray(lines if lines is not None else np.arange(1, len(df) + 1))
    faults: list[Fault] = []
    total = 0

    def refuse(bad: np.ndarray, column: str, message: Callable[[str | None], str]) -> None:
        nonlocal total
        idx = np.flatnonzero(bad)
        total += len(idx)
        for i in idx[:FAULT_CAP]:
            v = df[column].iloc[i]
            value = None if _missing(v) else str(v)
            faults.append(Fault(display, int(where[i]), column, value, message(value),
                                locator))

    out = pd.DataFrame(index=range(len(df)))
    raw = df["batch"]
    if pd.api.types.is_datetime64_any_dtype(raw):
        parsed = pd.to_datetime(raw, errors="coerce")
    else:
        parsed = pd.to_datetime(raw.astype("string").str.strip(), format="ISO8601",
                                errors="coerce", utc=True)
    refuse(parsed.isna().to_numpy(), "batch", lambda v: (
        "empty is not an ISO date (YYYY-MM-DD)" if v is None or not v.strip() else
        f"{shown_value(v)} is not an ISO date (YYYY-MM-DD)"))
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert(None)
    out["batch"] = parsed.dt.normalize().astype("datetime64[ns]")
    for col in ("rater", "item", "category"):
        if col not in df.columns:
            continue
        s = df[col]
        text = s.astype("string").str.strip()
        refuse((s.isna() | (text == "")).fillna(True).to_numpy(), col,
               lambda v: "is empty; every row needs a value here")
        out[col] = text.astype(str).to_numpy()
    score = df["score"]
    is_bool = score.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
    values = pd.to_numeric(score.where(~is_bool, np.nan), errors="coerce").to_numpy(
        dtype="float64")
    refuse(~np.isfinite(values) | is_bool, "score", lambda v: (
        "empty is not a finite number" if v is None or not v.strip() else
        f"{shown_value(v)} is not a finite number"))
    if total:
        raise FileFaults(faults, total)
    out["score"] = values
    return out.sort_values("batch", kind="stable").reset_index(drop=True)


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and np.isnan(v))


def read_panel(source: str | Path | bytes | IO[bytes] | pd.DataFrame, *,
               name: str | None = None) -> pd.DataFrame:
    """Read and validate a ratings panel from CSV / Parquet / JSON Lines (or a DataFrame).

    See :func:`validate_panel` for the columns and the errors.
    """
    if isinstance(source, pd.DataFrame):
        return validate_panel(source, name or "panel")
    with open_table(source, name=name, what="panel") as t:
        df, lines = t.as_frame(), t.lines()
        return validate_panel(df, t.name, lines=lines, locator=t.locator)


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
