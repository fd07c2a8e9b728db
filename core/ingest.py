"""Reading and validating draws, pools and criteria files from outside.

Two phases, so a user sees a validation summary before anything is stored:

1. :func:`validate_draws` / :func:`validate_pool` read a file (CSV, Parquet, JSON Lines; long or
   wide, auto-detected) through :func:`core.tables.open_table` (bounds checked before reading;
   DuckDB's own readers; checks in SQL), check every rule of SPEC §2 and return a normalized,
   ready-to-write object — or raise :class:`~core.tables.FileFaults` listing **every** fault (up
   to :data:`~core.tables.FAULT_CAP`, with a count of the rest), each with the line a
   spreadsheet shows (the header is line 1), the column and the value.
2. :func:`commit_draws` / :func:`commit_pool` write it in one transaction. Re-importing the same
   file is a no-op; a rejected import writes nothing. Draws go only into a new audit, or into
   an audit whose sample holds their candidates, whose frozen model they report and whose
   rubric holds their criteria (audits stay what they were frozen as).

Plausibility (issue 8): with a criterion's max points, a score outside ``0..max`` is a fault (or
clipped and counted with ``clip``). Without them, a score beyond :data:`ABSURD` or more than
:data:`OUTLIER_FACTOR` × the 99th percentile of ``|score|`` of its criterion is a fault naming
the way out (``--criteria`` with maxima, then ``--clip``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pandas as pd

from core.draws import TOTAL
from core.errors import InputError
from core.freeze import Criterion, FreezeSheet, parse_criteria_spec
from core.store import Store
from core.tables import (
    FAULT_CAP,
    Fault,
    FileFaults,
    FileTable,
    Limits,
    numeric_column,
    open_table,
    read_table,
    require_columns,
    shown_value,
)

__all__ = [
    "DrawsImport",
    "PoolImport",
    "FileFaults",
    "Fault",
    "FAULT_CAP",
    "check_target",
    "Limits",
    "validate_draws",
    "validate_pool",
    "commit_draws",
    "commit_pool",
    "import_draws",
    "import_pool",
    "read_criteria",
    "check_criteria",
    "criteria_frame",
    "faults_frame",
    "ranges_frame",
    "target_criteria",
    "LONG_COLUMNS",
    "OPTIONAL_COLUMNS",
    "OUTLIER_FACTOR",
    "ABSURD",
    "MAX_POINTS_CAP",
    "MAX_WEIGHT",
]

LONG_COLUMNS = ["candidate_id", "run", "criterion", "score"]
OPTIONAL_COLUMNS = ["request_id", "model", "raw_payload", "stratum", "first_pass_score"]
_STRATA = ("band", "high", "low", "between")

#: Without maxima, a score more than this many times its criterion's 99th percentile of
#: ``|score|`` (at least 1 point) is refused as implausible.
OUTLIER_FACTOR = 100.0
#: Without maxima, a score beyond this in absolute value is refused.
ABSURD = 1e6
#: Max points and weights accepted for a criterion.
MAX_POINTS_CAP = 1e6
MAX_WEIGHT = 1000.0
#: Run numbers accepted (runs are numbered 1, 2, 3…).
MAX_RUN = 1_000_000

Source = str | Path | bytes | IO[bytes]

_WAY_OUT = ("give the criteria maxima (--criteria name:max,… or the maxima field of the upload "
            "form) so the range is checked, and --clip to clip what is outside")


@dataclass(frozen=True)
class DrawsImport:
    """A validated draws file, normalized to long form, not yet written."""

    file_name: str
    sha256: str
    layout: str  # "long" or "wide"
    draws: pd.DataFrame  # candidate_id, run, criterion, score, request_id, model, clipped
    calls: pd.DataFrame  # one row per (candidate, run)
    candidates: pd.DataFrame  # candidate_id, stratum, first_pass_score, application
    criteria: list[Criterion]
    rows: int
    clipped: int
    warnings: list[str] = field(default_factory=list)
    #: per criterion (and the total): n, min, median, max, p99_abs, max_points
    ranges: pd.DataFrame = field(default_factory=pd.DataFrame)

    def summary(self) -> dict[str, Any]:
        runs = self.calls.groupby("candidate_id")["run"].nunique()
        return {
            "file": self.file_name, "layout": self.layout, "rows": self.rows,
            "candidates": int(runs.size),
            "runs_min": int(runs.min()), "runs_max": int(runs.max()),
            "evaluations": int(len(self.calls)),
            "criteria": [c.name for c in self.criteria],
            "has_total": bool((self.draws["criterion"] == TOTAL).any()),
            "has_payloads": bool(self.calls["raw_payload"].notna().any()),
            "has_strata": bool(self.candidates["stratum"].notna().any()),
            "has_first_pass": bool(self.candidates["first_pass_score"].notna().any()),
            "models": sorted(str(m) for m in self.calls["model"].dropna().unique()),
            "clipped": self.clipped, "warnings": list(self.warnings),
            "ranges": self.ranges.to_dict("records"),
        }


@dataclass(frozen=True)
class PoolImport:
    file_name: str
    sha256: str
    pool: pd.DataFrame  # candidate_id, first_pass_score


# ----------------------------------------------------------------------------- criteria
def check_criteria(criteria: list[Criterion], *, where: str = "criteria") -> list[Criterion]:
    """Refuse criteria with non-finite, non-positive or absurd maxima, or non-finite, negative
    or absurd weights, or a name given twice. Returns the list unchanged."""
    seen: set[str] = set()
    for c in criteria:
        name = str(c.name)
        if name in seen:
            raise InputError(f"{where}: '{name}' is given twice; keep one")
        seen.add(name)
        if c.max_points is not None:
            m = float(c.max_points)
            if not math.isfinite(m) or m <= 0 or m > MAX_POINTS_CAP:
                raise InputError(f"{where}: max points of '{name}' must be a positive number up "
                                 f"to {MAX_POINTS_CAP:,.0f}, not {c.max_points!r}")
        w = float(c.weight)
        if not math.isfinite(w) or w < 0 or w > MAX_WEIGHT:
            raise InputError(f"{where}: the weight of '{name}' must be a number from 0 to "
                             f"{MAX_WEIGHT:,.0f}, not {c.weight!r}")
    return criteria


def read_criteria(spec: str | Path | list[Criterion] | None) -> list[Criterion]:
    """Criteria from ``"name:max[:weight],…"`` or a CSV/JSONL file with ``criterion|name, max,
    weight`` columns (checked by :func:`check_criteria`)."""
    if spec is None:
        return []
    if isinstance(spec, list):
        return check_criteria(list(spec))
    if str(spec).strip() == "":
        return []
    path = Path(str(spec))
    if path.suffix.lower() in (".csv", ".jsonl", ".json", ".parquet") or path.exists():
        df, _, display = read_table(path)
        name_col = "criterion" if "criterion" in df.columns else "name"
        require_columns(df, [name_col], display, "a criteria file")
        mx_col = next((c for c in ("max", "max_points") if c in df.columns), None)
        mx = numeric_column(df, mx_col, display, allow_missing=True) if mx_col else None
        w = numeric_column(df, "weight", display, allow_missing=True) \
            if "weight" in df.columns else None
        out = []
        for i, name in enumerate(df[name_col].astype(str)):
            m = None if mx is None or math.isnan(mx[i]) else float(mx[i])
            if m is not None and m <= 0:
                raise InputError("max points must be positive", file=display, row=i + 1,
                                 column=mx_col)
            out.append(Criterion(name.strip(), m,
                                 1.0 if w is None or math.isnan(w[i]) else float(w[i])))
        return check_criteria(out, where=display)
    return check_criteria(parse_criteria_spec(str(spec)))


def criteria_frame(criteria: list[Criterion]) -> pd.DataFrame:
    return pd.DataFrame({"criterion": [c.name for c in criteria],
                         "position": list(range(len(criteria))),
                         "max_points": [c.max_points for c in criteria],
                         "weight": [c.weight for c in criteria]},
                        columns=["criterion", "position", "max_points", "weight"])


def target_criteria(store: Store, audit_id: str) -> list[Criterion]:
    """The criteria (maxima, weights) an existing audit was frozen with; [] for a new one."""
    if not store.audit_exists(audit_id):
        return []
    out = []
    for r in store.get_criteria(audit_id).itertuples():
        out.append(Criterion(str(r.criterion),
                             None if pd.isna(r.max_points) else float(r.max_points),
                             1.0 if pd.isna(r.weight) else float(r.weight)))
    if not out:
        sheet = store.get_audit(audit_id)["freeze"].get("criteria") or []
        for c in sheet:
            if isinstance(c, dict) and c.get("name"):
                out.append(Criterion(str(c["name"]), c.get("max_points"),
                                     float(c.get("weight", 1.0) or 1.0)))
    return out


# ----------------------------------------------------------------------------- draws
def _header_faults(t: FileTable, names: list[str]) -> list[Fault]:
    """Criterion column names (wide) that could not be a criterion name."""
    out = []
    for n in names:
        if n == "" or n.startswith(("=", "@")) or (n[:1] in "+-" and not _is_number(n)) \
                or any(ord(ch) < 32 or ord(ch) == 127 for ch in n):
            out.append(t.fault(1 if t.format == "csv" else None, n or "(empty)", n,
                               f"the column name {shown_value(n)} cannot be a criterion name "
                               "(empty, formula-like or with control characters)"))
    return out


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def validate_draws(source: Source, *, name: str | None = None,
                   criteria: list[Criterion] | str | Path | None = None, clip: bool = False,
                   limits: Limits | None = None) -> DrawsImport:
    """Read and validate a draws file (long or wide). Writes nothing.

    Parameters
    ----------
    source : path, bytes or buffer (a Streamlit upload works)
    name : display name for messages
    criteria : list of Criterion, a spec ``"a:10,b:10:2"`` or a criteria file; gives max points
        (scores outside ``0..max`` are faults, or clipped when ``clip``) and weights. Without
        a max, the plausibility rule applies (:data:`OUTLIER_FACTOR`, :data:`ABSURD`).
    clip : bool
    limits : caps checked before reading (default :meth:`Limits.from_env`)

    Raises
    ------
    InputError
        A fault of the whole file: over a cap, empty, unreadable, missing columns.
    FileFaults
        Every faulty row, each with line, column and value (an ``InputError`` too): a score or
        run that is not a finite number (text, empty, ``inf``, ``1e400``, a boolean); a run that
        is not a whole number from 1; an id that is empty, not text or a whole number, formula-
        like or with control characters; a duplicate ``(candidate_id, run, criterion)``; a
        candidate with fewer than 2 runs; a request id used for two different draws; a
        candidate with two strata or first-pass scores; a score outside ``0..max``; without
        maxima, an implausible score.
    """
    crit_list = read_criteria(criteria)
    limits = limits or Limits.from_env()
    with open_table(source, name=name, limits=limits) as t:
        return _validate_draws(t, crit_list, clip)


def _validate_draws(t: FileTable, crit_list: list[Criterion], clip: bool) -> DrawsImport:
    display = t.name
    cols = set(t.columns)
    faults: list[Fault] = []
    total = 0

    def add(res: tuple[list[Fault], int]) -> None:
        nonlocal total
        faults.extend(res[0])
        total += res[1]

    if cols & {"criterion", "score"}:
        layout = "long"
        _require(t, LONG_COLUMNS, "long draws (candidate_id, run, criterion, score)")
        score_cols: list[str] = []
    else:
        layout = "wide"
        _require(t, ["candidate_id", "run"], "draws (long: candidate_id, run, criterion, "
                 "score; or wide: candidate_id, run, [total], <criterion columns>)")
        score_cols = [c for c in t.columns if c not in {"candidate_id", "run",
                                                          *OPTIONAL_COLUMNS}]
        if not score_cols:
            raise InputError("has no score columns: add a 'total' or one column per criterion",
                             file=display)
        hf = _header_faults(t, score_cols)
        faults.extend(hf)
        total += len(hf)
    # typed columns, built in one pass (a refused value is NULL and listed)
    t.identifier("candidate_id", "_cid", what="candidate id")
    t.number("run", "_run", whole=True, minimum=1, maximum=MAX_RUN)
    if layout == "long":
        t.identifier("criterion", "_crit", what="criterion name", fold=(TOTAL,))
        t.number("score", "_score")
    else:
        for i, c in enumerate(score_cols):
            t.number(c, f"_s{i}")
    extras = {c: t.has(c) for c in OPTIONAL_COLUMNS}
    if extras["request_id"]:
        t.identifier("request_id", "_rid", what="request id", allow_missing=True)
    if extras["model"]:
        t.text("model", "_model")
    if extras["raw_payload"]:
        t.text("raw_payload", "_payload")
    if extras["stratum"]:
        t.text("stratum", "_stratum", allowed=_STRATA, lower=True)
    if extras["first_pass_score"]:
        t.number("first_pass_score", "_fps", allow_missing=True)
    add(t.materialize())

    carry = ", ".join([
        "_rid AS request_id" if extras["request_id"] else "CAST(NULL AS VARCHAR) AS request_id",
        "_model AS model" if extras["model"] else "CAST(NULL AS VARCHAR) AS model",
        "_payload AS raw_payload" if extras["raw_payload"]
        else "CAST(NULL AS VARCHAR) AS raw_payload",
        "_stratum AS stratum" if extras["stratum"] else "CAST(NULL AS VARCHAR) AS stratum",
        "_fps AS first_pass_score" if extras["first_pass_score"]
        else "CAST(NULL AS DOUBLE) AS first_pass_score"])
    run = "CAST(_run AS INTEGER) AS run"
    if layout == "long":
        t.create("lng", f"SELECT _line, _cid AS candidate_id, {run}, "
                        f"_crit AS criterion, _score AS score, 'score' AS _col, "
                        f"'criterion' AS _keycol, {carry} FROM typed", view=True)
    else:
        # one UNPIVOT (not a UNION per column: a wide file may have hundreds of columns)
        t.create_mapping("_wide", ["sc", "criterion", "col"],
                         [[f"_s{i}", TOTAL if c.lower() == TOTAL else c, c]
                          for i, c in enumerate(score_cols)])
        on = ", ".join(f"_s{i}" for i in range(len(score_cols)))
        t.create("lng", f"SELECT u._line, u._cid AS candidate_id, {run}, w.criterion, u.score, "
                        f"w.col AS _col, 'run' AS _keycol, {carry} FROM typed UNPIVOT "
                        f"INCLUDE NULLS (score FOR _sc IN ({on})) AS u JOIN _wide w "
                        "ON u._sc = w.sc")

    # one row per (candidate, run): duplicates, runs per candidate and request ids from it
    t.create("calls", "SELECT candidate_id, run, count(criterion) AS n, "
                      "sum(hash(criterion)) AS hs, min(_line) AS first_line, "
                      "any_value(request_id) AS request_id, any_value(model) AS model, "
                      "any_value(raw_payload) AS raw_payload FROM lng "
                      "WHERE candidate_id IS NOT NULL GROUP BY candidate_id, run")
    # no duplicate when every call holds each of the file's criteria once (same count, same
    # sum of hashes as the set of criteria); otherwise the exact (slower) check decides
    if t.count("SELECT 1 FROM calls, (SELECT count(*) AS c, sum(hash(criterion)) AS h FROM "
               "(SELECT DISTINCT criterion FROM lng WHERE criterion IS NOT NULL)) s "
               "WHERE n <> s.c OR hs <> s.h") and t.count(
            "SELECT 1 FROM lng WHERE candidate_id IS NOT NULL AND run IS NOT NULL AND "
            "criterion IS NOT NULL GROUP BY candidate_id, run, criterion HAVING count(*) > 1"):
        add(t.duplicates("lng", ["candidate_id", "run", "criterion"], "_keycol",
                         describe=lambda key, first: (
                             f"duplicate draw: candidate {shown_value(key[0])}, run {key[1]}, "
                             f"criterion {shown_value(key[2])} already appears on "
                             f"{t.locator} {first}")))
    # a candidate with an unreadable run is left to that row's fault
    add(t.listed("SELECT min(first_line) AS _line, candidate_id, count(run) AS n FROM calls "
                 "GROUP BY candidate_id HAVING count(run) < 2 AND count(*) = count(run)", "run",
                 describe=lambda line, cid, n: (
                     f"candidate {shown_value(cid)} has only {n} run; every candidate needs "
                     "at least 2 runs to measure its spread")))
    if extras["request_id"]:
        add(t.listed("SELECT first_line AS _line, request_id, was_c, was_r, was_line FROM ("
                     "SELECT first_line, request_id, "
                     "first(candidate_id ORDER BY first_line) OVER w AS was_c, "
                     "first(run ORDER BY first_line) OVER w AS was_r, "
                     "min(first_line) OVER w AS was_line, "
                     "row_number() OVER (PARTITION BY request_id ORDER BY first_line) AS rn "
                     "FROM calls WHERE request_id IS NOT NULL "
                     "WINDOW w AS (PARTITION BY request_id)) WHERE rn > 1", "request_id",
                     describe=lambda line, rid, c, r, first: (
                         f"request id {shown_value(rid)} is used by two different draws "
                         f"(candidate {shown_value(c)} run {r} on {t.locator} {first}); every "
                         "call needs a distinct request id")))
    for col in ("stratum", "first_pass_score"):
        if extras[col]:
            add(t.listed(f"SELECT _line, v, was, was_line, cid FROM (SELECT _line, {col} AS v, "
                         "candidate_id AS cid, "
                         f""
                         f"first({col} ORDER BY _line) OVER w AS was, "
                         f"min(_line) OVER w AS was_line FROM lng WHERE {col} IS NOT NULL "
                         "AND candidate_id IS NOT NULL WINDOW w AS (PARTITION BY candidate_id))"
                         " WHERE v IS DISTINCT FROM was AND _line IN (SELECT min(_line) FROM lng"
                         f" WHERE {col} IS NOT NULL GROUP BY candidate_id, {col})", col,
                         describe=lambda line, v, was, first, cid, col=col: (
                             f"candidate {shown_value(cid)} has two different values "
                             f"({shown_value(was)} on "
                             f"{t.locator} {first}, and {shown_value(v)}); one {col} per "
                             "candidate")))

    # rubric bounds, then plausibility where the rubric gives no max
    known = {c.name: c for c in crit_list}
    stats = t.group_stats("lng", "criterion", "score")
    names_in_file = list(stats.sort_values("first_line")["criterion"].astype(str))
    warnings: list[str] = []
    unknown = [c for c in known if c not in names_in_file]
    if unknown:
        warnings.append(f"criteria given but not in the file: {', '.join(unknown)}")
    bounds = {n: (0.0, float(known[n].max_points)) for n in names_in_file
              if n in known and known[n].max_points is not None}
    clipped = 0
    if bounds and not clip:
        add(t.bound_faults("lng", "criterion", "score", "_col", bounds,
                           describe=lambda v, crit, lo, hi: (
                               f"score {v:g} for {shown_value(crit)} is outside {lo:g}..{hi:g} "
                               "(the rubric's max); fix the export or import with clipping "
                               "(--clip)")))
    elif bounds:
        t.set_bounds(bounds)
        clipped = t.count("SELECT 1 FROM lng JOIN _bounds b ON criterion = b.g "
                          "WHERE score < b.lo OR score > b.hi")
    loose = {}
    for r in stats.itertuples(index=False):
        if r.criterion in bounds:
            continue
        p99 = float(r.p99_abs) if r.p99_abs is not None and math.isfinite(r.p99_abs) else 0.0
        limit = min(ABSURD, OUTLIER_FACTOR * max(p99, 1.0))
        loose[str(r.criterion)] = (-limit, limit, p99)
    if loose and (stats["max"].abs().max() > min(v[1] for v in loose.values())
                  or stats["min"].abs().max() > min(v[1] for v in loose.values())):
        add(t.bound_faults("lng", "criterion", "score", "_col",
                           {k: (lo, hi) for k, (lo, hi, _) in loose.items()},
                           describe=lambda v, crit, lo, hi: _implausible(v, crit, hi,
                                                                         loose[crit][2])))
    if total:
        raise FileFaults(faults, total)
    if clipped:
        warnings.append(f"{clipped} score(s) outside 0..max were clipped")
    criteria_out = [known.get(n, Criterion(n)) for n in
                    [c.name for c in crit_list if c.name in names_in_file]
                    + [n for n in names_in_file if n not in known and n != TOTAL]]

    # outputs: the long draws (clipped), one call per (candidate, run), one row per candidate
    rid = "coalesce(c.request_id, 'import:' || c.candidate_id || ':' || c.run)"
    per_call = extras["request_id"] or extras["model"]
    score, flag, join = "l.score", "false", ""
    if clip and bounds:
        t.set_bounds(bounds)
        score = "CASE WHEN b.g IS NULL THEN l.score ELSE least(greatest(l.score, b.lo), b.hi) END"
        flag = "coalesce(b.g IS NOT NULL AND (l.score < b.lo OR l.score > b.hi), false)"
        join = " LEFT JOIN _bounds b ON l.criterion = b.g"
    if per_call:
        draws = t.frame(f"SELECT l.candidate_id, l.run, l.criterion, {score} AS score, "
                        f"{rid} AS request_id, c.model, {flag} AS clipped FROM lng l "
                        f"JOIN calls c USING (candidate_id, run){join}")
    else:
        draws = t.frame(f"SELECT l.candidate_id, l.run, l.criterion, {score} AS score, "
                        "'import:' || l.candidate_id || ':' || l.run AS request_id, "
                        f"{flag} AS clipped FROM lng l{join}")
        draws.insert(5, "model", None)
    calls = t.frame(f"SELECT c.candidate_id, c.run, {rid} AS request_id, c.model, "
                    "c.raw_payload, CASE WHEN c.raw_payload IS NULL THEN NULL ELSE "
                    "sha256(c.raw_payload) END AS payload_sha256 FROM calls c "
                    "ORDER BY c.candidate_id, c.run")
    calls["status"] = "ok"
    calls["source"] = "import"
    calls["attempts"] = 1
    if extras["request_id"] and t.count(f"SELECT {rid} FROM calls c GROUP BY 1 "
                                        "HAVING count(*) > 1"):
        raise InputError("a request id of the file equals one made up for a row without one "
                         "('import:<candidate>:<run>'); give every row its request id or none",
                         file=display, column="request_id")
    per_cand = "lng" if extras["stratum"] or extras["first_pass_score"] else "calls"
    cand = t.frame("SELECT candidate_id, any_value(stratum) AS stratum, "
                   "any_value(first_pass_score) AS first_pass_score, "
                   f"CAST(NULL AS VARCHAR) AS application FROM {per_cand} "
                   "GROUP BY candidate_id ORDER BY candidate_id" if per_cand == "lng" else
                   "SELECT DISTINCT candidate_id, CAST(NULL AS VARCHAR) AS stratum, "
                   "CAST(NULL AS DOUBLE) AS first_pass_score, CAST(NULL AS VARCHAR) AS "
                   "application FROM calls ORDER BY candidate_id")
    for frame, names in ((draws, ("request_id", "model")),
                         (calls, ("request_id", "model", "raw_payload", "payload_sha256")),
                         (cand, ("stratum", "application"))):
        for c in names:
            missing = frame[c].isna()
            if missing.all():
                frame[c] = None
            elif missing.any():
                frame[c] = frame[c].astype(object).where(~missing, None)
    ranges = stats.drop(columns="first_line") if not clipped else t.frame(
        "SELECT criterion, count(*) AS n, min(s) AS min, median(s) AS median, max(s) AS max, "
        "quantile_cont(abs(s), 0.99) AS p99_abs FROM (SELECT l.criterion, CASE WHEN b.g IS "
        "NULL THEN l.score ELSE least(greatest(l.score, b.lo), b.hi) END AS s FROM lng l "
        "LEFT JOIN _bounds b ON l.criterion = b.g) GROUP BY criterion")
    order = {n: i for i, n in enumerate(names_in_file)}
    ranges["max_points"] = [known[n].max_points if n in known else None
                            for n in ranges["criterion"]]
    ranges = (ranges.assign(_o=ranges["criterion"].map(lambda n: (n == TOTAL, order.get(n, 0))))
              .sort_values("_o").drop(columns="_o").reset_index(drop=True))
    return DrawsImport(display, t.sha256, layout, draws, calls, cand, criteria_out, t.rows,
                       clipped, warnings, ranges)


def _implausible(v: float, crit: str, limit: float, p99: float) -> str:
    what = "the screener's total" if crit == TOTAL else f"criterion {shown_value(crit)}"
    if limit >= ABSURD:
        why = f"beyond {ABSURD:,.0f}"
    else:
        why = (f"more than {OUTLIER_FACTOR:g}× the 99th percentile of |score| of {what} "
               f"({p99:g})")
    return f"score {v:g} is implausible for {what}: {why}; {_WAY_OUT}"


def _require(t: FileTable, required: list[str], what: str) -> None:
    missing = [c for c in required if not t.has(c)]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(repr(m) for m in missing)} for {what}; "
            f"found {', '.join(repr(c) for c in t.columns)}", file=t.name)


def _lit(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


# ----------------------------------------------------------------------------- display
def faults_frame(exc: FileFaults) -> pd.DataFrame:
    """The listed faults as a table for a page: line, column, value, problem (plain text)."""
    from core.format import MISSING

    return pd.DataFrame({
        exc.faults[0].locator if exc.faults else "line":
            [MISSING if f.line is None else str(f.line) for f in exc.faults],
        "column": [f.column or MISSING for f in exc.faults],
        "value": [shown_value(f.value) if f.value is not None else MISSING
                  for f in exc.faults],
        "problem": [f.message for f in exc.faults]})


def ranges_frame(imp: DrawsImport) -> pd.DataFrame:
    """Each criterion's min / median / max (and max points) as a page shows them."""
    from core.format import num

    r = imp.ranges
    return pd.DataFrame({
        "criterion": r["criterion"].astype(str),
        "draws": [num(v, 0) for v in r["n"]],
        "min": [num(v, 2) for v in r["min"]],
        "median": [num(v, 2) for v in r["median"]],
        "max": [num(v, 2) for v in r["max"]],
        "max points": [num(v, 2) for v in r["max_points"]]})


