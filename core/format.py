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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported where a frame is built: `import` and the CLI
    import pandas as pd  # start without it

__all__ = ["md_escape", "md_cell", "html_escape", "term_escape", "term_lines", "csv_safe",
           "csv_safe_frame",
           "pvalue", "num", "decimals", "pct", "points_change", "pts", "money", "criteria_display",
           "flip_display", "seconds", "live_line", "LIVE_LINE_RE", "compare_line",
           "COMPARE_LINE_RE", "MISSING", "score_precision", "sd", "share",
           "sd_table", "criteria_column_help", "count", "overdue_text",
           "readable", "p_equals", "ordinal", "reviews_txt", "fixed", "score", "ratio"]

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


def term_lines(text: Any) -> str:
    """A multi-line report for a terminal: each line through :func:`term_escape`, the report's
    own line breaks kept."""
    return "\n".join(term_escape(line) for line in str(text).split("\n"))


def csv_safe(value: Any) -> Any:
    """A cell for a CSV a spreadsheet may open: text starting like a formula gets a leading ``'``.

    Numbers pass unchanged (a negative score is a number, not a formula).
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`csv_safe` over every text column of a frame (a copy)."""
    import pandas as pd

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


def _missing(x: Any) -> bool:
    if x is None:
        return True
    try:
        return bool(math.isnan(float(x)))
    except (TypeError, ValueError):
        return False


def _no_negative_zero(text: str) -> str:
    """``-0.00`` → ``0.00`` (a rounding artefact, not a sign)."""
    if text.startswith("-") and not any(ch in "123456789" for ch in text):
        return text[1:]
    return text


def num(x: Any, nd: int = 1) -> str:
    """A number for display; ``—`` for missing; never ``-0.0``."""
    if _missing(x):
        return MISSING
    x = float(x)
    if x.is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return _no_negative_zero(f"{x:,.{nd}f}")


def count(n: Any) -> str:
    """A count with thousands separators (``1,050,000``); ``—`` for missing."""
    if _missing(n):
        return MISSING
    return f"{int(n):,}"


def score_precision(max_points: Any) -> int:
    """Decimals for SDs of a rubric's scores: two more than the rubric's own maxima carry
    (integer maxima → 2), so a DEAD criterion reads ``0.00`` and never ``-2e-19``."""
    vals = [float(v) for v in (max_points if max_points is not None else [])
            if not _missing(v)]
    places = 0
    for v in vals:
        text = f"{v:.6f}".rstrip("0").rstrip(".")
        places = max(places, len(text.split(".")[1]) if "." in text else 0)
    return min(places, 4) + 2


def sd(x: Any, nd: int = 2) -> str:
    """A standard deviation with ``nd`` decimals (see :func:`score_precision`)."""
    if _missing(x):
        return MISSING
    return _no_negative_zero(f"{float(x):.{nd}f}")


def decimals(x: Any, nd: int = 3) -> str:
    """A number with exactly ``nd`` decimals (an estimate, its SE, a p-value beside its
    statistic): ``—`` for missing, ``∞`` / ``−∞`` for an unbounded end, never ``-0.000``."""
    if _missing(x):
        return MISSING
    v = float(x)
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    return _no_negative_zero(f"{v:.{nd}f}")


def share(x: Any) -> str:
    """A share of the total's noise: whole percent, one decimal under 1%, and a negative share
    stays visibly negative (``−0.4%``, never ``-0%``)."""
    if _missing(x):
        return MISSING
    p = 100 * float(x)
    if p == 0:
        return "0%"
    if abs(p) >= 1:
        text = f"{p:.0f}%"
    elif abs(p) >= 0.1:
        text = f"{p:.1f}%"
    else:
        text = f"{p:.2f}%" if abs(p) >= 0.01 else ("< 0.01%" if p > 0 else "> −0.01%")
    return text.replace("-", "−")


def pts(x: Any) -> str:
    """A score in points: integers plain, else one decimal."""
    return num(x, 1)


#: Above this magnitude :func:`fixed` and :func:`score` use scientific notation (never 300
#: digits).
_HUGE = 1e12


def _finite(x: Any) -> bool:
    try:
        return x is not None and not isinstance(x, bool) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fixed(x: Any, nd: int = 1) -> str:
    """A number with ``nd`` decimals and no separators (the reports' tables); ``—`` when missing
    or not finite; four significant digits from 1e12 up."""
    if not _finite(x):
        return MISSING
    x = float(x)
    return f"{x:.4g}" if abs(x) >= _HUGE else f"{x:.{nd}f}"


def score(x: Any) -> str:
    """A score for prose: integers without decimals, else one decimal; ``—`` when missing."""
    if not _finite(x):
        return MISSING
    x = float(x)
    if abs(x) >= _HUGE:
        return f"{x:.4g}"
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.1f}"


