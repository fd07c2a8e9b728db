"""From a screener's answer text to criterion scores and a total (the "parser version").

Presets
-------
``flat``
    ``{"technical_skills": 8, "experience": 25, …, "total": 80}``; ``total`` optional.
``nested``
    The HackerRank hiring-agent shape::

        {"scores": {"technical_skills": {"score": 8, "max": 10}, …},
         "bonus_points": {"total": 2}, "deductions": {"total": 1}}

    total = Σ min(score, max) + bonus − deductions (the screener's own total).
``paths``
    Explicit dotted paths per criterion (``"result.scores.0.value"``); ``total`` optional.

Rules
-----
* A score outside ``0..max`` is a parse error (``out_of_range="error"``, the default); with
  ``out_of_range="clip"`` it is clipped and the draw is marked ``clipped``.
* A missing criterion, a non-number (booleans included), NaN or infinity is a parse error.
* The total is the screener's when its payload has one, otherwise ``Σ w·x``
  (``Parsed.total_from_screener`` says which).
* JSON is found tolerantly: the whole text, a fenced ```` ```json ```` block, or the first
  decodable ``{…}`` object in prose.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import InputError
from core.freeze import Criterion

__all__ = [
    "INVALID_KINDS",
    "MAX_ANSWER_CHARS",
    "OutOfRange",
    "PRESETS",
    "ParseError",
    "ParseSpec",
    "Parsed",
    "extract_json",
    "get_path",
    "parse_scores",
]

PRESETS = ("flat", "nested", "paths")
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


#: The kinds of invalid answer (SPEC §3.3): never draws, always counted.
INVALID_KINDS = ("parse_error", "out_of_range", "truncated", "refused")
#: Longest answer text the parser reads; a longer one is a parse error, not a memory problem.
MAX_ANSWER_CHARS = 200_000
#: How many ``{`` / ``[`` openings of a prose answer are tried as JSON before giving up.
_MAX_JSON_STARTS = 200


class ParseError(Exception):
    """The answer could not be turned into scores; the call is recorded, never a draw.

    ``kind`` is the invalid-answer kind the runner records (``parse_error`` here).
    """

    kind = "parse_error"


class OutOfRange(ParseError):
    """A criterion scored outside ``0..max``: an invalid answer of its own kind."""

    kind = "out_of_range"


@dataclass(frozen=True)
class ParseSpec:
    """How to read scores from an answer.

    Parameters
    ----------
    preset : {"flat", "nested", "paths"}
    paths : mapping
        criterion name (or ``"total"``) → dotted path, for ``preset="paths"`` (and optional
        overrides of single criteria with the other presets).
    payload_path : str, optional
        Dotted path to the part of the answer that holds the scores (an object, or a string of
        JSON), e.g. ``"choices.0.message.content"`` for an envelope.
    out_of_range : {"error", "clip"}
    """

    preset: str = "flat"
    paths: Mapping[str, str] = field(default_factory=dict)
    payload_path: str | None = None
    out_of_range: str = "error"

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise InputError(f"parse preset must be one of {', '.join(PRESETS)}; got "
                             f"'{self.preset}' (field 'parse')")
        if self.out_of_range not in ("error", "clip"):
            raise InputError("out_of_range must be 'error' or 'clip' (field 'out_of_range')")
        if self.preset == "paths" and not self.paths:
            raise InputError("parse preset 'paths' needs a [screener.paths] table mapping each "
                             "criterion to a dotted path")

    def to_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "paths": dict(self.paths),
                "payload_path": self.payload_path, "out_of_range": self.out_of_range}


@dataclass(frozen=True)
class Parsed:
    """Scores of one draw: per criterion, the total, and which criteria were clipped."""

    scores: dict[str, float]
    total: float
    total_from_screener: bool
    clipped: frozenset[str] = frozenset()


def _loads(text: str) -> Any:
    """``json.loads`` whose failures (nesting too deep included) are :class:`ParseError`."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ParseError("the answer's JSON is nested too deeply to read") from None


def extract_json(text: str) -> Any:
    """The JSON value in ``text``: whole, fenced, or the first decodable object in prose.

    Bounded: an answer longer than :data:`MAX_ANSWER_CHARS`, JSON nested deeper than Python's
    recursion limit, or prose with more than a few hundred brace openings is a
    :class:`ParseError` (never a crash of the worker that parses it).
    """
    s = (text or "").strip()
    if not s:
        raise ParseError("empty answer")
    if len(s) > MAX_ANSWER_CHARS:
        raise ParseError(f"the answer is {len(s):,} characters long, over the parser's limit of "
                         f"{MAX_ANSWER_CHARS:,}")
    try:
        return _loads(s)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(s)[:20]:
        try:
            return _loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for n, m in enumerate(re.finditer(r"[{\[]", s)):
        if n >= _MAX_JSON_STARTS:
            break
        try:
            value, _ = decoder.raw_decode(s, m.start())
        except json.JSONDecodeError:
            continue
        except RecursionError:
            raise ParseError("the answer's JSON is nested too deeply to read") from None
        if isinstance(value, dict):
            return value
    raise ParseError(f"no JSON object found in the answer (starts {s[:60]!r})")