# ----------------------------------------------------------------------------- pool
def validate_pool(source: Source, *, name: str | None = None, limits: Limits | None = None
                  ) -> PoolImport:
    """Read and validate a pool file ``candidate_id, first_pass_score``. Writes nothing.

    Raises :class:`FileFaults` listing every faulty row (empty or formula-like ids, scores that
    are not finite numbers, an applicant listed twice), each with its line and column.
    """
    limits = limits or Limits.from_env()
    with open_table(source, name=name, limits=limits, what="pool") as t:
        _require(t, ["candidate_id", "first_pass_score"],
                 "a pool (candidate_id, first_pass_score)")
        t.identifier("candidate_id", "_cid", what="candidate id")
        t.number("first_pass_score", "_fps")
        faults, total = t.materialize()
        t.create("pl", "SELECT _line, _cid AS candidate_id, _fps AS first_pass_score, "
                       "'candidate_id' AS _keycol FROM typed", view=True)
        if t.count("SELECT candidate_id FROM pl WHERE candidate_id IS NOT NULL "
                   "GROUP BY candidate_id HAVING count(*) > 1"):
            res = t.duplicates("pl", ["candidate_id"], "_keycol", describe=lambda key, first: (
                f"candidate {shown_value(key[0])} appears twice (first on {t.locator} "
                f"{first}); the pool has one first-pass score per applicant"))
            faults += res[0]
            total += res[1]
        if total:
            raise FileFaults(faults, total)
        pool = t.frame("SELECT candidate_id, first_pass_score FROM pl ORDER BY _line")
        return PoolImport(t.name, t.sha256, pool)


