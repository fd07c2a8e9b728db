"""Step 1 — freeze the harness.

The freeze sheet pins everything a variance number depends on. It is hashed (SHA-256 of
canonical JSON); the hash is the harness version printed in every report. Once an audit has a
draw its sheet cannot change (:meth:`core.store.Store.save_audit` enforces it).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import InputError

__all__ = [
    "FreezeSheet",
    "Criterion",
    "harness_hash",
    "floating_alias",
    "sampling_params_rejected",
    "SAMPLING_REGIMES",
    "GATES",
    "NO_SAMPLING_MODELS",
    "TEMPERATURE_ZERO_NOTE",
    "parse_criteria_spec",
    "ON_INVALID",
    "TOTAL",
]

#: A criterion of this name is the screener's own total (SPEC §2), not a rubric criterion.
TOTAL = "total"

SAMPLING_REGIMES = ("settable", "not-exposed", "cannot-be-set")
GATES = ("auto-advance", "auto-reject", "sorted-list")

#: Models whose API rejects temperature / top_p / top_k with HTTP 400 (SPEC §3.1).
NO_SAMPLING_MODELS = ("claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-sonnet-5",
                      "claude-fable-5")

TEMPERATURE_ZERO_NOTE = (
    "Temperature 0 is not determinism: 1,000 greedy completions of one model at temperature 0 "
    "gave 80 distinct outputs (inference kernels are not batch-invariant). Batch-invariant "
    "kernels fix it at about 1.6x the wall clock, and no hosted screener ships them.")

_PINNED_TAIL = re.compile(
    r"(\d{8}|\d{4}-\d{2}-\d{2}|\d{6}|v\d+(\.\d+)*|\d+(\.\d+)*|[0-9a-f]{12,})$")


def floating_alias(model: str) -> str | None:
    """Why ``model`` looks like a floating alias, or ``None`` when it is pinned.

    Flags ``latest`` in any form (``latest``, ``-latest``, ``:latest``) and ids with no
    snapshot, date or version suffix (``gpt-4o``, ``claude-sonnet``). Pinned examples:
    ``claude-haiku-4-5-20251001``, ``gpt-4o-2024-08-06``, ``llama3:8b-q4``, ``qwen@sha256…``.
    """
    m = (model or "").strip()
    if not m:
        return "no model id given"
    low = m.lower()
    if low == "latest" or low.endswith(("-latest", ":latest", "/latest", "_latest")):
        return f"'{m}' is a floating alias (latest): it can resolve to a new snapshot mid-run"
    tail = re.split(r"[-:/@_]", low.split("/")[-1])[-1]
    if _PINNED_TAIL.fullmatch(tail) or re.search(r"(\d{4}-\d{2}-\d{2})$", low):
        return None
    return (f"'{m}' has no snapshot, date or version suffix: it may be a floating alias that "
            "resolves to a new snapshot mid-run; pin the exact snapshot id")


def sampling_params_rejected(model: str) -> bool:
    """True when ``model`` is one whose API rejects temperature / top_p / top_k (HTTP 400)."""
    low = (model or "").lower()
    return any(low.startswith(prefix) for prefix in NO_SAMPLING_MODELS)


@dataclass(frozen=True)
class Criterion:
    """A rubric criterion: name, maximum points (None when unknown) and weight."""

    name: str
    max_points: float | None = None
    weight: float = 1.0


def parse_criteria_spec(spec: str | None) -> list[Criterion]:
    """Parse ``"technical_skills:10,experience:25:2"`` (name:max[:weight]).

    ``name`` alone means max unknown, weight 1.
    """
    if not spec:
        return []
    out: list[Criterion] = []
    for i, part in enumerate(p.strip() for p in spec.split(",")):
        if not part:
            continue
        bits = [b.strip() for b in part.split(":")]
        name = bits[0]
        if not name:
            raise InputError(f"criteria item {i + 1} ('{part}') has no name; "
                             "write name:max[:weight]")
        try:
            mx = float(bits[1]) if len(bits) > 1 and bits[1] != "" else None
            w = float(bits[2]) if len(bits) > 2 and bits[2] != "" else 1.0
        except ValueError:
            raise InputError(f"criteria item '{part}': max and weight must be numbers; "
                             "write name:max[:weight]") from None
        if mx is not None and not mx > 0:
            raise InputError(f"criteria item '{part}': max points must be positive")
        out.append(Criterion(name, mx, w))
    return out


#: Sheet fields left out of the canonical form (and so of the hash) while unset.
_OPTIONAL_FIELDS = ("response_format", "schema_style", "answer_schema", "max_tokens",
                    "on_invalid")
ON_INVALID = ("recall", "clip", "keep-as-failed")


@dataclass(frozen=True)
class FreezeSheet:
    """The harness freeze sheet (SPEC §3.1).

    Validation happens in :meth:`validate`; :meth:`warnings` lists non-blocking findings
    (floating alias, sampling regime contradictions); :meth:`blockers` lists what stops a run
    (side-effect clearance).
    """

    req_id: str
    req_title: str = ""
    gates: str = "sorted-list"
    screener: str = ""
    screener_version: str = ""
    model: str = ""
    prompt_version: str = ""
    rubric_version: str = ""
    parser_version: str = ""
    sampling: str = "not-exposed"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    endpoint: str = ""
    side_effect_free: bool = False
    result_cache_off: bool = False
    distinct_request_ids: bool = True
    prefix_caching: bool = False
    criteria: tuple[Criterion, ...] = field(default_factory=tuple)
    # What the screener is asked to answer and how invalid answers are treated: they change
    # what is measured, so they are part of the hash. ``None`` = not recorded (sheets frozen
    # before these fields existed keep their hash).
    response_format: str | None = None
    schema_style: str | None = None
    answer_schema: dict[str, Any] | None = field(default=None, hash=False, compare=True)
    max_tokens: int | None = None
    on_invalid: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FreezeSheet:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"unknown freeze-sheet field(s): {', '.join(unknown)}")
        d = dict(data)
        crit = d.pop("criteria", ()) or ()
        criteria = tuple(c if isinstance(c, Criterion) else Criterion(
            str(c["name"]), (None if c.get("max") is None and c.get("max_points") is None
                             else float(c.get("max", c.get("max_points")))),
            float(c.get("weight", 1.0))) for c in crit)
        sheet = cls(criteria=criteria, **d)
        sheet.validate()
        return sheet

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # numbers in one canonical type, so 35 and 35.0 give the same hash
        d["criteria"] = [{"name": c.name,
                          "max": None if c.max_points is None else float(c.max_points),
                          "weight": float(c.weight)} for c in self.criteria]
        for key in ("temperature", "top_p"):
            if d[key] is not None:
                d[key] = float(d[key])
        for key in _OPTIONAL_FIELDS:
            if d.get(key) is None:
                d.pop(key, None)
        return d

    def validate(self) -> None:
        if not str(self.req_id).strip():
            raise InputError("the freeze sheet needs a req id (field 'req_id')")
        if self.sampling not in SAMPLING_REGIMES:
            raise InputError(f"sampling must be one of {', '.join(SAMPLING_REGIMES)}; "
                             f"got '{self.sampling}' (field 'sampling')")
        if self.gates not in GATES:
            raise InputError(f"gates must be one of {', '.join(GATES)}; got '{self.gates}' "
                             "(field 'gates')")
        if self.sampling != "settable" and any(
                v is not None for v in (self.temperature, self.top_p, self.top_k)):
            raise InputError("temperature / top_p / top_k can only be recorded when sampling is "
                             "'settable' (field 'sampling')")
        names = [c.name for c in self.criteria]
        if len(set(names)) != len(names):
            raise InputError("criteria names must be unique (field 'criteria')")
        if self.on_invalid is not None and self.on_invalid not in ON_INVALID:
            raise InputError(f"on_invalid must be one of {', '.join(ON_INVALID)}; got "
                             f"'{self.on_invalid}' (field 'on_invalid')")

    def warnings(self) -> list[str]:
        out = []
        alias = floating_alias(self.model)
        if alias:
            out.append(alias)
        if self.sampling == "settable" and sampling_params_rejected(self.model):
            out.append(f"'{self.model}' rejects temperature/top_p/top_k with HTTP 400: its "
                       "sampling regime is 'cannot-be-set', not 'settable'")
        if self.sampling == "settable" and self.temperature is None:
            out.append("sampling is 'settable' but no temperature is recorded")
        if not self.result_cache_off:
            out.append("the result cache is not confirmed off: a cached screener returns stored "
                       "answers and the audit measures zero variance for the wrong reason")
        return out

    def blockers(self) -> list[str]:
        if not self.side_effect_free:
            return ["side-effect clearance is missing: confirm a sandbox req or a side-effect-"
                    "free call path before any replication (15 runs of a live applicant can "
                    "write 15 score events and send 15 rejection mails)"]
        return []

    def harness_label(self) -> str:
        """``acme-screener v4.2 / claude-haiku-4-5 / rubric r7 / temperature 0.1``."""
        screener = " ".join(x for x in (self.screener, self.screener_version) if x) or "screener"
        if self.sampling == "settable":
            samp = f"temperature {self.temperature}" if self.temperature is not None \
                else "temperature unrecorded"
        elif self.sampling == "cannot-be-set":
            samp = "sampling cannot be set"
        else:
            samp = "temperature not exposed"
        rubric = f"rubric {self.rubric_version}" if self.rubric_version else "rubric unversioned"
        return f"{screener} / {self.model or 'model unknown'} / {rubric} / {samp}"

    @property
    def hash(self) -> str:
        return harness_hash(self.to_dict())


def harness_hash(sheet: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a freeze sheet (sorted keys, no spaces, UTF-8)."""
    canonical = json.dumps(sheet, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
