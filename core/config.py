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

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.errors import InputError
from core.freeze import Criterion, FreezeSheet
from core.run.options import MAX_CANDIDATES, PriceTable, RunOptions
from core.screeners.base import Screener, check_key_env_name
from core.screeners.registry import (
    KINDS,
    answer_fields,
    build_screener,
    inside_folder,
    parse_spec_from,
)

__all__ = ["SAMPLE_COLUMNS", "AuditConfig", "load_config", "load_sample", "parse_config",
           "prompt_overhead_chars", "save_audit"]

SAMPLE_COLUMNS = ["candidate_id", "stratum", "first_pass_score", "application"]
_SECTIONS = {"audit", "harness", "criteria", "screener", "run", "prices"}
_AUDIT_KEYS = {"id", "req_id", "req_title", "gates", "cutoff", "applications_per_req"}
_HARNESS_KEYS = {"screener", "screener_version", "model", "prompt_version", "rubric_version",
                 "parser_version", "sampling", "temperature", "top_p", "top_k", "endpoint",
                 "side_effect_free", "result_cache_off", "prefix_caching",
                 "distinct_request_ids"}
_RUN_KEYS = {"runs", "concurrency", "sample", "seed", "timeout_s", "connect_timeout_s",
             "max_retries", "backoff_base_s", "backoff_cap_s", "retry_after_cap_s", "rpm",
             "preflight", "max_calls_per_pair", "stop_on_finding", "on_invalid", "breaker",
             "breaker_first_calls", "breaker_fail_share", "breaker_consecutive",
             "call_deadline_s", "run_deadline_s", "retry_wait_total_s", "max_response_bytes",
             "max_application_bytes", "batch_rows", "flush_s"}
#: Largest application text read from a file, and largest sample file.
MAX_APPLICATION_BYTES = 1_000_000
MAX_SAMPLE_BYTES = 100_000_000
_SECRET_KEY = re.compile(r"(^|_)(api_?key|key|token|secret|password|bearer)$", re.IGNORECASE)