# ----------------------------------------------------------------------------- commit
def _ensure_audit(store: Store, audit_id: str, criteria: list[Criterion],
                  model: str | None) -> None:
    if store.audit_exists(audit_id):
        return
    sheet = FreezeSheet(req_id=audit_id, screener="imported draws", model=model or "",
                        sampling="not-exposed", side_effect_free=True, criteria=tuple(criteria))
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {})


def check_target(store: Store, audit_id: str, imp: DrawsImport) -> None:
    """Refuse to add draws to an existing audit they do not belong to.

    They belong when the audit's sample holds every candidate of the file (or the audit has no
    sample yet), every model id the file reports is the audit's frozen model, every criterion
    of the file is in its frozen rubric (when it lists criteria), and none of the file's
    ``(candidate, run)`` pairs is stored already.

    Raises
    ------
    InputError
        Naming the first candidate / model / criterion / pair that does not fit, and the way
        out (a new audit).
    """
    if not store.audit_exists(audit_id):
        return
    way = "import into a new audit instead"
    stored = set(store.get_candidates(audit_id)["candidate_id"].astype(str))
    if stored:
        outside = sorted(set(imp.candidates["candidate_id"].astype(str)) - stored)
        if outside:
            raise InputError(f"{len(outside)} candidate(s) of the file are not in the sample of "
                             f"audit '{audit_id}' (first: {shown_value(outside[0])}); an audit "
                             f"stays what it was frozen as: {way}", file=imp.file_name,
                             column="candidate_id")
    frozen_model = str(store.get_audit(audit_id)["freeze"].get("model") or "")
    models = sorted(str(m) for m in imp.calls["model"].dropna().unique())
    other = [m for m in models if frozen_model and m != frozen_model]
    if other:
        raise InputError(f"the file reports model {shown_value(other[0])} but audit "
                         f"'{audit_id}' is frozen on {shown_value(frozen_model)}; {way}",
                         file=imp.file_name, column="model")
    rubric = set(store.get_criteria(audit_id)["criterion"].astype(str))
    extra = [c.name for c in imp.criteria if rubric and c.name not in rubric]
    if extra:
        raise InputError(f"criterion {shown_value(extra[0])} is not in the frozen rubric of "
                         f"audit '{audit_id}' ({', '.join(sorted(rubric))}); {way}",
                         file=imp.file_name, column="criterion")
    existing = store.completed_pairs(audit_id)
    if existing:
        clash = [p for p in zip(imp.calls["candidate_id"], imp.calls["run"]) if p in existing]
        if clash:
            c, r = clash[0]
            raise InputError(f"candidate {shown_value(c)} run {r} is already stored in audit "
                             f"'{audit_id}' ({len(clash)} draw(s) overlap); {way}",
                             file=imp.file_name, column="run")


