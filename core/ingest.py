"""Reading and validating draws, pools and criteria files from outside.

Two phases, so a user sees a validation summary before anything is stored:

1. :func:`validate_draws` / :func:`validate_pool` read a file (CSV, Parquet, JSON Lines; long or
   wide, auto-detected), check every rule of SPEC §2 and return a normalized, ready-to-write
   object — or raise :class:`~core.errors.InputError` naming the file, the row and the column.
2. :func:`commit_draws` / :func:`commit_pool` write it in one transaction. Re-importing the same
   file is a no-op; a rejected import writes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from core.draws import TOTAL
from core.errors import InputError
from core.freeze import Criterion, FreezeSheet, parse_criteria_spec
from core.store import Store
from core.tables import numeric_column, read_table, require_columns

__all__ = [
    "DrawsImport",
    "PoolImport",
    "validate_draws",
    "validate_pool",
    "commit_draws",
    "commit_pool",
    "import_draws",
    "import_pool",
    "read_criteria",
    "criteria_frame",
    "LONG_COLUMNS",
    "OPTIONAL_COLUMNS",
]

LONG_COLUMNS = ["candidate_id", "run", "criterion", "score"]
OPTIONAL_COLUMNS = ["request_id", "model", "raw_payload", "stratum", "first_pass_score"]
_STRATA = {"band", "high", "low", "between"}

Source = str | Path | bytes | IO[bytes]


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
            "clipped": self.clipped, "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class PoolImport:
    file_name: str
    sha256: str
    pool: pd.DataFrame  # candidate_id, first_pass_score


def read_criteria(spec: str | Path | None) -> list[Criterion]:
    """Criteria from ``"name:max[:weight],…"`` or a CSV/JSONL file with ``criterion|name, max,
    weight`` columns."""
    if spec is None or str(spec).strip() == "":
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
            m = None if mx is None or np.isnan(mx[i]) else float(mx[i])
            if m is not None and m <= 0:
                raise InputError("max points must be positive", file=display, row=i + 1,
                                 column=mx_col)
            out.append(Criterion(name.strip(), m,
                                 1.0 if w is None or np.isnan(w[i]) else float(w[i])))
        return out
    return parse_criteria_spec(str(spec))


def criteria_frame(criteria: list[Criterion]) -> pd.DataFrame:
    return pd.DataFrame({"criterion": [c.name for c in criteria],
                         "position": list(range(len(criteria))),
                         "max_points": [c.max_points for c in criteria],
                         "weight": [c.weight for c in criteria]},
                        columns=["criterion", "position", "max_points", "weight"])


def _text_column(df: pd.DataFrame, col: str, display: str) -> pd.Series:
    s = df[col]
    blank = s.isna() | (s.astype(str).str.strip() == "")
    if blank.any():
        i = int(np.flatnonzero(blank.to_numpy())[0])
        raise InputError("is empty", file=display, row=i + 1, column=col)
    return s.astype(str).str.strip()


def _int_column(df: pd.DataFrame, col: str, display: str) -> np.ndarray:
    v = numeric_column(df, col, display)
    bad = (v != np.round(v)) | (v < 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{df[col].iloc[i]!r} is not a whole run number (runs are numbered "
                         "1, 2, 3…)", file=display, row=i + 1, column=col)
    return v.astype("int64")


def validate_draws(source: Source, *, name: str | None = None,
                   criteria: list[Criterion] | str | None = None, clip: bool = False
                   ) -> DrawsImport:
    """Read and validate a draws file (long or wide). Writes nothing.

    Parameters
    ----------
    source : path, bytes or buffer
    name : display name for messages
    criteria : list of Criterion or a spec string; gives max points (scores outside ``0..max``
        are rejected, or clipped when ``clip``) and weights
    clip : bool

    Raises
    ------
    InputError
        Empty file; missing columns; a score that is not a finite number; a duplicate
        ``(candidate_id, run, criterion)``; a candidate with fewer than 2 runs; a score outside
        ``0..max``. Always with the file, the 1-based data row and the column.
    """
    df, digest, display = read_table(source, name=name)
    crit_list = read_criteria(criteria) if isinstance(criteria, (str, Path)) else list(
        criteria or [])
    cols = set(df.columns)
    if cols & {"criterion", "score"}:
        layout = "long"
        require_columns(df, LONG_COLUMNS, display, "long draws (candidate_id, run, criterion, "
                        "score)")
        long = pd.DataFrame({
            "candidate_id": _text_column(df, "candidate_id", display),
            "run": _int_column(df, "run", display),
            "criterion": _text_column(df, "criterion", display),
            "score": numeric_column(df, "score", display),
            "_row": np.arange(1, len(df) + 1)})
        long.loc[long["criterion"].str.lower() == TOTAL, "criterion"] = TOTAL
        extras = df
    else:
        layout = "wide"
        require_columns(df, ["candidate_id", "run"], display,
                        "draws (long: candidate_id, run, criterion, score; or wide: "
                        "candidate_id, run, [total], <criterion columns>)")
        score_cols = [c for c in df.columns if c not in {"candidate_id", "run",
                                                           *OPTIONAL_COLUMNS}]
        if not score_cols:
            raise InputError("has no score columns: add a 'total' or one column per criterion",
                             file=display)
        cid = _text_column(df, "candidate_id", display)
        run = _int_column(df, "run", display)
        parts = []
        for c in score_cols:
            v = numeric_column(df, c, display)
            parts.append(pd.DataFrame({"candidate_id": cid, "run": run,
                                       "criterion": TOTAL if c.lower() == TOTAL else c,
                                       "score": v, "_row": np.arange(1, len(df) + 1)}))
        long = pd.concat(parts, ignore_index=True)
        extras = df
    # duplicates
    dup = long.duplicated(["candidate_id", "run", "criterion"], keep=False)
    if dup.any():
        d = long[dup].sort_values("_row")
        first = d.iloc[0]
        again = d[(d["candidate_id"] == first["candidate_id"]) & (d["run"] == first["run"])
                  & (d["criterion"] == first["criterion"])].iloc[1]
        where = "criterion" if layout == "long" else "run"
        raise InputError(f"duplicate draw: candidate '{first['candidate_id']}', run "
                         f"{first['run']}, criterion '{first['criterion']}' already appears on "
                         f"row {first['_row']}", file=display, row=int(again["_row"]),
                         column=where)
    # at least two runs per candidate
    runs = long.groupby("candidate_id", sort=True)["run"].nunique()
    few = runs[runs < 2]
    if len(few):
        cid = few.index[0]
        row = int(long.loc[long["candidate_id"] == cid, "_row"].min())
        raise InputError(f"candidate '{cid}' has only {int(few.iloc[0])} run; every candidate "
                         "needs at least 2 runs to measure its spread", file=display, row=row,
                         column="run")
    # rubric bounds
    clipped = 0
    names_in_file = [c for c in pd.unique(long["criterion"]) if c != TOTAL]
    known = {c.name: c for c in crit_list}
    warnings = []
    unknown = [c for c in known if c not in names_in_file]
    if unknown:
        warnings.append(f"criteria given but not in the file: {', '.join(unknown)}")
    long["clipped"] = False
    for cname, c in known.items():
        if c.max_points is None:
            continue
        m = long["criterion"] == cname
        out = m & ((long["score"] < 0) | (long["score"] > c.max_points))
        if out.any():
            if not clip:
                r = long[out].sort_values("_row").iloc[0]
                col = "score" if layout == "long" else cname
                raise InputError(f"score {r['score']:g} for '{cname}' is outside "
                                 f"0..{c.max_points:g} (the rubric's max); fix the export or "
                                 "import with clipping",
                                 file=display, row=int(r["_row"]), column=col)
            clipped += int(out.sum())
            long.loc[out, "score"] = long.loc[out, "score"].clip(0, c.max_points)
            long.loc[out, "clipped"] = True
    if clipped:
        warnings.append(f"{clipped} score(s) outside 0..max were clipped")
    criteria_out = [known.get(n, Criterion(n)) for n in
                    [c.name for c in crit_list if c.name in names_in_file]
                    + [n for n in names_in_file if n not in known]]
    # optional per-draw and per-candidate columns
    first_rows = long.drop_duplicates(["candidate_id", "run"]).set_index(["candidate_id", "run"])
    row_of = first_rows["_row"]
    calls = pd.DataFrame(index=first_rows.index).reset_index()
    src_idx = row_of.to_numpy() - 1
    for col in ("request_id", "model", "raw_payload"):
        if col in extras.columns:
            vals = extras[col].iloc[src_idx].to_numpy(dtype=object)
            calls[col] = [None if (v is None or (isinstance(v, float) and np.isnan(v))
                                   or str(v) == "") else str(v) for v in vals]
        else:
            calls[col] = None
    if calls["request_id"].isna().all():
        calls["request_id"] = ("import:" + calls["candidate_id"] + ":" +
                               calls["run"].astype(str))
    else:
        miss = calls["request_id"].isna()
        calls.loc[miss, "request_id"] = ("import:" + calls.loc[miss, "candidate_id"] + ":" +
                                         calls.loc[miss, "run"].astype(str))
        dup_rid = calls["request_id"].duplicated(keep="first")
        if dup_rid.any():
            i = int(np.flatnonzero(dup_rid.to_numpy())[0])
            raise InputError(f"request id '{calls['request_id'].iloc[i]}' is used by two "
                             "different draws; every call needs a distinct request id",
                             file=display, row=int(row_of.iloc[i]), column="request_id")
    calls["payload_sha256"] = [None if p is None else hashlib.sha256(p.encode("utf-8")).hexdigest()
                               for p in calls["raw_payload"]]
    calls["status"] = "ok"
    calls["source"] = "import"
    calls["attempts"] = 1
    # candidates: stratum, first-pass score (one value per candidate)
    cand = pd.DataFrame({"candidate_id": sorted(long["candidate_id"].unique())})
    cand["stratum"] = None
    cand["first_pass_score"] = np.nan
    cand["application"] = None
    if "stratum" in extras.columns:
        st = extras["stratum"].astype(object).where(extras["stratum"].notna(), None)
        vals = st.map(lambda v: None if v is None or str(v).strip() == "" else
                      str(v).strip().lower())
        bad = vals.notna() & ~vals.isin(_STRATA)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"stratum {extras['stratum'].iloc[i]!r} is not one of band, high, "
                             "low, between", file=display, row=i + 1, column="stratum")
        cand["stratum"] = _per_candidate(extras, vals, cand, display, "stratum")
    if "first_pass_score" in extras.columns:
        fp = pd.Series(numeric_column(extras, "first_pass_score", display, allow_missing=True),
                       index=extras.index)
        cand["first_pass_score"] = _per_candidate(extras, fp, cand, display, "first_pass_score")
    draws = long.merge(calls[["candidate_id", "run", "request_id", "model"]],
                       on=["candidate_id", "run"], how="left")
    return DrawsImport(display, digest, layout,
                       draws[["candidate_id", "run", "criterion", "score", "request_id", "model",
                              "clipped"]],
                       calls, cand, criteria_out, int(len(df)), clipped, warnings)


def _per_candidate(extras: pd.DataFrame, values: pd.Series, cand: pd.DataFrame, display: str,
                   col: str) -> list[Any]:
    """One value per candidate; two different values for one candidate are rejected."""
    frame = pd.DataFrame({"candidate_id": extras["candidate_id"].astype(str).str.strip(),
                          "v": values.to_numpy(), "row": np.arange(1, len(extras) + 1)})
    frame = frame[frame["v"].notna()]
    seen: dict[str, Any] = {}
    for cid, v, row in frame.itertuples(index=False):
        if cid in seen and seen[cid] != v:
            raise InputError(f"candidate '{cid}' has two different values ({seen[cid]!r} and "
                             f"{v!r})", file=display, row=int(row), column=col)
        seen.setdefault(cid, v)
    return [seen.get(c) for c in cand["candidate_id"]]


def validate_pool(source: Source, *, name: str | None = None) -> PoolImport:
    """Read and validate a pool file ``candidate_id, first_pass_score``. Writes nothing."""
    df, digest, display = read_table(source, name=name)
    require_columns(df, ["candidate_id", "first_pass_score"], display,
                    "a pool (candidate_id, first_pass_score)")
    cid = _text_column(df, "candidate_id", display)
    fp = numeric_column(df, "first_pass_score", display)
    dup = cid.duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        first = int(np.flatnonzero((cid == cid.iloc[i]).to_numpy())[0])
        raise InputError(f"candidate '{cid.iloc[i]}' appears twice (first on row {first + 1}); "
                         "the pool has one first-pass score per applicant", file=display,
                         row=i + 1, column="candidate_id")
    return PoolImport(display, digest, pd.DataFrame({"candidate_id": cid.to_numpy(),
                                                     "first_pass_score": fp}))


def _ensure_audit(store: Store, audit_id: str, criteria: list[Criterion],
                  model: str | None) -> None:
    if store.audit_exists(audit_id):
        return
    sheet = FreezeSheet(req_id=audit_id, screener="imported draws", model=model or "",
                        sampling="not-exposed", side_effect_free=True, criteria=tuple(criteria))
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {})


def commit_draws(store: Store, audit_id: str, imp: DrawsImport) -> dict[str, Any]:
    """Write a validated draws import in one transaction.

    Returns the summary with ``"status"``: ``"imported"`` or ``"already imported"`` (the same
    file, byte for byte, was imported into this audit before: nothing is written).

    Raises
    ------
    InputError
        When a draw of the file is already stored in the audit from another source.
    """
    out = imp.summary()
    if store.audit_exists(audit_id) and store.import_seen(audit_id, imp.sha256, "draws"):
        out["status"] = "already imported"
        return out
    models = imp.calls["model"].dropna().unique()
    _ensure_audit(store, audit_id, imp.criteria, models[0] if len(models) == 1 else None)
    existing = store.completed_pairs(audit_id)
    if existing:
        clash = [p for p in zip(imp.calls["candidate_id"], imp.calls["run"]) if p in existing]
        if clash:
            c, r = clash[0]
            raise InputError(f"candidate '{c}' run {r} is already stored in audit '{audit_id}' "
                             f"({len(clash)} draw(s) overlap); import into a new audit",
                             file=imp.file_name, column="run")
    current = store.get_criteria(audit_id)
    with store.transaction() as cur:
        if len(current) == 0 or imp.criteria:
            merged = {r.criterion: Criterion(r.criterion,
                                             None if pd.isna(r.max_points) else r.max_points,
                                             1.0 if pd.isna(r.weight) else r.weight)
                      for r in current.itertuples()}
            for c in imp.criteria:
                old = merged.get(c.name)
                if old is None or c.max_points is not None or c.weight != 1.0:
                    merged[c.name] = c
            store.set_criteria(audit_id, criteria_frame(list(merged.values())), cur=cur)
        store.upsert_candidates(audit_id, imp.candidates, cur=cur)
        store.write_results(audit_id, imp.calls, imp.draws, cur=cur)
        store.record_import(cur, audit_id, imp.sha256, "draws", imp.file_name, imp.rows)
    out["status"] = "imported"
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
                 criteria: list[Criterion] | str | None = None, clip: bool = False
                 ) -> dict[str, Any]:
    """Validate then commit a draws file (see :func:`validate_draws`, :func:`commit_draws`)."""
    return commit_draws(store, audit_id, validate_draws(source, name=name, criteria=criteria,
                                                        clip=clip))


def import_pool(store: Store, audit_id: str, source: Source, *, name: str | None = None
                ) -> dict[str, Any]:
    return commit_pool(store, audit_id, validate_pool(source, name=name))
