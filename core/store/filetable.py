"""A file from outside loaded as text into a staging database, and checked there in SQL.

:class:`FileTable` declares typed columns (:meth:`~FileTable.number`,
:meth:`~FileTable.identifier`, :meth:`~FileTable.text`), builds them in one pass
(:meth:`~FileTable.materialize`) and runs row-set checks (duplicates, bounds, listed queries);
every check returns at most ``cap`` faults, by line, and the count of all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

from core.store.connection import Staging
from core.tables import FAULT_CAP, Fault, shown_value

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FileTable"]

_KIND_TEXT = "'VARCHAR'"
_THOUSANDS_RE = r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?"
_DECIMAL_COMMA_RE = r"[+-]?\d*,\d+"


def _q(name: str) -> str:
    """A quoted SQL identifier for one of this module's own column names."""
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class _Declared:
    """A typed column to materialize: ``out`` from file column ``column``."""

    column: str
    out: str
    kind: str                 # "number" | "id" | "text"
    required: bool
    message: Callable[[Any, str], str]
    allowed: tuple[str, ...] | None = None
    fold: tuple[str, ...] = ()


_BAD_KINDS = "('BOOLEAN', 'OBJECT', 'ARRAY', 'BLOB', 'OTHER')"


class FileTable:
    """A file loaded as text into a private in-memory DuckDB database, for checks in SQL.

    ``src`` holds ``_line`` (the line a spreadsheet shows; Parquet: the row) and per file column
    ``c<i>`` (text, NULL when empty) with its JSON/Parquet kind where the format has types
    (``VARCHAR``, ``BIGINT``, ``DOUBLE``, ``BOOLEAN``, ``OBJECT``, ``ARRAY``, ``BLOB``…; CSV is
    all ``VARCHAR``).

    Typed columns are declared (:meth:`number`, :meth:`identifier`, :meth:`text`) and built in
    one pass by :meth:`materialize` into the table ``typed``; a value that fails its rule is
    NULL there and listed as a fault. The row-set checks then read ``typed`` (or a view of it).
    Every check returns ``(faults, count)``: at most ``cap`` faults, by line, and the count.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, staging: Staging, display: str, fmt: str,
                 sha256: str, columns: list[str], kinds: dict[str, str], decimal_comma: bool,
                 controls: bool = True, quoted_or_tab: bool = True,
                 typed: set[str] | None = None,
                 as_text: Callable[[], None] | None = None) -> None:
        self.con = con
        self.staging = staging
        self.kept = False   # the staging database outlives the table (a validated import)
        self.controls = controls   # the file may hold control characters other than \t \r \n
        self.quoted_or_tab = quoted_or_tab   # … or a quote / tab (so a value may hold \t \r \n)
        self.name = display
        self.format = fmt
        self.sha256 = sha256
        self.columns = columns
        self._col = {c: f"c{i}" for i, c in enumerate(columns)}
        self._kind = kinds
        self.decimal_comma = decimal_comma
        # columns the reader already gave as DOUBLE (a CSV's fast path), and how to read the
        # file again as text when one of their values breaks a rule (to name it as written)
        self.typed = set(typed or ())
        self._as_text = as_text
        self.locator = "row" if fmt == "parquet" else "line"
        self._declared: list[_Declared] = []
        self._rules: dict[str, tuple[bool, float | None, float | None]] = {}
        self.rows = int(self._one("SELECT count(*) FROM src"))

    # -- plumbing
    def _one(self, sql: str, params: list[Any] | None = None) -> Any:
        return self.con.execute(sql, params or []).fetchall()[0][0]

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        return self.con.execute(sql, params or []).fetchall()

    def keep(self) -> Staging:
        """Keep the staging database (and the tables built in it) after the file is closed:
        a validated import is copied from there when committed."""
        self.kept = True
        return self.staging

    def has(self, column: str) -> bool:
        return column in self._col

    def fault(self, line: int | None, column: str | None, value: Any, message: str) -> Fault:
        return Fault(self.name, None if line is None else int(line), column,
                     None if value is None else str(value), message, self.locator)

    def _listed(self, sql: str, count: int, cap: int, make) -> tuple[list[Fault], int]:
        if not count:
            return [], 0
        rows = self._rows(f"SELECT * FROM ({sql}) ORDER BY 1 LIMIT {int(cap)}")
        return [make(*r) for r in rows], count

    # -- typed columns (declared, then built in one pass)
    def number(self, column: str, out: str, *, whole: bool = False, minimum: float | None = None,
               maximum: float | None = None, allow_missing: bool = False) -> None:
        """Declare ``out`` (DOUBLE) parsed from ``column``.

        Accepted: plain decimals and exponents (``12``, ``-0.5``, ``1e3``); in a comma-separated
        CSV also Excel's grouped thousands (``"1,234"``); in a semicolon-separated CSV a decimal
        comma (``7,5``). Faults: text, ``inf``/``nan``, an overflow (``1e400``), booleans and
        objects (JSON / Parquet), empty cells unless ``allow_missing``, and (``whole``,
        ``minimum``, ``maximum``) a value that is not a whole number in range.
        """
        self._declared.append(_Declared(column, out, "number", not allow_missing,
                                        lambda v, k: _number_message(
                                            v, k, whole=whole, minimum=minimum, maximum=maximum,
                                            decimal_comma=self.decimal_comma)))
        self._rules[out] = (whole, minimum, maximum)

    def identifier(self, column: str, out: str, *, what: str = "id",
                   allow_missing: bool = False, fold: tuple[str, ...] = ()) -> None:
        """Declare ``out`` (VARCHAR, trimmed) from an id column.

        Ids are text or whole numbers. Faults: empty (unless ``allow_missing``), booleans,
        decimals, objects, lists, bytes; text a spreadsheet would run as a formula (leading
        ``=``, ``@``, or ``+`` / ``-`` not followed by a number); control characters.
        ``fold``: values taken in lower case whatever their case (e.g. ``total``).
        """
        self._declared.append(_Declared(column, out, "id", not allow_missing,
                                        lambda v, k: _id_message(v, k, what), fold=fold))

    def text(self, column: str, out: str, *, allowed: tuple[str, ...] | None = None,
             lower: bool = False) -> None:
        """Declare ``out`` (VARCHAR, NULL when empty) from an optional text column."""
        self._declared.append(_Declared(
            column, out, "text-lower" if lower else "text", False,
            lambda v, k: (f"{shown_value(v)} is {_kind_words(k)}, not text"
                          if k in ("OBJECT", "ARRAY", "BLOB", "OTHER") else
                          f"{shown_value(v)} is not one of {', '.join(allowed or ())}"),
            allowed))

    def _typed_exprs(self, d: _Declared) -> tuple[str, str]:
        """(inner expression, outer expression): the inner is a candidate value computed once
        (alias ``_p<out>``), the outer refuses what breaks the rule (NULL)."""
        c, k = self._col[d.column], self._kind[d.column]
        text_only = k == _KIND_TEXT      # CSV: every value is text, no kind to test
        v = f"trim({c})"
        p = _q("_p" + d.out)
        if d.kind == "number":
            whole, minimum, maximum = self._rules[d.out]
            ok = [f"isfinite({p})"]
            if whole:
                ok.append(f"{p} = round({p})")
            if minimum is not None:
                ok.append(f"{p} >= {float(minimum)!r}")
            if maximum is not None:
                ok.append(f"{p} <= {float(maximum)!r}")
            outer = f"CASE WHEN {' AND '.join(ok)} THEN {p} END"
            if d.column in self.typed:
                return c, outer
            # (DuckDB's cast skips surrounding blanks itself: no trim on the common path)
            alt = (f"WHEN strpos({c}, ',') > 0 AND regexp_full_match({v}, "
                   f"'{_DECIMAL_COMMA_RE}') THEN TRY_CAST(replace({v}, ',', '.') AS DOUBLE) "
                   if self.decimal_comma else
                   f"WHEN strpos({c}, ',') > 0 AND regexp_full_match({v}, '{_THOUSANDS_RE}') "
                   f"THEN TRY_CAST(replace({v}, ',', '') AS DOUBLE) ")
            bad_kind = "" if text_only else f"WHEN {k} IN {_BAD_KINDS} THEN NULL "
            inner = (f"CASE {bad_kind}WHEN strpos({c}, '_') > 0 "
                     f"THEN NULL {alt}ELSE TRY_CAST({c} AS DOUBLE) END")
            return inner, outer
        if d.kind == "id":
            if text_only:
                inner = f"nullif({v}, '')"
            else:
                as_num = f"TRY_CAST({c} AS DOUBLE)"
                inner = (f"CASE WHEN {k} = 'DOUBLE' AND {as_num} = round({as_num}) AND "
                         f"abs({as_num}) < 1e15 THEN CAST(CAST({as_num} AS BIGINT) AS VARCHAR) "
                         f"WHEN {k} IN ('VARCHAR', 'BIGINT') AND {v} <> '' THEN {v} END")
            for word in d.fold:
                inner = f"CASE WHEN {c} ILIKE {_lit(word)} THEN {_lit(word)} ELSE {inner} END"
            if self.controls:
                control = f"regexp_matches({c}, '[\\x00-\\x1f\\x7f]')"
            elif self.quoted_or_tab:
                control = (f"(strpos({c}, chr(9)) > 0 OR strpos({c}, chr(10)) > 0 OR "
                           f"strpos({c}, chr(13)) > 0)")
            else:   # no control byte, quote or tab in the whole file: nothing to find
                control = "false"
            refuse = (f"CASE left({p}, 1) WHEN '=' THEN true WHEN '@' THEN true "
                      f"WHEN '+' THEN TRY_CAST({p} AS DOUBLE) IS NULL "
                      f"WHEN '-' THEN TRY_CAST({p} AS DOUBLE) IS NULL ELSE {control} END")
            return inner, f"CASE WHEN {refuse} THEN NULL ELSE {p} END"
        val = f"lower({v})" if d.kind == "text-lower" else v
        bad_kind = "" if text_only else f"{k} IN {_BAD_KINDS} OR "
        inner = f"CASE WHEN {bad_kind}{c} IS NULL OR {v} = '' THEN NULL ELSE {val} END"
        if d.allowed:
            return inner, f"CASE WHEN {p} IN ({', '.join(map(_lit, d.allowed))}) THEN {p} END"
        return inner, p

    def _clean_as_written(self, d: _Declared, exprs: tuple[str, str]) -> tuple[str, str]:
        """An id column of a CSV whose every distinct value passes its rule unchanged (no
        blank, nothing to trim or fold, nothing refused) is taken as written: its rule is
        checked once per distinct value (a few thousand ids) instead of once per row."""
        c = self._col[d.column]
        if d.kind != "id" or self._kind[d.column] != _KIND_TEXT:
            return exprs
        inner, outer = exprs
        # (a table, not a subquery: DuckDB would push the test below the DISTINCT, per row)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE _distinct AS SELECT DISTINCT {c} "
                         "FROM src")
        changed = self._one(
            f"SELECT count(*) FROM (SELECT {c}, {inner} AS {_q('_p' + d.out)} FROM _distinct) "
            f"WHERE {c} IS NULL OR ({outer}) IS DISTINCT FROM {c}")
        self.con.execute("DROP TABLE _distinct")
        return exprs if changed else (c, _q("_p" + d.out))

    def materialize(self, cap: int = FAULT_CAP) -> tuple[list[Fault], int]:
        """Build ``typed`` (``_line``, the typed values, a blank flag per optional column) in
        one pass; return the faults of every declared column, by line. The raw text of a
        faulty value is read back from ``src`` for the listed rows only."""
        used = list(dict.fromkeys(d.column for d in self._declared))
        raw = [f"{self._col[c]}" for c in used]
        kinds = [f"{self._kind[c]} AS k{self._col[c][1:]}" for c in used
                 if not self._kind[c].startswith("'")]
        exprs = [self._clean_as_written(d, e) for d, e in
                 ((d, self._typed_exprs(d)) for d in self._declared)]
        inner = [f"{e[0]} AS {_q('_p' + d.out)}" for d, e in zip(self._declared, exprs)]
        outer = [f"{e[1]} AS {_q(d.out)}" for d, e in zip(self._declared, exprs)]
        blanks = [f"({self._col[d.column]} IS NULL" + (
                      "" if d.column in self.typed else f" OR trim({self._col[d.column]}) = ''")
                  + f") AS {_q('_b' + d.out)}" for d in self._declared if not d.required]
        # on a CSV's fast path the typed values are a few cheap tests over what the reader
        # gave: a view, evaluated by each check, costs less than a copy of every row
        what = "VIEW" if self.typed else "TABLE"
        self.con.execute(f"CREATE OR REPLACE {what} typed AS SELECT _line, "
                         f"{', '.join(outer + blanks)} "
                         f"FROM (SELECT _line, {', '.join(raw + kinds + inner)} FROM src)")
        conds = [f"{_q(d.out)} IS NULL" + ("" if d.required else
                                           f" AND NOT {_q('_b' + d.out)}")
                 for d in self._declared]
        counts = self._rows(f"SELECT {', '.join(f'count_if({x})' for x in conds)} FROM typed"
                            )[0] if conds else []
        if any(n and d.column in self.typed for d, n in zip(self._declared, counts)):
            # a typed value broke a rule: read the file as text to name it as written
            self.con.execute("DROP VIEW typed")
            self._as_text()
            self.typed = set()
            return self.materialize(cap)
        faults: list[Fault] = []
        total = 0
        for d, cond, n in zip(self._declared, conds, counts):
            if not n:
                continue
            total += int(n)
            c = self._col[d.column]
            k = self._kind[d.column]
            kcol = k if k.startswith("'") else f"s.k{c[1:]}"
            for line, val, kind in self._rows(
                    f"SELECT t._line, s.{c}, {kcol} FROM (SELECT _line FROM typed WHERE {cond} "
                    f"ORDER BY _line LIMIT {int(cap)}) t JOIN src s ON s._line = t._line "
                    "ORDER BY t._line"):
                faults.append(self.fault(line, d.column, val, d.message(val, kind)))
        return faults, total

    # -- row-set checks on a table or view of this database
    def create(self, name: str, select: str, *, view: bool = False) -> None:
        """``CREATE TABLE`` (or ``VIEW``) ``name AS select`` (e.g. draws in long form)."""
        what = "VIEW" if view else "TABLE"
        self.con.execute(f"CREATE OR REPLACE {what} {_q(name)} AS {select}")

    def create_mapping(self, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A small text table (e.g. wide score columns → criterion names)."""
        cols = ", ".join(f"{_q(c)} VARCHAR" for c in columns)
        self.con.execute(f"CREATE OR REPLACE TABLE {_q(name)} ({cols})")
        if rows:
            marks = ", ".join("?" for _ in columns)
            self.con.executemany(f"INSERT INTO {_q(name)} VALUES ({marks})", rows)

    def count(self, select: str) -> int:
        """Rows of a query over this database (a cheap test before listing faults)."""
        return int(self._one(f"SELECT count(*) FROM ({select})"))

    def duplicates(self, table: str, keys: list[str], column_of: str, *, describe,
                   cap: int = FAULT_CAP) -> tuple[list[Fault], int]:
        """Rows whose ``keys`` repeat an earlier row: one fault per repeat, naming the first line.

        ``column_of`` is a column of ``table`` holding the file column to name in the fault.
        """
        k = ", ".join(_q(x) for x in keys)
        nn = " AND ".join(f"{_q(x)} IS NOT NULL" for x in keys)
        sql = (f"SELECT _line, {k}, {_q(column_of)}, first_line FROM ("
               f"SELECT _line, {k}, {_q(column_of)}, min(_line) OVER (PARTITION BY {k}) "
               f"AS first_line, row_number() OVER (PARTITION BY {k} ORDER BY _line) AS rn "
               f"FROM {_q(table)} WHERE {nn}) WHERE rn > 1")
        n = len(keys)
        return self._listed(sql, self.count(sql), cap, lambda *r: self.fault(
            r[0], r[1 + n], r[n], describe(r[1:1 + n], r[-1])))

    def listed(self, select: str, column: str | None, *, describe, cap: int = FAULT_CAP
               ) -> tuple[list[Fault], int]:
        """Faults from a query whose rows are ``_line, value, …`` (``describe(*row)``)."""
        return self._listed(select, self.count(select), cap, lambda *r: self.fault(
            r[0], column, r[1], describe(*r)))

    def group_stats(self, table: str, group: str, value: str, *, line: str = "_line"
                    ) -> list[dict[str, Any]]:
        """Per group: criterion, n, min, median, max, the 99th percentile of ``|value|`` and
        the first line of the group (``line``: its column, or a constant).

        The quantiles are DuckDB's ``quantile_cont`` (linear between the order statistics at
        ``(n − 1)·q``), read from a histogram of the group's distinct values instead of a sort
        of every row: scores take few distinct values, so a million rows group into a few
        dozen (~2× faster than ``median`` / ``quantile_cont`` over the rows; equal to them up
        to the last bit of the interpolation)."""
        g, v = _q(group), _q(value)
        keys = ["criterion", "n", "min", "median", "max", "p99_abs", "first_line"]

        def quantile(hist: str, pos: str) -> str:
            """Per group, the value at position ``pos`` (a column of ``s``) of ``hist``'s
            ordered values (columns g, v, cum: rows up to and including v)."""
            at = (f"min(o.v) FILTER (WHERE o.cum > floor(s.{pos}))",
                  f"min(o.v) FILTER (WHERE o.cum > ceil(s.{pos}))")
            d = f"(s.{pos} - floor(s.{pos}))"
            return (f"(SELECT CASE WHEN {at[0]} = {at[1]} THEN {at[0]} ELSE "
                    f"{at[0]} * (1 - {d}) + {at[1]} * {d} END FROM {hist} o "
                    f"WHERE o.g = s.g)")
        rows = self._rows(f"""
            WITH h AS (SELECT {g} AS g, {v} AS v, count(*) AS c, min({line}) AS l
                       FROM {_q(table)} WHERE {g} IS NOT NULL AND {v} IS NOT NULL
                       GROUP BY ALL),
            o AS (SELECT g, v, sum(c) OVER (PARTITION BY g ORDER BY v) AS cum FROM h),
            oa AS (SELECT g, v, sum(c) OVER (PARTITION BY g ORDER BY v) AS cum
                   FROM (SELECT g, abs(v) AS v, sum(c) AS c FROM h GROUP BY ALL)),
            s AS (SELECT g, sum(c) AS n, min(v) AS lo, max(v) AS hi, min(l) AS first_line,
                         CAST(sum(c) - 1 AS DOUBLE) * 0.5 AS pm,
                         CAST(sum(c) - 1 AS DOUBLE) * CAST(0.99 AS DOUBLE) AS pa
                  FROM h GROUP BY g)
            SELECT s.g, s.n, s.lo, {quantile('o', 'pm')}, s.hi, {quantile('oa', 'pa')},
                   s.first_line FROM s""")
        return [dict(zip(keys, r)) for r in rows]

    def set_bounds(self, bounds: dict[str, tuple[float, float]]) -> None:
        """A small table ``_bounds (g, lo, hi)`` for range checks and clipping."""
        self.con.execute("CREATE OR REPLACE TABLE _bounds (g VARCHAR, lo DOUBLE, hi DOUBLE)")
        if bounds:
            self.con.executemany("INSERT INTO _bounds VALUES (?, ?, ?)",
                                 [[k, float(lo), float(hi)] for k, (lo, hi) in bounds.items()])

    def bound_faults(self, table: str, group: str, value: str, column_of: str,
                     bounds: dict[str, tuple[float, float]], *, describe,
                     cap: int = FAULT_CAP) -> tuple[list[Fault], int]:
        """Rows whose ``value`` is outside ``[lo, hi]`` of their group."""
        if not bounds:
            return [], 0
        self.set_bounds(bounds)
        sql = (f"SELECT t._line, t.{_q(value)}, t.{_q(group)}, t.{_q(column_of)}, b.lo, b.hi "
               f"FROM {_q(table)} t JOIN _bounds b ON t.{_q(group)} = b.g "
               f"WHERE t.{_q(value)} < b.lo OR t.{_q(value)} > b.hi")
        return self._listed(sql, self.count(sql), cap, lambda *r: self.fault(
            r[0], r[3], _num_text(r[1]), describe(r[1], r[2], r[4], r[5])))

    def as_frame(self) -> pd.DataFrame:
        """The whole file as a DataFrame, in file order: text values (CSV), numbers where the
        format has them (Parquet), empty cells NaN (for small files: criteria, panels)."""
        import numpy as np
        import pandas as pd

        cols = ", ".join(f"CASE WHEN trim({self._col[c]}) = '' THEN NULL ELSE {self._col[c]} "
                         f"END AS {_q(c)}" for c in self.columns)
        df = self.frame(f"SELECT {cols} FROM src ORDER BY _line")
        if self.format == "parquet":
            for c in self.columns:
                if self._kind[c] in ("'BIGINT'", "'DOUBLE'"):
                    df[c] = pd.to_numeric(df[c], errors="coerce")
        return df.astype(object).where(df.notna(), np.nan).reset_index(drop=True)

    def lines(self) -> list[int]:
        """The line (Parquet: row) of each row of :meth:`as_frame`, in the same order."""
        return [int(r[0]) for r in self._rows("SELECT _line FROM src ORDER BY _line")]

    def frame(self, select: str) -> pd.DataFrame:
        """A result of this database as a DataFrame (through Arrow: no per-row objects)."""
        return self.con.sql(select).to_arrow_table().to_pandas()


