"""Reading tabular files from outside: CSV, Parquet, JSON Lines (paths or in-memory buffers).

Shared by the draws/pool import (:mod:`core.ingest`) and the ratings panel (:mod:`core.drift`).
Everything is read as text first (CSV) so that a non-number is found and reported by row and
column by the validators, never coerced silently.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from core.errors import InputError

__all__ = ["read_table", "file_sha256", "numeric_column", "require_columns", "FORMATS"]

FORMATS = ("csv", "parquet", "jsonl")


def _name_of(source: Any, name: str | None) -> str:
    if name:
        return name
    if isinstance(source, (str, Path)):
        return Path(source).name
    return getattr(source, "name", None) or "upload"


def _bytes_of(source: str | Path | bytes | IO[bytes]) -> bytes:
    if isinstance(source, (str, Path)):
        try:
            return Path(source).read_bytes()
        except FileNotFoundError:
            raise InputError("file not found; check the path", file=str(source)) from None
        except IsADirectoryError:
            raise InputError("is a folder, not a file", file=str(source)) from None
    if isinstance(source, bytes):
        return source
    data = source.read()
    if hasattr(source, "seek"):
        source.seek(0)
    return data if isinstance(data, bytes) else str(data).encode("utf-8")


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _detect_format(name: str, data: bytes) -> str:
    low = name.lower()
    if low.endswith((".parquet", ".pq")) or data[:4] == b"PAR1":
        return "parquet"
    if low.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    head = data.lstrip()[:1]
    if head in (b"{",):
        return "jsonl"
    return "csv"


def read_table(source: str | Path | bytes | IO[bytes], *, name: str | None = None,
               fmt: str | None = None) -> tuple[pd.DataFrame, str, str]:
    """Read a CSV / Parquet / JSON Lines table.

    Parameters
    ----------
    source : path, bytes or binary buffer (a Streamlit upload works)
    name : str, optional
        Name used in messages (defaults to the file name).
    fmt : {"csv", "parquet", "jsonl"}, optional
        Forced format; otherwise detected from the name, then the content.

    Returns
    -------
    (DataFrame, sha256 of the bytes, display name)
        CSV columns are strings (``dtype=str``) so that validation sees exactly what the file
        holds; empty cells are NaN.

    Raises
    ------
    InputError
        Empty file, unreadable format, or a JSON line that is not an object (with its row).
    """
    display = _name_of(source, name)
    data = _bytes_of(source)
    digest = file_sha256(data)
    if not data.strip():
        raise InputError("the file is empty; export the draws again", file=display)
    kind = fmt or _detect_format(display, data)
    if kind not in FORMATS:
        raise InputError(f"unknown format '{kind}'; use one of {', '.join(FORMATS)}",
                         file=display)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        if kind == "parquet":
            df = pd.read_parquet(io.BytesIO(data))
        elif kind == "jsonl":
            rows = []
            for i, line in enumerate(data.decode("utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"not valid JSON ({exc.msg})", file=display, row=i) from None
                if not isinstance(obj, dict):
                    raise InputError("each line must be a JSON object", file=display, row=i)
                rows.append(obj)
            df = pd.DataFrame(rows)
        else:
            df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False,
                             na_values=[""], skipinitialspace=True, encoding="utf-8")
    except InputError:
        raise
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text; save it as UTF-8 CSV", file=display) from None
    except Exception as exc:  # noqa: BLE001 - any parser failure becomes one clear line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot be read as {kind.upper()}: {first}", file=display) from None
    df.columns = [str(c).strip() for c in df.columns]
    if len(df) == 0:
        raise InputError("the file has a header but no rows", file=display)
    return df, digest, display


def require_columns(df: pd.DataFrame, required: list[str], display: str,
                    what: str) -> None:
    """Raise naming the missing columns and the ones found."""
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(repr(m) for m in missing)} for {what}; "
            f"found {', '.join(repr(c) for c in df.columns)}", file=display)


def numeric_column(df: pd.DataFrame, column: str, display: str, *,
                   allow_missing: bool = False) -> np.ndarray:
    """Return ``df[column]`` as float64, or raise naming the first offending row.

    A value that is not a finite number (text, empty, ``inf``, ``nan``) is rejected with its
    1-based data row and the column name.
    """
    raw = df[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype="float64")
    bad = ~np.isfinite(values)
    if allow_missing:
        bad &= raw.notna().to_numpy() & (raw.astype(str).str.strip() != "").to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        shown = raw.iloc[i]
        shown = "empty" if (shown is None or (isinstance(shown, float) and np.isnan(shown))
                            or str(shown).strip() == "") else repr(str(shown))
        raise InputError(f"{shown} is not a finite number", file=display, row=i + 1,
                         column=column)
    return values
