"""The command line's argument types: each refuses a bad value at parse time with one line
naming what it must be (argparse prints it and exits 2), so no command starts on a NaN, a
negative count or a band wider than anything a person could act on."""

from __future__ import annotations

import argparse
import math

from core.run.options import RUNS_RANGE

__all__ = ["MAX_K", "audit_name", "band_k", "finite_float", "nonneg_float", "nonneg_int",
           "number", "positive_float", "positive_int", "run_count"]


def number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def finite_float(text: str) -> float:
    return number(text)


def positive_float(text: str) -> float:
    v = number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return v


def nonneg_float(text: str) -> float:
    v = number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return v


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive_int(text: str) -> int:
    v = _whole(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return v


def nonneg_int(text: str) -> int:
    v = _whole(text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return v


#: The widest band the report sizes (the Band page's slider stops at 4): a k beyond it says
#: nothing a person could act on, and a huge one overflows k·σ into "no spread".
MAX_K = 10.0


def band_k(text: str) -> float:
    v = positive_float(text)
    if v > MAX_K:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_K:g} within-SDs, got {text!r}")
    return v


def run_count(text: str) -> int:
    v = positive_int(text)
    lo, hi = RUNS_RANGE
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"must be from {lo} to {hi:,} runs, got {text!r}")
    return v


def audit_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an audit needs a name (an empty id cannot be "
                                         "reported, linked or chosen again)")
    return text