def commit_draws(store: Store, audit_id: str, imp: DrawsImport, *,
                 new: bool | None = None) -> dict[str, Any]:
    """Write a validated draws import in one transaction.

    Parameters
    ----------
    new : bool, optional
        ``True``: the audit must not exist yet (the upload form's "a new audit"). ``False``:
        it must exist. ``None`` (the CLI's ``--audit``): created when missing.

    Returns the summary with ``"status"``: ``"imported"`` or ``"already imported"`` (the same
    file, byte for byte, was imported into this audit before: nothing is written).

    Raises
    ------
    InputError
        The audit exists (``new=True``) or not (``new=False``); or the draws do not belong to
        it (:func:`check_target`).
    """
    out = imp.summary()
    exists = store.audit_exists(audit_id)
    if new is True and exists:
        raise InputError(f"audit '{audit_id}' exists already; give the new audit another id")
    if new is False and not exists:
        raise InputError(f"there is no audit '{audit_id}'; choose one that exists or import "
                         "into a new audit")
    if exists and store.import_seen(audit_id, imp.sha256, "draws"):
        out["status"] = "already imported"
        return out
    check_target(store, audit_id, imp)
    models = imp.calls["model"].dropna().unique()
    _ensure_audit(store, audit_id, imp.criteria, models[0] if len(models) == 1 else None)
    current = store.get_criteria(audit_id)
    with store.transaction() as cur:
        if len(current) == 0:
            store.set_criteria(audit_id, criteria_frame(imp.criteria), cur=cur)
        store.upsert_candidates(audit_id, imp.candidates, cur=cur)
        store.write_results(audit_id, imp.calls, imp.draws, cur=cur)
        store.record_import(cur, audit_id, imp.sha256, "draws", imp.file_name, imp.rows)
    out["status"] = "imported"
    out["new_audit"] = not exists
    return out


