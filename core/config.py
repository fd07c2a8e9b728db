"""The TOML audit config (``audit.toml``) → a validated :class:`AuditConfig`.

Sections (see ``examples/audit.toml`` for a complete, commented example)::

    [audit]      id, req_id, req_title, gates, cutoff, applications_per_req
    [harness]    screener, screener_version, model, prompt_version, rubric_version,
                 parser_version, sampling ("settable" | "not-exposed" | "cannot-be-set"),
                 temperature, top_p, top_k, endpoint, side_effect_free, result_cache_off,
                 prefix_caching
    [[criteria]] name, max, weight
    [screener]   kind, model, api_key_env, parse, out_of_range, payload_path, [screener.paths],
                 and the kind's own fields (base_url, prompt_template, command, function, …)
    [run]        runs, concurrency, sample, seed, timeout_s, connect_timeout_s, max_retries,
                 rpm, preflight, max_calls_per_pair, on_invalid ("recall" | "clip" |
                 "keep-as-failed"), breaker, breaker_first_calls, breaker_fail_share,
                 breaker_consecutive, call_deadline_s, run_deadline_s, retry_wait_total_s,
                 max_response_bytes, max_application_bytes
    [prices."<model id>"]  input, output, cached_input ($ per million tokens)

Relative paths (sample, prompt templates, application files) are relative to the config file
and must stay inside its folder (applications: inside the sample's folder). A key, token or
password written in the config is refused: name its environment variable in ``api_key_env``
instead (a name that looks like a model API key; see
:func:`core.screeners.base.check_key_env_name`).

What the screener is asked to answer (``response_format``, the rubric schema, ``max_tokens``)
and ``on_invalid`` are written into the freeze sheet: they change what is measured.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, create_model

from core.errors import InputError
from core.freeze import Criterion, FreezeSheet
from core.run.options import MAX_CANDIDATES, PriceTable, RunOptions
from core.screeners.base import Screener
from core.screeners.options import input_error
from core.screeners.prompts import overhead_chars
from core.screeners.registry import (
    SCREENERS,
    answer_fields,
    build_screener,
    options_union,
)
from core.screeners.safety import check_key_env_name, inside_folder
from core.tables import Limits, read_table

__all__ = ["SAMPLE_COLUMNS", "AuditConfig", "load_config", "load_sample", "parse_config",
           "save_audit"]

SAMPLE_COLUMNS = ["candidate_id", "stratum", "first_pass_score", "application"]
#: Largest application text read from a file, and largest sample file.
MAX_APPLICATION_BYTES = 1_000_000
MAX_SAMPLE_BYTES = 100_000_000
_SECRET_KEY = re.compile(r"(^|_)(api_?key|key|token|secret|password|bearer)$", re.IGNORECASE)


# ============================================================================ the sections
class _Section(BaseModel):
    """A TOML table: typed values (TOML has types: no text-to-number coercion), no unknown
    keys."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Top(_Section):
    audit: dict[str, Any] = {}
    harness: dict[str, Any] = {}
    criteria: list[Any] = []
    screener: dict[str, Any] = {}
    run: dict[str, Any] = {}
    prices: dict[str, Any] | None = None


class _Audit(_Section):
    id: str = ""
    req_id: str = ""
    req_title: str = ""
    gates: str = "sorted-list"
    cutoff: float | None = None
    applications_per_req: int | None = Field(None, ge=0)


class _Harness(_Section):
    screener: str | None = None
    screener_version: str = ""
    model: str = ""
    prompt_version: str = ""
    rubric_version: str = ""
    parser_version: str | None = None
    sampling: str = "not-exposed"
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    endpoint: str | None = None
    side_effect_free: bool = False
    result_cache_off: bool = False
    prefix_caching: bool = False
    distinct_request_ids: bool = True


#: The bounds an import's criteria get (core.ingest's, kept here so a config load does not
#: import the file readers; a test holds the two equal).
MAX_POINTS_CAP = 1e6
MAX_WEIGHT = 1000.0


class _Criterion(_Section):
    name: str = Field(min_length=1)
    max: float | None = Field(None, gt=0, le=MAX_POINTS_CAP, allow_inf_nan=False)
    weight: float = Field(1.0, ge=0, le=MAX_WEIGHT, allow_inf_nan=False)


