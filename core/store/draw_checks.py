"""The checks of a draws or pool file (SPEC §2), in SQL on its staging database, and the
normalized result staged there for the write.

:func:`check_draws` reads a :class:`~core.store.filetable.FileTable`, lists every fault (by
line, column and value; raised together as :class:`~core.tables.FileFaults`) and otherwise
leaves three tables in the staging database, ready for :meth:`core.store.Store.write_staged`:

* ``out_draws``: ``candidate_id, run, criterion, score, request_id, model, clipped`` (a view,
  copied in the file's order);
* ``out_calls``: (a view) one call per ``(candidate, run)`` with every column of
  :data:`~core.store.schema.CALL_COLUMNS` and the file line of its first row (``first_line``);
* ``out_candidates``: one row per candidate (stratum, first-pass score).

Plausibility (issue 8): with a criterion's max points, a score outside ``0..max`` is a fault (or
clipped and counted with ``clip``). Without them, a score beyond :data:`ABSURD` or more than
:data:`OUTLIER_FACTOR` × the 99th percentile of ``|score|`` of its criterion is a fault naming
the way out (``--criteria`` with maxima, then ``--clip``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import InputError
from core.freeze import TOTAL, Criterion
from core.store.connection import Staging
from core.store.filetable import FileTable
from core.store.schema import CALL_COLUMNS, IMPLIED_CALL, implied_request_id
from core.tables import Fault, FileFaults, shown_value

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CheckedDraws", "check_draws", "check_pool", "staged_frame",
           "staged_candidate_ids", "LONG_COLUMNS", "OPTIONAL_COLUMNS",
           "OUTLIER_FACTOR", "ABSURD", "MAX_RUN", "draw_number_columns",
           "pool_number_columns"]

LONG_COLUMNS = ["candidate_id", "run", "criterion", "score"]
OPTIONAL_COLUMNS = ["request_id", "model", "raw_payload", "stratum", "first_pass_score"]
_STRATA = ("band", "high", "low", "between")

#: Without maxima, a score more than this many times its criterion's 99th percentile of
#: ``|score|`` (at least 1 point) is refused as implausible.
OUTLIER_FACTOR = 100.0
#: Without maxima, a score beyond this in absolute value is refused.
ABSURD = 1e6
#: Run numbers accepted (runs are numbered 1, 2, 3…).
MAX_RUN = 1_000_000

_WAY_OUT = ("give the criteria maxima (--criteria name:max,… or the maxima field of the upload "
            "form) so the range is checked, and --clip to clip what is outside")


@dataclass
class CheckedDraws:
    """A draws file that passed every check; its rows wait in the staging database."""

    layout: str                      # "long" or "wide"
    criteria: list[Criterion]
    clipped: int
    warnings: list[str]
    #: per criterion (and the total): criterion, n, min, median, max, p99_abs, max_points
    ranges: list[dict[str, Any]]
    #: candidates, runs_min, runs_max, evaluations, has_total, has_payloads, has_strata,
    #: has_first_pass, models
    counts: dict[str, Any] = field(default_factory=dict)
    #: the file has no request id, model or payload column: its calls are implied by its
    #: pairs (stored as such, :meth:`core.store.Store.write_staged`)
    implied_calls: bool = False


def draw_number_columns(names: list[str]) -> set[str]:
    """The columns of a draws file that hold numbers, from its header: long, ``run``,
    ``score`` and ``first_pass_score``; wide, ``run``, ``first_pass_score`` and every score
    column (the layout rule of :func:`check_draws`)."""
    cols = set(names)
    if cols & {"criterion", "score"}:
        return cols & {"run", "score", "first_pass_score"}
    return {n for n in names if n not in {"candidate_id", *OPTIONAL_COLUMNS}} | (
        cols & {"first_pass_score"})


def pool_number_columns(names: list[str]) -> set[str]:
    """The number column of a pool file."""
    return {"first_pass_score"} & set(names)


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


def check_draws(t: FileTable, crit_list: list[Criterion], clip: bool) -> CheckedDraws:
    """Every check of a draws file (see :func:`core.ingest.validate_draws`); raises
    :class:`FileFaults` listing the faulty rows, else stages the normalized rows."""
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
    # (a column the file lacks is a constant: any_value over a million NULLs cost ~20 ms)
    per_call = ", ".join(f"any_value({c}) AS {c}" if extras[c] else
                         f"CAST(NULL AS VARCHAR) AS {c}"
                         for c in ("request_id", "model", "raw_payload"))
    t.create("calls", "SELECT candidate_id, run, count(criterion) AS n, "
                      "sum(hash(criterion)) AS hs, min(_line) AS first_line, "
                      f"{per_call} FROM lng "
                      "WHERE candidate_id IS NOT NULL GROUP BY candidate_id, run")
    # per criterion: n, min, median, max, p99 of |score| (rows with a score)
    stats = t.group_stats("lng", "criterion", "score")
    # no duplicate when every call holds each of the file's criteria once (same count, same
    # sum of hashes as the set of criteria); otherwise the exact (slower) check decides. The
    # set is the criteria with a score (from the stats): a criterion whose every score is
    # missing makes the counts differ, and the exact check runs
    t.create_mapping("_criteria", ["criterion"], [[str(r["criterion"])] for r in stats])
    if t.count("SELECT 1 FROM calls, (SELECT count(*) AS c, sum(hash(criterion)) AS h FROM "
               "_criteria) s WHERE n <> s.c OR hs IS DISTINCT FROM s.h") and t.count(
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
    names_in_file = [str(r["criterion"]) for r in sorted(stats, key=lambda r: r["first_line"])]
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
    for r in stats:
        if r["criterion"] in bounds:
            continue
        p99 = r["p99_abs"]
        p99 = float(p99) if p99 is not None and math.isfinite(p99) else 0.0
        limit = min(ABSURD, OUTLIER_FACTOR * max(p99, 1.0))
        loose[str(r["criterion"])] = (-limit, limit, p99)
    widest = max((max(abs(r["max"]), abs(r["min"])) for r in stats), default=0.0)
    if loose and widest > min(v[1] for v in loose.values()):
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

    _stage_outputs(t, extras, clip and bool(bounds), bounds)
    if clipped:
        ranges = t.group_stats("out_draws", "criterion", "score", line="0")
    else:
        ranges = stats
    order = {n: i for i, n in enumerate(names_in_file)}
    ranges = sorted(({k: v for k, v in r.items() if k != "first_line"} for r in ranges),
                    key=lambda r: (r["criterion"] == TOTAL, order.get(r["criterion"], 0)))
    for r in ranges:
        r["max_points"] = known[r["criterion"]].max_points if r["criterion"] in known else None
    counts = dict(zip(["candidates", "runs_min", "runs_max", "evaluations"], t._rows(
        "SELECT count(*), min(n), max(n), sum(n) FROM (SELECT count(*) AS n FROM out_calls "
        "GROUP BY candidate_id)")[0]))
    counts["has_payloads"] = extras["raw_payload"] and bool(
        t.count("SELECT 1 FROM out_calls WHERE raw_payload IS NOT NULL LIMIT 1"))
    counts["models"] = sorted(str(r[0]) for r in t._rows(
        "SELECT DISTINCT model FROM out_calls WHERE model IS NOT NULL")
        ) if extras["model"] else []
    counts["has_strata"] = extras["stratum"] and bool(
        t.count("SELECT 1 FROM out_candidates WHERE stratum IS NOT NULL LIMIT 1"))
    counts["has_first_pass"] = extras["first_pass_score"] and bool(
        t.count("SELECT 1 FROM out_candidates WHERE first_pass_score IS NOT NULL LIMIT 1"))
    counts["has_total"] = TOTAL in names_in_file
    return CheckedDraws(layout, criteria_out, clipped, warnings, ranges,
                        {k: (bool(v) if k.startswith("has_") else v) for k, v in counts.items()},
                        not (extras["request_id"] or extras["model"] or extras["raw_payload"]))


def _stage_outputs(t: FileTable, extras: dict[str, bool], clip: bool,
                   bounds: dict[str, tuple[float, float]]) -> None:
    """``out_calls``, ``out_draws`` (clipped when asked) and ``out_candidates`` in the staging
    database: the normalized import, one call per (candidate, run)."""
    rid = f"coalesce(c.request_id, {implied_request_id('c')})"
    given = {**IMPLIED_CALL, "candidate_id": "c.candidate_id", "run": "c.run", "request_id": rid,
             "model": "c.model", "raw_payload": "c.raw_payload",
             "payload_sha256": "CASE WHEN c.raw_payload IS NULL THEN NULL ELSE "
                               "sha256(c.raw_payload) END"}
    cols = [f"{given.get(col, 'NULL')} AS {col}" for col in CALL_COLUMNS[1:]]
    # views: computed once, while the import is copied into the audit (or read as frames)
    t.create("out_calls", f"SELECT {', '.join(cols)}, c.first_line FROM calls c", view=True)
    if extras["request_id"] and t.count("SELECT request_id FROM out_calls GROUP BY 1 "
                                        "HAVING count(*) > 1"):
        raise InputError("a request id of the file equals one made up for a row without one "
                         "('import:<candidate>:<run>'); give every row its request id or none",
                         file=t.name, column="request_id")
    score, flag, join = "l.score", "false", ""
    if clip:
        t.set_bounds(bounds)
        score = "CASE WHEN b.g IS NULL THEN l.score ELSE least(greatest(l.score, b.lo), b.hi) END"
        flag = "coalesce(b.g IS NOT NULL AND (l.score < b.lo OR l.score > b.hi), false)"
        join = " LEFT JOIN _bounds b ON l.criterion = b.g"
    if extras["request_id"] or extras["model"]:
        t.create("out_draws", f"SELECT l.candidate_id, l.run, l.criterion, {score} AS score, "
                              f"c.request_id, c.model, {flag} AS clipped FROM lng l "
                              f"JOIN out_calls c USING (candidate_id, run){join}", view=True)
    else:
        # the made-up id 'import:<candidate>:<run>' is stored with the call only; a draw
        # without an id reads it from there (Store.load_draws): 1M ids cost ~0.5 s to store
        t.create("out_draws", f"SELECT l.candidate_id, l.run, l.criterion, {score} AS score, "
                              "CAST(NULL AS VARCHAR) AS request_id, "
                              f"CAST(NULL AS VARCHAR) AS model, {flag} AS clipped FROM lng l"
                              f"{join}", view=True)
    per_cand = "lng" if extras["stratum"] or extras["first_pass_score"] else "calls"
    t.create("out_candidates",
             "SELECT candidate_id, any_value(stratum) AS stratum, "
             "any_value(first_pass_score) AS first_pass_score, "
             "CAST(NULL AS VARCHAR) AS application FROM lng "
             "GROUP BY candidate_id ORDER BY candidate_id" if per_cand == "lng" else
             "SELECT DISTINCT candidate_id, CAST(NULL AS VARCHAR) AS stratum, "
             "CAST(NULL AS DOUBLE) AS first_pass_score, CAST(NULL AS VARCHAR) AS "
             "application FROM calls ORDER BY candidate_id")


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


_STAGED = {
    "draws": (f"SELECT * REPLACE (coalesce(request_id, {implied_request_id()}) AS request_id) "
              "FROM out_draws ORDER BY candidate_id, run, criterion",
              ("request_id", "model")),
    "calls": ("SELECT * EXCLUDE (first_line) FROM out_calls ORDER BY candidate_id, run",
              ("request_id", "model", "raw_payload", "payload_sha256")),
    "candidates": ("SELECT * FROM out_candidates", ("stratum", "application")),
}


def staged_frame(staging: Staging, which: str) -> pd.DataFrame:
    """A staged import's ``draws``, ``calls`` or ``candidates`` as a DataFrame (text columns
    None where empty)."""
    sql, text = _STAGED[which]
    cur = staging.cursor()
    try:
        frame = cur.execute(sql).df()
    finally:
        cur.close()
    for c in text:
        missing = frame[c].isna()
        if missing.all():
            frame[c] = None
        elif missing.any():
            frame[c] = frame[c].astype(object).where(~missing, None)
    return frame


def staged_candidate_ids(staging: Staging) -> list[str]:
    """A staged import's candidates, sorted."""
    cur = staging.cursor()
    try:
        return [r[0] for r in cur.execute("SELECT candidate_id FROM out_candidates "
                                          "ORDER BY 1").fetchall()]
    finally:
        cur.close()


def check_pool(t: FileTable) -> pd.DataFrame:
    """Every check of a pool file ``candidate_id, first_pass_score``; raises
    :class:`FileFaults` listing every faulty row (empty or formula-like ids, scores that are
    not finite numbers, an applicant listed twice), else returns the pool in file order."""
    _require(t, ["candidate_id", "first_pass_score"], "a pool (candidate_id, first_pass_score)")
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
    return t.frame("SELECT candidate_id, first_pass_score FROM pl ORDER BY _line")