def commit_pool(store: Store, audit_id: str, imp: PoolImport) -> dict[str, Any]:
    """Replace the audit's pool with a validated pool file (one transaction)."""
    if not store.audit_exists(audit_id):
        _ensure_audit(store, audit_id, [], None)
    with store.transaction() as cur:
        store.set_pool(audit_id, imp.pool, cur=cur)
        store.record_import(cur, audit_id, imp.sha256, "pool", imp.file_name, len(imp.pool))
    return {"file": imp.file_name, "applicants": int(len(imp.pool)), "status": "imported"}


def import_draws(store: Store, audit_id: str, source: Source, *, name: str | None = None,
                 criteria: list[Criterion] | str | None = None, clip: bool = False,
                 new: bool | None = None, limits: Limits | None = None) -> dict[str, Any]:
    """Validate then commit a draws file (see :func:`validate_draws`, :func:`commit_draws`).

    Without ``criteria``, an existing audit's frozen maxima are used."""
    if criteria is None or (isinstance(criteria, str) and not criteria.strip()):
        criteria = target_criteria(store, audit_id)
    return commit_draws(store, audit_id, validate_draws(source, name=name, criteria=criteria,
                                                        clip=clip, limits=limits), new=new)


def import_pool(store: Store, audit_id: str, source: Source, *, name: str | None = None
                ) -> dict[str, Any]:
    return commit_pool(store, audit_id, validate_pool(source, name=name))