#: ``[run]``: the engine's options (their bounds are :class:`RunOptions`' own), the sample and
#: the application size cap.
_Run: type[_Section] = create_model(
    "_Run", __base__=_Section,
    sample=(str | None, None),
    max_application_bytes=(StrictInt, Field(MAX_APPLICATION_BYTES, ge=1, le=50_000_000)),
    **{f.name: (typing.get_type_hints(RunOptions)[f.name], f.default)
       for f in dataclasses.fields(RunOptions)})


def _section(model: type[BaseModel], data: Any, section: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise input_error(exc, section, model=model) from None


def _refuse_secrets(data: Any, where: str) -> None:
    if isinstance(data, Mapping):
        for k, v in data.items():
            if isinstance(k, str) and _SECRET_KEY.search(k) and k not in (
                    "api_key_env", "api_key_header") and v not in (None, ""):
                raise InputError(f"[{where}] has '{k}': never write a key in the config; put it "
                                 "in an environment variable and name that variable in "
                                 "api_key_env")
            _refuse_secrets(v, f"{where}.{k}")


@dataclass(frozen=True)
class AuditConfig:
    """A validated audit config.

    ``sheet`` is the freeze sheet (hash = harness version); ``screener_kind`` /
    ``screener_options`` build the adapter with :meth:`build_screener` (the API key is read
    then, from the environment or the secrets passed in, never stored here).
    """

    audit_id: str
    sheet: FreezeSheet
    criteria: tuple[Criterion, ...]
    screener_kind: str
    screener_options: Mapping[str, Any]
    options: RunOptions
    sample_path: Path | None
    prices: PriceTable
    max_application_bytes: int = MAX_APPLICATION_BYTES
    cutoff: float | None = None
    applications_per_req: int | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    source: str | None = None

    def build_screener(self, secrets: Mapping[str, Any] | None = None, *,
                       allow_code: bool = False) -> Screener:
        """The screener adapter (reads the API key named by ``api_key_env``).

        ``command`` / ``python`` kinds need ``allow_code`` (the CLI's ``--allow-code``)."""
        return build_screener(self.screener_kind, self.screener_options, criteria=self.criteria,
                              sheet=self.sheet, seed=self.options.seed, secrets=secrets,
                              base_dir=self.base_dir, allow_code=allow_code)

    def settings(self) -> dict[str, Any]:
        """Audit settings to store (no secrets: the key's variable *name* at most).

        The call limits go with them, so the app runs the audit as the config says; and, for
        chat screeners, the length of the rendered templates (``prompt_overhead_chars``), so
        the app's estimate and the command line's are one and the same."""
        screener = dict(self.screener_options)
        screener["kind"] = self.screener_kind
        extra: dict[str, Any] = {}
        if "prompt" in SCREENERS[self.screener_kind].Options.model_fields:   # a chat kind
            extra["prompt_overhead_chars"] = overhead_chars(
                self.screener_options, self.criteria, self.base_dir)
        return {
            **extra,
            "timeout_s": self.options.timeout_s,
            "max_retries": self.options.max_retries,
            "rpm": self.options.rpm,
            "cutoff": self.cutoff,
            "applications_per_req": self.applications_per_req,
            "runs": self.options.runs,
            "seed": self.options.seed,
            "concurrency": self.options.concurrency,
            "on_invalid": self.options.on_invalid,
            "max_calls_per_pair": self.options.max_calls_per_pair,
            "screener": screener,
            "prices": self.prices.to_dict(),
            "config_file": self.source,
        }

    def load_sample(self) -> pd.DataFrame:
        if self.sample_path is None:
            raise InputError("no sample given: set sample = \"sample.csv\" in [run]")
        return load_sample(self.sample_path, max_application_bytes=self.max_application_bytes)


def load_config(path: str | Path) -> AuditConfig:
    """Read and validate ``audit.toml``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the config: {exc.strerror}", file=str(p)) from None
    return parse_config(text, base_dir=p.resolve().parent, source=str(p))


def parse_config(text: str, *, base_dir: str | Path = ".", source: str | None = None
                 ) -> AuditConfig:
    """Validate a TOML config given as text (relative paths resolve against ``base_dir``).

    Each table is checked by a pydantic model; the ``[screener]`` table by the union of the
    adapters' options models keyed on ``kind``. The first mistake is one line naming the table
    and the key, with the nearest valid key for a typo (:mod:`core.screeners.options`).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", file=source) from None
    _refuse_secrets(data, "config")
    top = _section(_Top, data, "config")
    base = Path(base_dir)
    audit = _section(_Audit, top.audit, "audit")
    harness = _section(_Harness, top.harness, "harness")
    run = _section(_Run, top.run, "run")
    audit_id = audit.id.strip()
    if not audit_id:
        raise InputError("[audit] needs an id (field 'id'), e.g. id = \"eng-2291-r7\"")

    criteria = []
    for i, c in enumerate(top.criteria):
        name = c.get("name") if isinstance(c, Mapping) else None
        if not name:
            raise InputError(f"[[criteria]] item {i + 1} needs a name")
        item = _section(_Criterion, c, f"criteria '{name}'")
        criteria.append(Criterion(item.name, item.max, item.weight))
    if any(c.name == "total" for c in criteria):
        raise InputError("[[criteria]]: 'total' is reserved for the screener's total")

    raw = {"kind": "simulated", **top.screener}
    models = {k: c.Options for k, c in SCREENERS.items()}
    try:
        scr = options_union().validate_python(raw)
    except ValidationError as exc:
        raise input_error(exc, "screener", models=models) from None
    kind = scr.kind
    model = harness.model
    if scr.model and model and scr.model != model:
        raise InputError(f"[screener] model '{scr.model}' differs from the frozen "
                         f"[harness] model '{model}': the run must call the frozen model")
    model = model or scr.model or ("sim-screener-1" if kind == "simulated" else "")
    if not model:
        raise InputError("[harness] needs the exact model id (field 'model')")
    screener = {k: v for k, v in raw.items() if k != "kind"}
    screener.setdefault("model", model)
    if getattr(scr, "api_key_env", None):
        check_key_env_name(str(scr.api_key_env))

    # invalid answers: [run] on_invalid, or the older [screener] out_of_range = "clip"
    on_invalid = top.run.get("on_invalid")
    if scr.out_of_range == "clip":
        if on_invalid not in (None, "clip"):
            raise InputError(f"[screener] out_of_range = \"clip\" contradicts [run] on_invalid "
                             f"= \"{on_invalid}\": keep one (on_invalid)")
        on_invalid = "clip"
    on_invalid = on_invalid or "recall"
    answer = answer_fields(kind, screener, tuple(criteria), on_invalid)

    endpoint = harness.endpoint or SCREENERS[kind].endpoint(scr)
    sheet_fields = {
        "req_id": audit.req_id, "req_title": audit.req_title, "gates": audit.gates,
        "screener": harness.screener or kind,
        "screener_version": harness.screener_version, "model": model,
        "prompt_version": harness.prompt_version, "rubric_version": harness.rubric_version,
        "parser_version": harness.parser_version or str(scr.parse),
        "sampling": harness.sampling, "temperature": harness.temperature,
        "top_p": harness.top_p, "top_k": harness.top_k, "endpoint": str(endpoint),
        "side_effect_free": harness.side_effect_free,
        "result_cache_off": harness.result_cache_off,
        "distinct_request_ids": harness.distinct_request_ids,
        "prefix_caching": harness.prefix_caching,
        "criteria": tuple(criteria),
        **answer,
    }
    try:
        sheet = FreezeSheet.from_dict(sheet_fields)
    except TypeError as exc:
        raise InputError(f"[harness]: {exc}") from None

    engine = run.model_dump(exclude={"sample", "max_application_bytes"})
    engine["on_invalid"] = on_invalid
    if engine.get("rpm") == 0:
        engine["rpm"] = None
    try:
        options = RunOptions(**engine)
    except TypeError as exc:
        raise InputError(f"[run]: {exc}") from None
    if run.sample:
        inside_folder(base, run.sample, "sample")
    prices = PriceTable.from_dict(top.prices)
    return AuditConfig(
        audit_id=audit_id, sheet=sheet, criteria=tuple(criteria), screener_kind=kind,
        screener_options=screener, options=options,
        max_application_bytes=run.max_application_bytes,
        sample_path=(base / run.sample).resolve() if run.sample else None, prices=prices,
        cutoff=audit.cutoff, applications_per_req=audit.applications_per_req,
        base_dir=base.resolve(), source=source)


def _cell(value: Any) -> str:
    """A sample cell as text (an empty cell is ``""``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def load_sample(path: str | Path, *,
                max_application_bytes: int = MAX_APPLICATION_BYTES) -> pd.DataFrame:
    """The candidate sample: ``candidate_id, stratum, first_pass_score, application``.

    The file (CSV, Parquet or JSON Lines, read by :func:`core.tables.read_table` within its
    bounds) has ``candidate_id`` and either ``application`` (the text) or
    ``application_path`` (a file inside the sample's folder: no absolute path, no ``..``, no
    symlink out; at most ``max_application_bytes``); ``stratum`` and ``first_pass_score``
    are optional. Rows are numbered as a spreadsheet user counts them after the header.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("sample file not found; check [run] sample", file=str(p))
    limits = dataclasses.replace(Limits.from_env(), max_bytes=MAX_SAMPLE_BYTES,
                                 max_rows=MAX_CANDIDATES + 1)
    df, _, _ = read_table(p, name=str(p), limits=limits)
    df.columns = [str(c).strip() for c in df.columns]
    if "candidate_id" not in df.columns:
        raise InputError("the sample needs a candidate_id column", file=str(p),
                         column="candidate_id")
    if "application" not in df.columns and "application_path" not in df.columns:
        raise InputError("the sample needs an application (text) or application_path column",
                         file=str(p), column="application")
    if len(df) > MAX_CANDIDATES:
        raise InputError(f"the sample has {len(df):,} rows; one audit takes at most "
                         f"{MAX_CANDIDATES:,} candidates", file=str(p))
    out = []
    seen: set[str] = set()
    for i, row in enumerate(df.to_dict("records"), start=1):
        cid = _cell(row["candidate_id"]).strip()
        if not cid:
            raise InputError("empty candidate_id", file=str(p), row=i, column="candidate_id")
        if cid in seen:
            raise InputError(f"duplicate candidate_id '{cid}'", file=str(p), row=i,
                             column="candidate_id")
        seen.add(cid)
        text = _cell(row.get("application"))
        if not text and _cell(row.get("application_path")):
            text = _application_file(p, _cell(row["application_path"]), i,
                                     max_application_bytes)
        if not text:
            raise InputError("no application text", file=str(p), row=i, column="application")
        fps = _cell(row.get("first_pass_score")).strip()
        score = None
        if fps:
            try:
                score = float(fps)
            except ValueError:
                raise InputError(f"'{fps}' is not a number", file=str(p), row=i,
                                 column="first_pass_score") from None
            if not math.isfinite(score):
                raise InputError(f"'{fps}' is not a finite number", file=str(p), row=i,
                                 column="first_pass_score")
        stratum = _cell(row.get("stratum")).strip() or None
        out.append({"candidate_id": cid, "stratum": stratum, "first_pass_score": score,
                    "application": text})
    frame = pd.DataFrame(out, columns=SAMPLE_COLUMNS)
    frame["first_pass_score"] = frame["first_pass_score"].astype("float64")
    return frame


def _application_file(sample: Path, rel: str, row: int, max_bytes: int) -> str:
    """The text of an ``application_path`` (inside the sample's folder, at most
    ``max_bytes``)."""
    where = {"file": str(sample), "row": row, "column": "application_path"}
    try:
        ap = inside_folder(sample.resolve().parent, rel, "application_path")
    except InputError as exc:
        raise InputError(str(exc), **where) from None
    try:
        if ap.stat().st_size > max_bytes:
            raise InputError(f"'{rel}' is {ap.stat().st_size:,} bytes, over "
                             f"max_application_bytes = {max_bytes:,}", **where)
        return ap.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read '{rel}': {exc.strerror}", **where) from None
    except UnicodeDecodeError:
        raise InputError(f"'{rel}' is not UTF-8 text", **where) from None


def save_audit(store: Any, config: AuditConfig, sample: pd.DataFrame | None = None) -> None:
    """Save the audit before any call: freeze sheet + hash + settings, criteria, candidates.

    Raises :class:`~core.errors.FrozenError` when the audit has draws under another harness.
    """
    sample = config.load_sample() if sample is None else sample
    store.save_audit(config.audit_id, config.sheet.to_dict(), config.sheet.hash,
                     config.settings())
    crit = pd.DataFrame({"criterion": [c.name for c in config.criteria],
                         "position": list(range(len(config.criteria))),
                         "max_points": [c.max_points for c in config.criteria],
                         "weight": [c.weight for c in config.criteria]})
    if len(crit):
        store.set_criteria(config.audit_id, crit)
    store.upsert_candidates(config.audit_id, sample)
