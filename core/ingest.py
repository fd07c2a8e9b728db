"""Reading and validating draws, pools and criteria files from outside.

Two phases, so a user sees a validation summary before anything is stored:

1. :func:`validate_draws` / :func:`validate_pool` read a file (CSV, Parquet, JSON Lines; long or
   wide, auto-detected) through :func:`core.store.files.open_table` (bounds checked before
   reading; DuckDB's own readers into a staging database), run every check of SPEC §2 in SQL
   (:mod:`core.store.draw_checks`) and return a validated import whose rows wait in the
   staging database — or raise :class:`~core.tables.FileFaults` listing **every** fault (up to
   :data:`~core.tables.FAULT_CAP`, with a count of the rest), each with the line a spreadsheet
   shows (the header is line 1), the column and the value.
2. :func:`commit_draws` / :func:`commit_pool` write it in one transaction (the draws are copied
   inside DuckDB, in the file's order). Re-importing the same file is a no-op; a rejected
   import writes nothing. Draws go only into a new audit, or into an audit whose sample holds
   their candidates, whose frozen model they report, whose rubric holds their criteria and
   which has none of their ``(candidate, run)`` pairs yet (audits stay what they were frozen
   as; a resumed run never stores a draw twice).

No pandas on the way from file to database: the frames of :class:`DrawsImport` (``draws``,
``calls``, ``candidates``, ``ranges``) are built only when something reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from core.errors import InputError
from core.freeze import Criterion, FreezeSheet, parse_criteria_spec
from core.store import Store
from core.store.connection import Staging
from core.store.draw_checks import (
    ABSURD,
    LONG_COLUMNS,
    OPTIONAL_COLUMNS,
    OUTLIER_FACTOR,
    CheckedDraws,
    check_draws,
    check_pool,
    draw_number_columns,
    pool_number_columns,
    staged_candidate_ids,
    staged_frame,
)
from core.store.files import open_table
from core.tables import (
    FAULT_CAP,
    Fault,
    FileFaults,
    Limits,
    numeric_column,
    read_table,
    require_columns,
    shown_value,
)

if TYPE_CHECKING:
    import pandas as pd

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

#: Max points and weights accepted for a criterion.
MAX_POINTS_CAP = 1e6
MAX_WEIGHT = 1000.0

Source = str | Path | bytes | IO[bytes]


class DrawsImport:
    """A validated draws file, normalized to long form, not yet written.

    Its rows wait in a staging database (:mod:`core.store.draw_checks`), freed when the import
    is garbage collected; ``draws``, ``calls``, ``candidates`` and ``ranges`` are DataFrames
    built on first use (a page or a test reads them; the command line does not).
    """

    def __init__(self, file_name: str, sha256: str, rows: int, checked: CheckedDraws,
                 staging: Staging) -> None:
        self.file_name = file_name
        self.sha256 = sha256
        self.rows = rows
        self.layout = checked.layout
        self.criteria: list[Criterion] = checked.criteria
        self.clipped = checked.clipped
        self.warnings: list[str] = checked.warnings
        self._checked = checked
        self.implied_calls = checked.implied_calls
        self.staging = staging

    @cached_property
    def draws(self) -> pd.DataFrame:
        """candidate_id, run, criterion, score, request_id, model, clipped."""
        return staged_frame(self.staging, "draws")

    @cached_property
    def calls(self) -> pd.DataFrame:
        """One row per (candidate, run), the columns of the calls table."""
        return staged_frame(self.staging, "calls")

    @cached_property
    def candidates(self) -> pd.DataFrame:
        """candidate_id, stratum, first_pass_score, application."""
        return staged_frame(self.staging, "candidates")

    @cached_property
    def ranges(self) -> pd.DataFrame:
        """Per criterion (and the total): n, min, median, max, p99_abs, max_points."""
        import pandas as pd

        return pd.DataFrame(self._checked.ranges, columns=[
            "criterion", "n", "min", "median", "max", "p99_abs", "max_points"])

    def candidate_ids(self) -> list[str]:
        """The file's candidates, sorted."""
        return staged_candidate_ids(self.staging)

    def summary(self) -> dict[str, Any]:
        c = self._checked.counts
        return {
            "file": self.file_name, "layout": self.layout, "rows": self.rows,
            "candidates": int(c["candidates"]),
            "runs_min": int(c["runs_min"]), "runs_max": int(c["runs_max"]),
            "evaluations": int(c["evaluations"]),
            "criteria": [x.name for x in self.criteria],
            "has_total": c["has_total"], "has_payloads": c["has_payloads"],
            "has_strata": c["has_strata"], "has_first_pass": c["has_first_pass"],
            "models": list(c["models"]), "clipped": self.clipped,
            "warnings": list(self.warnings),
            "ranges": [dict(r) for r in self._checked.ranges],
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
    import pandas as pd

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
    for name, max_points, weight in store.criteria_rows(audit_id):
        out.append(Criterion(str(name), None if max_points is None else float(max_points),
                             1.0 if weight is None else float(weight)))
    if not out:
        sheet = store.get_audit(audit_id)["freeze"].get("criteria") or []
        for c in sheet:
            if isinstance(c, dict) and c.get("name"):
                out.append(Criterion(str(c["name"]), c.get("max_points"),
                                     float(c.get("weight", 1.0) or 1.0)))
    return out



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
    with open_table(source, name=name, limits=limits, numbers=draw_number_columns) as t:
        checked = check_draws(t, crit_list, clip)
        return DrawsImport(t.name, t.sha256, t.rows, checked, t.keep())


# ----------------------------------------------------------------------------- display
def faults_frame(exc: FileFaults) -> pd.DataFrame:
    """The listed faults as a table for a page: line, column, value, problem (plain text)."""
    import pandas as pd

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
    import pandas as pd

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
    with open_table(source, name=name, limits=limits, what="pool",
                    numbers=pool_number_columns) as t:
        return PoolImport(t.name, t.sha256, check_pool(t))


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
    stored = set(store.candidate_ids(audit_id))
    if stored:
        outside = sorted(set(imp.candidate_ids()) - stored)
        if outside:
            raise InputError(f"{len(outside)} candidate(s) of the file are not in the sample of "
                             f"audit '{audit_id}' (first: {shown_value(outside[0])}); an audit "
                             f"stays what it was frozen as: {way}", file=imp.file_name,
                             column="candidate_id")
    frozen_model = str(store.get_audit(audit_id)["freeze"].get("model") or "")
    models = imp.summary()["models"]
    other = [m for m in models if frozen_model and m != frozen_model]
    if other:
        raise InputError(f"the file reports model {shown_value(other[0])} but audit "
                         f"'{audit_id}' is frozen on {shown_value(frozen_model)}; {way}",
                         file=imp.file_name, column="model")
    rubric = {str(r[0]) for r in store.criteria_rows(audit_id)}
    extra = [c.name for c in imp.criteria if rubric and c.name not in rubric]
    if extra:
        raise InputError(f"criterion {shown_value(extra[0])} is not in the frozen rubric of "
                         f"audit '{audit_id}' ({', '.join(sorted(rubric))}); {way}",
                         file=imp.file_name, column="criterion")
    hit = store.stored_pair(audit_id, f"{imp.staging.alias}.main.out_calls")
    if hit:
        line, c, r, n = hit
        raise InputError(f"line {line}: candidate {shown_value(c)} run {r} is already stored in "
                         f"audit '{audit_id}' ({n:,} pair(s) of the file overlap); {way}",
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
    models = out["models"]
    _ensure_audit(store, audit_id, imp.criteria, models[0] if len(models) == 1 else None)
    current = store.criteria_rows(audit_id)
    with store.transaction() as cur:
        if not current:
            store.write_criteria(audit_id, [(c.name, c.max_points, c.weight)
                                            for c in imp.criteria], cur)
        store.write_staged(cur, audit_id, imp.staging.alias, file_name=imp.file_name,
                           implied_calls=imp.implied_calls, lean_draws=not imp.clipped)
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