def _number_message(val: Any, kind: str, *, whole: bool, minimum: float | None,
                    maximum: float | None, decimal_comma: bool) -> str:
    shown = shown_value(val)
    if kind == "BOOLEAN":
        return f"{val} is a boolean, not a number"
    if kind in ("OBJECT", "ARRAY", "BLOB", "OTHER"):
        return f"{shown} is {_kind_words(kind)}, not a number"
    if val is None or str(val).strip() == "":
        return "empty is not a finite number"
    text = str(val).strip()
    if re.fullmatch(_THOUSANDS_RE if not decimal_comma else _DECIMAL_COMMA_RE, text):
        text = text.replace(",", "" if not decimal_comma else ".")
    try:
        x = float(text) if "_" not in text else None
    except ValueError:
        x = None
    if x is None or math.isnan(x) or text.lower().lstrip("+-") in ("inf", "infinity"):
        return f"{shown} is not a finite number"
    if math.isinf(x):
        return f"{shown} is not a finite number (too large: it overflows)"
    if whole and x != round(x):
        return f"{shown} is not a whole run number (runs are numbered 1, 2, 3…)"
    if minimum is not None and x < minimum:
        what = "run number" if whole else "value"
        return f"{shown} is below {minimum:g}; the first {what} is {minimum:g}"
    if maximum is not None and x > maximum:
        return f"{shown} is above {maximum:,.0f}, the largest accepted here"
    return f"{shown} is not a finite number"


def _id_message(val: Any, kind: str, what: str) -> str:
    shown = shown_value(val)
    if val is None or str(val).strip() == "":
        return f"is empty; every row needs a {what}"
    if kind not in ("VARCHAR", "BIGINT", "DOUBLE") or (kind == "DOUBLE" and not _whole(val)):
        return f"{shown} is {_kind_words(kind)}; a {what} must be text or a whole number"
    if re.search(r"[\x00-\x1f\x7f]", str(val)):
        return (f"{shown} holds control characters (a line break, tab or escape code); a "
                f"{what} must be plain text")
    return (f"{shown} starts like a spreadsheet formula (= + - @); a {what} must not (fix it "
            "in the export)")


def _whole(val: Any) -> bool:
    try:
        x = float(val)
    except (TypeError, ValueError):
        return False
    return math.isfinite(x) and x == round(x) and abs(x) < 1e15


def _num_text(v: Any) -> str:
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return str(v)


def _kind_words(kind: str) -> str:
    return {"OBJECT": "an object (a JSON {…} / struct)", "ARRAY": "a list",
            "BLOB": "bytes", "BOOLEAN": "a boolean", "DOUBLE": "a decimal number",
            "OTHER": "not text or a number"}.get(kind, kind.lower())