_MISSING = object()


def get_path(obj: Any, path: str, default: Any = _MISSING) -> Any:
    """Follow a dotted path (``a.b.0.c``; integers index lists)."""
    cur = obj
    for part in [p for p in path.split(".") if p != ""]:
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and re.fullmatch(r"-?\d+", part) \
                and -len(cur) <= int(part) < len(cur):
            cur = cur[int(part)]
        else:
            if default is not _MISSING:
                return default
            raise ParseError(f"path '{path}' not found in the answer (stopped at '{part}')")
    return cur


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise ParseError(f"{what} is {value!r}, not a number")
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            raise ParseError(f"{what} is {value!r}, not a number") from None
    else:
        raise ParseError(f"{what} is a {type(value).__name__}, not a number")
    if not math.isfinite(x):
        raise ParseError(f"{what} is {value!r}, not a finite number")
    return x


def _checked(name: str, x: float, mx: float | None, spec: ParseSpec,
             clipped: set[str]) -> float:
    hi = math.inf if mx is None else mx
    if 0.0 <= x <= hi:
        return x
    if spec.out_of_range == "clip":
        clipped.add(name)
        return min(max(x, 0.0), hi)
    bound = "0" if mx is None else f"0..{mx:g}"
    raise OutOfRange(f"criterion '{name}' scored {x:g}, outside {bound} ([run] on_invalid = "
                     "\"clip\" clips instead)")


def parse_scores(answer: Any, criteria: tuple[Criterion, ...], spec: ParseSpec) -> Parsed:
    """Scores and total from ``answer`` (text or already-decoded JSON). See module notes."""
    obj = extract_json(answer) if isinstance(answer, str) else answer
    if spec.payload_path:
        obj = get_path(obj, spec.payload_path)
        if isinstance(obj, str):
            obj = extract_json(obj)
    if not isinstance(obj, Mapping):
        raise ParseError(f"the answer is a {type(obj).__name__}, not a JSON object")
    clipped: set[str] = set()
    scores: dict[str, float] = {}
    total: float | None = None

    if spec.preset == "nested":
        block = obj.get("scores")
        if not isinstance(block, Mapping):
            raise ParseError("nested preset: no 'scores' object in the answer")
        summed = 0.0
        for c in criteria:
            if c.name in spec.paths:
                entry: Any = get_path(obj, spec.paths[c.name])
            elif c.name in block:
                entry = block[c.name]
            else:
                raise ParseError(f"criterion '{c.name}' missing from 'scores'")
            if isinstance(entry, Mapping):
                x = _number(entry.get("score"), f"scores.{c.name}.score")
                pmx = entry.get("max")
                payload_max = None if pmx is None else _number(pmx, f"scores.{c.name}.max")
            else:
                x = _number(entry, f"scores.{c.name}")
                payload_max = None
            mx = c.max_points if c.max_points is not None else payload_max
            summed += min(x, payload_max if payload_max is not None else
                          (mx if mx is not None else x))
            scores[c.name] = _checked(c.name, x, mx, spec, clipped)
        bonus = _sub_total(obj.get("bonus_points"), "bonus_points")
        deductions = _sub_total(obj.get("deductions"), "deductions")
        total = summed + bonus - deductions
        if "total" in spec.paths:
            total = _number(get_path(obj, spec.paths["total"]), "total")
        return Parsed(scores, float(total), True, frozenset(clipped))

    for c in criteria:
        if c.name in spec.paths:
            raw = get_path(obj, spec.paths[c.name])
        elif spec.preset == "flat" and c.name in obj:
            raw = obj[c.name]
        else:
            where = spec.paths.get(c.name, c.name)
            raise ParseError(f"criterion '{c.name}' missing from the answer (looked for "
                             f"'{where}')")
        scores[c.name] = _checked(c.name, _number(raw, c.name), c.max_points, spec, clipped)
    if "total" in spec.paths:
        total = _number(get_path(obj, spec.paths["total"]), "total")
    elif spec.preset == "flat" and "total" in obj:
        total = _number(obj["total"], "total")
    if total is None:
        if not criteria:
            raise ParseError("no criteria configured and no 'total' in the answer")
        return Parsed(scores, float(sum(c.weight * scores[c.name] for c in criteria)), False,
                      frozenset(clipped))
    return Parsed(scores, float(total), True, frozenset(clipped))


def _sub_total(value: Any, what: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, Mapping):
        return _number(value.get("total", 0), f"{what}.total")
    return _number(value, what)