def _unknown(section: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise InputError(f"unknown field(s) in [{section}]: {', '.join(extra)}; allowed: "
                         f"{', '.join(sorted(allowed))}")


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
        if self.screener_kind in ("openai-chat", "anthropic"):
            extra["prompt_overhead_chars"] = prompt_overhead_chars(
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


def prompt_overhead_chars(options: Mapping[str, Any], criteria: tuple[Criterion, ...],
                          base_dir: str | Path = ".") -> int:
    """Characters of the system and prompt templates rendered without an application (the
    part of every call's input that is not the application)."""
    from core.screeners.base import render_template, rubric_text
    from core.screeners.openai_chat import DEFAULT_PROMPT, DEFAULT_SYSTEM
    from core.screeners.registry import _text

    base = Path(base_dir)
    prompt = _text(options, "prompt_template", "prompt", base, DEFAULT_PROMPT) or ""
    system = _text(options, "system_template", "system", base, DEFAULT_SYSTEM) or ""
    values = {"rubric": rubric_text(tuple(criteria)), "application": "", "candidate_id": "",
              "request_id": "0" * 32}
    return len(render_template(prompt, values)) + len(render_template(system, values))


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
    """Validate a TOML config given as text (relative paths resolve against ``base_dir``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", file=source) from None
    _unknown("top level", data, _SECTIONS)
    _refuse_secrets(data, "config")
    base = Path(base_dir)
    audit = dict(data.get("audit") or {})
    harness = dict(data.get("harness") or {})
    screener = dict(data.get("screener") or {})
    run = dict(data.get("run") or {})
    _unknown("audit", audit, _AUDIT_KEYS)
    _unknown("harness", harness, _HARNESS_KEYS)
    _unknown("run", run, _RUN_KEYS)
    audit_id = str(audit.get("id") or "").strip()
    if not audit_id:
        raise InputError("[audit] needs an id (field 'id'), e.g. id = \"eng-2291-r7\"")

    criteria = []
    for i, c in enumerate(data.get("criteria") or []):
        if not isinstance(c, Mapping) or not c.get("name"):
            raise InputError(f"[[criteria]] item {i + 1} needs a name")
        _unknown(f"criteria {c.get('name')}", c, {"name", "max", "weight"})
        try:
            mx = None if c.get("max") is None else float(c["max"])
            w = float(c.get("weight", 1.0))
        except (TypeError, ValueError):
            raise InputError(f"[[criteria]] '{c['name']}': max and weight must be "
                             "numbers") from None
        if mx is not None and not (math.isfinite(mx) and mx > 0):
            raise InputError(f"[[criteria]] '{c['name']}': max must be positive")
        criteria.append(Criterion(str(c["name"]), mx, w))
    if any(c.name == "total" for c in criteria):
        raise InputError("[[criteria]]: 'total' is reserved for the screener's total")

    kind = str(screener.pop("kind", "simulated"))
    if kind not in KINDS:
        raise InputError(f"[screener] kind must be one of {', '.join(KINDS)}; got '{kind}'")
    model = str(harness.get("model") or "")
    if screener.get("model") and model and str(screener["model"]) != model:
        raise InputError(f"[screener] model '{screener['model']}' differs from the frozen "
                         f"[harness] model '{model}': the run must call the frozen model")
    if not model:
        model = str(screener.get("model") or ("sim-screener-1" if kind == "simulated" else ""))
    if not model:
        raise InputError("[harness] needs the exact model id (field 'model')")
    screener.setdefault("model", model)
    spec = parse_spec_from(screener)  # validates the parse preset early
    if screener.get("api_key_env"):
        check_key_env_name(str(screener["api_key_env"]))

    # invalid answers: [run] on_invalid, or the older [screener] out_of_range = "clip"
    on_invalid = run.get("on_invalid")
    if spec.out_of_range == "clip":
        if on_invalid not in (None, "clip"):
            raise InputError(f"[screener] out_of_range = \"clip\" contradicts [run] on_invalid "
                             f"= \"{on_invalid}\": keep one (on_invalid)")
        on_invalid = "clip"
    run["on_invalid"] = on_invalid or "recall"
    answer = answer_fields(kind, screener, tuple(criteria), run["on_invalid"])

    endpoint = harness.get("endpoint") or screener.get("base_url") or screener.get("url") or (
        f"command: {screener.get('command')}" if kind == "command" else
        f"python: {screener.get('function')}" if kind == "python" else kind)
    sheet_fields = {
        "req_id": str(audit.get("req_id") or ""),
        "req_title": str(audit.get("req_title") or ""),
        "gates": str(audit.get("gates", "sorted-list")),
        "screener": str(harness.get("screener") or kind),
        "screener_version": str(harness.get("screener_version") or ""),
        "model": model,
        "prompt_version": str(harness.get("prompt_version") or ""),
        "rubric_version": str(harness.get("rubric_version") or ""),
        "parser_version": str(harness.get("parser_version") or
                              f"{screener.get('parse', 'flat')}"),
        "sampling": str(harness.get("sampling", "not-exposed")),
        "temperature": harness.get("temperature"),
        "top_p": harness.get("top_p"),
        "top_k": harness.get("top_k"),
        "endpoint": str(endpoint),
        "side_effect_free": bool(harness.get("side_effect_free", False)),
        "result_cache_off": bool(harness.get("result_cache_off", False)),
        "distinct_request_ids": bool(harness.get("distinct_request_ids", True)),
        "prefix_caching": bool(harness.get("prefix_caching", False)),
        "criteria": tuple(criteria),
        **answer,
    }
    try:
        sheet = FreezeSheet.from_dict(sheet_fields)
    except TypeError as exc:
        raise InputError(f"[harness]: {exc}") from None

    if run.get("rpm") == 0:
        run["rpm"] = None
    app_bytes = run.pop("max_application_bytes", MAX_APPLICATION_BYTES)
    if isinstance(app_bytes, bool) or not isinstance(app_bytes, int) or not (
            1 <= app_bytes <= 50_000_000):
        raise InputError("[run] max_application_bytes must be a whole number from 1 to "
                         "50,000,000")
    try:
        options = RunOptions(**{k: v for k, v in run.items() if k != "sample"})
    except TypeError as exc:
        raise InputError(f"[run]: {exc}") from None
    sample = run.get("sample")
    if sample:
        inside_folder(base, str(sample), "sample")
    prices = PriceTable.from_dict(data.get("prices"))

    def _num(key: str) -> float | None:
        v = audit.get(key)
        if v is None:
            return None
        try:
            return float(v)
        except (TypeError, ValueError):
            raise InputError(f"[audit] {key} must be a number") from None

    apps = _num("applications_per_req")
    return AuditConfig(
        audit_id=audit_id, sheet=sheet, criteria=tuple(criteria), screener_kind=kind,
        screener_options=screener, options=options, max_application_bytes=int(app_bytes),
        sample_path=(base / str(sample)).resolve() if sample else None, prices=prices,
        cutoff=_num("cutoff"), applications_per_req=None if apps is None else int(apps),
        base_dir=base.resolve(), source=source)


def load_sample(path: str | Path, *,
                max_application_bytes: int = MAX_APPLICATION_BYTES) -> pd.DataFrame:
    """The candidate sample: ``candidate_id, stratum, first_pass_score, application``.

    The CSV has ``candidate_id`` and either ``application`` (the text) or
    ``application_path`` (a file inside the CSV's folder: no absolute path, no ``..``, no
    symlink out; at most ``max_application_bytes``); ``stratum`` and ``first_pass_score``
    are optional. Rows are numbered as a spreadsheet user counts them after the header.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    if size > MAX_SAMPLE_BYTES:
        raise InputError(f"the sample file is {size:,} bytes, over the limit of "
                         f"{MAX_SAMPLE_BYTES:,}", file=str(p))
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise InputError("sample file not found; check [run] sample", file=str(p)) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"not a readable CSV: {exc}", file=str(p)) from None
    df.columns = [str(c).strip() for c in df.columns]
    if "candidate_id" not in df.columns:
        raise InputError("the sample needs a candidate_id column", file=str(p),
                         column="candidate_id")
    if "application" not in df.columns and "application_path" not in df.columns:
        raise InputError("the sample needs an application (text) or application_path column",
                         file=str(p), column="application")
    if df.empty:
        raise InputError("the sample has no rows", file=str(p))
    if len(df) > MAX_CANDIDATES:
        raise InputError(f"the sample has {len(df):,} rows; one audit takes at most "
                         f"{MAX_CANDIDATES:,} candidates", file=str(p))
    out = []
    seen: set[str] = set()
    for i, row in enumerate(df.to_dict("records"), start=1):
        cid = str(row["candidate_id"]).strip()
        if not cid:
            raise InputError("empty candidate_id", file=str(p), row=i, column="candidate_id")
        if cid in seen:
            raise InputError(f"duplicate candidate_id '{cid}'", file=str(p), row=i,
                             column="candidate_id")
        seen.add(cid)
        text = str(row.get("application") or "")
        if not text and row.get("application_path"):
            rel = str(row["application_path"])
            try:
                ap = inside_folder(p.resolve().parent, rel, "application_path")
            except InputError as exc:
                raise InputError(str(exc), file=str(p), row=i,
                                 column="application_path") from None
            try:
                if ap.stat().st_size > max_application_bytes:
                    raise InputError(f"'{rel}' is {ap.stat().st_size:,} bytes, over "
                                     f"max_application_bytes = {max_application_bytes:,}",
                                     file=str(p), row=i, column="application_path")
                text = ap.read_text(encoding="utf-8")
            except OSError as exc:
                raise InputError(f"cannot read '{rel}': {exc.strerror}", file=str(p), row=i,
                                 column="application_path") from None
            except UnicodeDecodeError:
                raise InputError(f"'{rel}' is not UTF-8 text", file=str(p), row=i,
                                 column="application_path") from None
        if not text:
            raise InputError("no application text", file=str(p), row=i, column="application")
        fps = str(row.get("first_pass_score") or "").strip()
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
        stratum = str(row.get("stratum") or "").strip() or None
        out.append({"candidate_id": cid, "stratum": stratum, "first_pass_score": score,
                    "application": text})
    frame = pd.DataFrame(out, columns=SAMPLE_COLUMNS)
    frame["first_pass_score"] = frame["first_pass_score"].astype("float64")
    return frame


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