def ratio(x: Any, nd: int = 2) -> str:
    """A variance ratio: ``nd`` decimals (:func:`num`), three significant digits from 1e6 up;
    ``—`` when missing."""
    if _missing(x):
        return MISSING
    return num(x, nd) if abs(float(x)) < 1e6 else f"{float(x):.3g}"


def pct(x: Any, nd: int = 0) -> str:
    """A proportion in percent with ``nd`` decimals; ``—`` when missing or not finite."""
    if not _finite(x):
        return MISSING
    return _no_negative_zero(f"{100 * float(x):.{nd}f}") + "%"


def points_change(x: Any) -> str:
    """A change in a proportion, in percentage points with its sign: ``−11``, ``+3``, ``−0.4``.

    Whole points, except a change smaller than one point (one decimal), so a small change is
    never shown as 0; a true minus sign (−), ``0`` for no change, ``—`` for missing.
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    v = 100 * float(x)
    if v == 0:
        return "0"
    text = f"{v:+.0f}" if abs(v) >= 0.95 else f"{v:+.1f}"
    return text.replace("-", "−")


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
    import pandas as pd

    t = table.copy()
    nd = score_precision(t["max_points"])
    out = pd.DataFrame({
        "criterion": t["criterion"].astype(str),
        "max points": t["max_points"].map(lambda v: num(v, 1)),
        "within-SD (noise)": t["within_sd"].map(lambda v: sd(v, nd)),
        "between-SD (signal)": t["between_sd"].map(lambda v: sd(v, nd)),
        "share of the total's noise": [MISSING if c == "total" else share(v) for c, v in
                                       zip(t["criterion"], t["share_of_within_variance"])],
        "verdict": t["verdict"].fillna("").astype(str),
    })
    return out


def criteria_column_help() -> dict[str, str]:
    """Tooltips of the per-criterion table's columns (what a ``—`` means included)."""
    return {
        "max points": "the rubric's maximum for the criterion; — when the rubric does not say",
        "within-SD (noise)": "how much the criterion moves between runs of the same application",
        "between-SD (signal)": "how much the criterion separates candidates (SD of their means)",
        "share of the total's noise": "the criterion's part of the total's run-to-run variance; "
                                      "a negative share moves against the rest and cancels "
                                      "part of the noise; — for the total itself",
    }


