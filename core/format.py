"""Display formatting for pages and reports alike: rounding happens here, never in the statistics.

No streamlit import. User text (candidate ids, criterion names, file names) goes into tables and
plain text; where it has to sit inside another format it is escaped for that target, here and
only here:

* Markdown — :func:`md_escape` (inline) and :func:`md_cell` (a table cell: no newline, no pipe);
* HTML — :func:`html_escape`;
* a terminal — :func:`term_escape` (control characters and ANSI escapes shown, never obeyed);
* a CSV a spreadsheet will open — :func:`csv_safe` (a leading ``= + - @``, tab or CR neutralised).
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import pandas as pd

__all__ = ["md_escape", "md_cell", "html_escape", "term_escape", "csv_safe", "csv_safe_frame",
           "pvalue", "num", "pct", "pts", "money", "criteria_display", "flip_display",
           "seconds", "live_line", "LIVE_LINE_RE", "MISSING"]

#: How a missing figure reads, everywhere.
MISSING = "—"

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md_escape(text: Any) -> str:
    """Escape Markdown (and HTML-looking) characters so user text renders literally."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def md_cell(text: Any) -> str:
    """User text for one Markdown table cell: markup escaped, newlines and pipes neutralised."""
    return md_escape(" ".join(str(text).splitlines())).replace("\r", " ")


def html_escape(text: Any) -> str:
    """Escape user text for HTML (quotes included)."""
    return html.escape(str(text), quote=True)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def term_escape(text: Any) -> str:
    """User text for a terminal: control characters (ANSI escapes, CR, NUL…) shown as ``\\xNN``.

    Newlines inside user text are shown as ``\\n`` so an id can never forge a line of output.
    """
    s = str(text).replace("\n", "\\n")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """A cell for a CSV a spreadsheet may open: text starting like a formula gets a leading ``'``.

    Numbers pass unchanged (a negative score is a number, not a formula).
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`csv_safe` over every text column of a frame (a copy)."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(csv_safe)
    out.columns = [csv_safe(str(c)) for c in out.columns]
    return out


def pvalue(p: float | None, *, reps: int | None = None) -> str:
    """A p-value for reading: ``< 0.001`` below 0.001; from a bootstrap of ``reps`` replications
    never ``0`` but ``< 1/reps``."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return MISSING
    p = float(p)
    if reps is not None and p * reps < 1:
        return f"< 1/{reps:,}"
    if p < 0.001:
        return "< 0.001"
    if p < 0.01:
        return f"{p:.3f}"
    return f"{p:.2f}"


def num(x: Any, nd: int = 1) -> str:
    """A number for display; ``—`` for missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    if x.is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.{nd}f}"


def pts(x: Any) -> str:
    """A score in points: integers plain, else one decimal."""
    return num(x, 1)


def pct(x: Any, nd: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{100 * float(x):.{nd}f}%"


def money(x: float | None) -> str:
    """Dollars: cents from 10 cents up, three significant digits below (a pilot costs cents)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    if x == 0:
        return "$0.00"
    if abs(x) >= 0.1:
        return f"${x:,.2f}"
    return f"${x:.3g}" if abs(x) >= 1e-6 else "< $0.000001"


def seconds(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "—"
    if s < 9.95:
        return f"{s:.1f} s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def criteria_display(table: pd.DataFrame) -> pd.DataFrame:
    """The per-criterion table with readable column names and rounded numbers."""
    t = table.copy()
    out = pd.DataFrame({
        "criterion": t["criterion"].astype(str),
        "max points": t["max_points"].map(lambda v: num(v, 1)),
        "within-SD (noise)": t["within_sd"].round(2),
        "between-SD (signal)": t["between_sd"].round(2),
        "share of the total's noise": t["share_of_within_variance"].map(lambda v: pct(v, 0)),
        "verdict": t["verdict"].fillna("").astype(str),
    })
    return out


def flip_display(table: pd.DataFrame, limit: int | None = None) -> pd.DataFrame:
    """The flip table, flipping candidates first (largest flip rate first)."""
    t = table.sort_values(["flips", "flip_rate", "disagreement", "candidate_id"],
                          ascending=[False, False, False, True], kind="stable")
    if limit is not None:
        t = t.head(limit)
    return pd.DataFrame({
        "candidate": t["candidate_id"].astype(str),
        "passes / runs": [f"{int(k)}/{int(n)}" for k, n in zip(t["passes"], t["runs"])],
        "flip rate": (100 * t["flip_rate"]).round(1),
        "disagreement": (100 * t["disagreement"]).round(1),
        "pass rate 95% interval": [f"{100 * lo:.0f}–{100 * hi:.0f}%"
                                   for lo, hi in zip(t["ci_low"], t["ci_high"])],
        "mean total": t["mean"].round(1),
        "flips": t["flips"].astype(bool),
    })


#: The machine-readable live line (``live_line``) — browser tests and the benchmark parse it.
LIVE_LINE_RE = re.compile(
    r"cutoff (?P<cutoff>[-\d.]+) · candidates with any flip (?P<flips>\d+) of (?P<of>\d+) · "
    r"manual reviews per req (?P<reviews>[-\d.]+|needs the pool)")


def live_line(cutoff: float, flips: int, candidates: int, reviews: float | None) -> str:
    """``cutoff 78 · candidates with any flip 18 of 40 · manual reviews per req 62.0``."""
    rv = "needs the pool" if reviews is None else f"{reviews:.1f}"
    return (f"cutoff {cutoff:g} · candidates with any flip {flips} of {candidates} · "
            f"manual reviews per req {rv}")


def excerpt(text: Any, limit: int = 200) -> str:
    """A raw answer shortened to ``limit`` characters (``…`` and the full length when cut), with
    newlines and control characters shown escaped (``\\n``, ``\\x1b``): one safe line."""
    s = "" if text is None else str(text)
    short = s if len(s) <= limit else s[:limit] + f"… ({len(s):,} characters)"
    return term_escape(short)