def sd_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per-candidate SD of the total with its 95% interval, for reading."""
    import pandas as pd

    return pd.DataFrame({
        "candidate": table["candidate_id"].astype(str),
        "runs": table["runs"].map(count),
        "mean total": table["mean"].map(lambda v: num(v, 1)),
        "SD": table["sd"].map(lambda v: sd(v, 2)),
        "95% interval": [f"{sd(lo, 2)} – {sd(hi, 2)}" for lo, hi in
                         zip(table["sd_ci_low"], table["sd_ci_high"])],
    })


def flip_display(table: pd.DataFrame, limit: int | None = None) -> pd.DataFrame:
    """The flip table, flipping candidates first (largest flip rate first)."""
    import pandas as pd

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
    r"manual reviews per req (?P<reviews>[-\d.,]+|needs the pool)")


def live_line(cutoff: float, flips: int, candidates: int, reviews: float | None) -> str:
    """``cutoff 78 · candidates with any flip 18 of 40 · manual reviews per req 62``."""
    rv = "needs the pool" if reviews is None else reviews_txt(reviews)
    return (f"cutoff {cutoff:g} · candidates with any flip {flips} of {candidates} · "
            f"manual reviews per req {rv}")


def excerpt(text: Any, limit: int = 200) -> str:
    """A raw answer shortened to ``limit`` characters (``…`` and the full length when cut), with
    newlines and control characters shown escaped (``\\n``, ``\\x1b``): one safe line."""
    s = "" if text is None else str(text)
    short = s if len(s) <= limit else s[:limit] + f"… ({len(s):,} characters)"
    return term_escape(short)


#: The Compare page's machine-readable live line (:func:`compare_line`).
COMPARE_LINE_RE = re.compile(
    r"cutoff (?P<cutoff>[-\d.]+) · A: flips (?P<flips_a>\d+) of (?P<of_a>\d+), disagreement "
    r"(?P<dis_a>[\d.]+)%, band (?P<band_a>[-\d.]+ to [-\d.]+) · B: flips (?P<flips_b>\d+) of "
    r"(?P<of_b>\d+), disagreement (?P<dis_b>[\d.]+)%, band (?P<band_b>[-\d.]+ to [-\d.]+)")


def compare_line(cutoff: float, flips: tuple[int, int], candidates: tuple[int, int],
                 disagreement: tuple[float, float], bands: tuple[tuple[float, float],
                                                                 tuple[float, float]]) -> str:
    """``cutoff 78 · A: flips 18 of 40, disagreement 16.8%, band 70.1 to 85.9 · B: …``."""
    sides = []
    for tag, i in (("A", 0), ("B", 1)):
        lo, hi = bands[i]
        sides.append(f"{tag}: flips {flips[i]} of {candidates[i]}, disagreement "
                     f"{100 * disagreement[i]:.1f}%, band {lo:.1f} to {hi:.1f}")
    return f"cutoff {cutoff:g} · " + " · ".join(sides)


def _ago(days: int) -> str:
    if days < 14:
        return f"{days} day{'s' if days != 1 else ''} ago"
    if days < 120:
        return f"{days // 7} weeks ago"
    return f"{days // 30} months ago"


def overdue_text(due: Any, today: Any) -> str | None:
    """``overdue since 2026-09-27, 9 weeks ago`` when ``due`` (a date) is before ``today``;
    ``None`` when it is not (yet) due. Dates or ISO strings."""
    import datetime as _dt

    def _date(v: Any) -> _dt.date | None:
        if v is None:
            return None
        if isinstance(v, _dt.datetime):
            return v.date()
        if isinstance(v, _dt.date):
            return v
        try:
            return _dt.date.fromisoformat(str(v)[:10])
        except ValueError:
            return None

    d, t = _date(due), _date(today)
    if d is None or t is None or d >= t:
        return None
    return f"overdue since {d.isoformat()}, {_ago((t - d).days)}"


_P_COLUMN = re.compile(r"^(p|p[ _(].*|.*p[_-]?value.*|.*_p|holm.*|bh.*|.*\bp\))$", re.I)


def _small(v: Any, nd: int) -> str:
    """``nd`` decimals; a tiny but real value (a variance per week) keeps ``nd`` significant
    digits; floating-point dust (below 1e-12) reads 0."""
    if _missing(v):
        return MISSING
    x = float(v)
    if abs(x) < 1e-12:
        x = 0.0
    if x != 0 and abs(x) < 10 ** -nd:
        return f"{x:.{nd}g}"
    return num(x, nd)


def p_equals(p: float | None, *, reps: int | None = None) -> str:
    """``p < 0.001``, ``p = 0.03``, ``p < 1/999`` (a bootstrap), ``p —``."""
    text = pvalue(p, reps=reps)
    return f"p {text}" if text.startswith("<") or text == MISSING else f"p = {text}"


def readable(df: pd.DataFrame, *, nd: int = 3, reps: dict[str, int] | None = None,
             counts: tuple[str, ...] = ()) -> pd.DataFrame:
    """A results table for reading: p-value columns via :func:`pvalue` (bootstrap columns named
    in ``reps`` as ``< 1/reps`` instead of 0), count columns with separators, other numbers with
    ``nd`` decimals, missing values as ``—``; text and dates unchanged. A copy."""
    import pandas as pd

    out = df.copy()
    reps = reps or {}
    for col in out.columns:
        series = out[col]
        name = str(col)
        if pd.api.types.is_datetime64_any_dtype(series):
            times = series.dropna()
            whole_days = bool(len(times) == 0 or (times == times.dt.normalize()).all())
            out[col] = series.dt.strftime("%Y-%m-%d" if whole_days else "%Y-%m-%d %H:%M") \
                .fillna(MISSING)
            continue
        if not (pd.api.types.is_numeric_dtype(series) or series.dtype == object):
            continue
        if pd.api.types.is_bool_dtype(series):
            continue
        numeric = pd.to_numeric(series, errors="coerce") if series.dtype == object else series
        if series.dtype == object and numeric.notna().sum() < series.notna().sum():
            out[col] = series.map(lambda v: MISSING if _missing(v) else v)
            continue
        if name in counts or pd.api.types.is_integer_dtype(series):
            out[col] = numeric.map(count)
        elif _P_COLUMN.match(name):
            out[col] = numeric.map(lambda v, r=reps.get(name): pvalue(v, reps=r))
        else:
            out[col] = numeric.map(lambda v: _small(v, nd))
    return out


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``40th``."""
    n = int(n)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def reviews_txt(x: Any) -> str:
    """Reviews, decisions or applications per req: people and applications come whole, so a
    count reads as a whole number (``151``, ``410``, ``1,200``); under 10 one decimal keeps
    ``2.4`` expected reversals from reading ``2``."""
    if _missing(x):
        return MISSING
    v = float(x)
    if abs(v) < 10 and not v.is_integer():
        return _no_negative_zero(f"{v:.1f}")
    return f"{round(v):,}"
