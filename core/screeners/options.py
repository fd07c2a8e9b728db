"""The pydantic models of the screeners' options and their one-line error messages.

Every adapter declares ``Options``, a subclass of :class:`ScreenerOptions`: field names are the
keys of a config's ``[screener]`` table, field types and bounds validate them, ``description``
is the help text the Run page shows next to each field, ``title`` its label when the name
alone does not say it. ``extra="forbid"``: an unknown key is an error that names it and
suggests the nearest valid one (:func:`validation_message`).

Fields may carry hints for the Run page's generated form in ``json_schema_extra``:
``{"form": False}`` (a config-only field, e.g. a template *file* relative to the config),
``{"widget": "textarea"}`` (long text), ``{"widget": "lines"}`` (a mapping written as
``key = value`` lines), ``{"widget": "json"}`` (any JSON value), ``{"placeholder": …}``,
``{"choices": {value: label}}`` (labels of a ``Literal``'s values), ``{"columns": 1}`` (a narrow
field, laid out two to a row), ``{"order": -1}`` (a primary field, drawn first),
``{"default_value": …}`` (what the form starts with when the option is not set),
``{"default_for_rubric": True}`` (an answer format starting on the rubric's default),
``{"secret_name": True}`` (the *name* of a variable holding a key, never the key).

This module imports pydantic (about 0.1 s the first time): only code that validates a config or
builds a screener loads it — never the engine, the slider path or the pages other than Run.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import BuildContext
from core.screeners.parsing import PRESETS, ParseSpec
from core.screeners.prompts import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROMPT,
    DEFAULT_SYSTEM,
    MAX_TOKENS_CAP,
    require_application,
    template_text,
)
from core.screeners.safety import check_base_url, resolve_api_key
from core.screeners.schema import RESPONSE_FORMATS, default_response_format, rubric_schema

__all__ = ["ChatOptions", "HttpOptions", "ScreenerOptions", "config_only", "form_fields",
           "input_error", "nearest", "validation_message"]

ParsePreset = Literal[PRESETS]  # type: ignore[valid-type]
ResponseFormat = Literal[RESPONSE_FORMATS]  # type: ignore[valid-type]


def config_only(default: Any = None, description: str = "", **kw: Any) -> Any:
    """A field a config may set but the Run page's form does not show."""
    return Field(default, description=description, json_schema_extra={"form": False}, **kw)


class ScreenerOptions(BaseModel):
    """What every screener kind accepts: the model, and how its answer becomes scores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    model: str = Field(
        "", title="Model",
        description="Empty = the model frozen on the sheet. Another id makes its draws a "
                    "second population.",
        json_schema_extra={"placeholder": "the exact model id", "columns": 1})
    parse: ParsePreset = Field(
        "flat", title="Answer format (parse preset)",
        description="How the answer's JSON holds the scores.",
        json_schema_extra={"choices": {
            "flat": "flat: {criterion: score, …, total}",
            "nested": "nested: {scores: {criterion: {score, max}}, bonus_points, deductions}",
            "paths": "paths: one dotted path per criterion (below)"}, "columns": 1})
    payload_path: str | None = Field(
        None, title="Scores sit under (dotted path, optional)",
        description="Where the scores object sits inside the answer, e.g. result.",
        json_schema_extra={"placeholder": "result", "columns": 1})
    paths: dict[str, str] | None = Field(
        None, title="Score paths (one per line: criterion = dotted.path)",
        description="Needed for the 'paths' preset; with the others they override single "
                    "criteria.",
        json_schema_extra={"widget": "lines",
                           "placeholder": "technical_skills = result.scores.technical\n"
                                          "total = result.total"})
    out_of_range: Literal["error", "clip"] = Field(
        "error", title="A score outside 0..max",
        description="Clipped scores are recorded as clipped; an error makes the answer "
                    "invalid.",
        json_schema_extra={"choices": {"error": "reject the answer (invalid)",
                                       "clip": "clip it to 0..max (recorded as clipped)"}})

    def parse_spec(self) -> ParseSpec:
        """How the answer becomes scores."""
        return ParseSpec(preset=self.parse, paths=dict(self.paths or {}),
                         payload_path=self.payload_path, out_of_range=self.out_of_range)

    def model_id(self, context: BuildContext, default: str = "") -> str:
        """The model called: these options' ``model``, else the frozen one, else ``default``;
        :class:`InputError` when there is none."""
        model = self.model or (context.sheet.model if context.sheet else "") or default
        if not model:
            raise InputError("the screener needs a model id ([harness] model)")
        return model


class HttpOptions(ScreenerOptions):
    """Options of the kinds that call a server: the key's variable name."""

    api_key_env: str | None = Field(
        None, title="API key variable (its name, not the key)",
        description="The NAME of an environment variable (or Streamlit secret) holding the "
                    "key. The key is read when the screener is built and never shown or "
                    "stored. Empty for a local server without authentication.",
        json_schema_extra={"columns": 1, "secret_name": True})

    def api_key(self, context: BuildContext) -> str | None:
        """The key named by ``api_key_env`` (secrets first, then the environment)."""
        return resolve_api_key(self.api_key_env, context.secrets)

    @staticmethod
    def checked_url(url: str | None, field_name: str) -> str | None:
        """``url`` when it is safe to send applications and a key to (issue 12)."""
        return check_base_url(url, field_name) if url else None


class ChatOptions(HttpOptions):
    """Options shared by the chat kinds (OpenAI-compatible, Anthropic)."""

    prompt: str | None = Field(
        None, title="Prompt template",
        description="{application} is replaced by the candidate's application, {rubric} by "
                    "the frozen criteria, {candidate_id} and {request_id} by theirs.",
        json_schema_extra={"widget": "textarea", "default_value": DEFAULT_PROMPT})
    system: str | None = Field(
        None, title="System template",
        description="Sent as the system message (empty: none). Same placeholders.",
        json_schema_extra={"widget": "textarea", "default_value": DEFAULT_SYSTEM})
    prompt_template: str | None = config_only(
        description="A file (relative to the config) holding the prompt template.")
    system_template: str | None = config_only(
        description="A file (relative to the config) holding the system template.")
    response_format: ResponseFormat | None = Field(
        None, title="Answer format",
        description="A JSON schema built from the frozen criteria (one number per criterion "
                    "within 0..max, nothing else) keeps a small model from inventing keys. "
                    "Frozen with the sheet.",
        json_schema_extra={"columns": 1, "default_for_rubric": True, "choices": {
            "json_schema": "JSON schema from the rubric (the server enforces the keys and "
                           "ranges)",
            "json_object": "any JSON object (the model chooses the keys)",
            "none": "no format requested"}})
    max_tokens: int = Field(
        DEFAULT_MAX_TOKENS, ge=1, le=MAX_TOKENS_CAP, title="Max output tokens per call",
        description="Always sent: an answer cut off by it is counted as truncated. Frozen "
                    "with the sheet.", json_schema_extra={"columns": 1, "step": 64})
    schema_total: bool = Field(
        False, title="The schema also asks for a total",
        description="Adds a required 'total' to the rubric schema (the screener's own total).")

    def effective_response_format(self) -> str | None:
        """``response_format``, or ``"none"`` for an older setting that switched json mode off
        (``json_mode = false``); ``None`` = the default for the rubric."""
        if self.response_format is None and getattr(self, "json_mode", None) is False:
            return "none"
        return self.response_format

    def prompt_text(self, base_dir: Path) -> str:
        """The prompt template; it must insert the application."""
        text = template_text(self.model_dump(), "prompt_template", "prompt", base_dir,
                             DEFAULT_PROMPT) or DEFAULT_PROMPT
        return require_application(text, "prompt template", "prompt_template")

    def system_text(self, base_dir: Path) -> str | None:
        """The system template (``""``: no system message)."""
        return template_text(self.model_dump(), "system_template", "system", base_dir,
                             DEFAULT_SYSTEM)

    def answer_fields(self, criteria: tuple[Criterion, ...],
                      schema_style: str) -> dict[str, Any]:
        """The freeze-sheet fields of a chat screener's answer (see
        :meth:`core.screeners.base.Screener.answer_fields`)."""
        rf = self.effective_response_format() or default_response_format(tuple(criteria))
        json_schema = rf == "json_schema"
        return {"response_format": rf, "max_tokens": self.max_tokens,
                "answer_schema": rubric_schema(tuple(criteria), total=self.schema_total)
                if json_schema else None,
                "schema_style": schema_style if json_schema else None}


# ============================================================================ messages
def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The valid name closest to a typo (``difflib``), or ``None`` when none is close."""
    found = difflib.get_close_matches(str(word), sorted(set(choices)), n=1, cutoff=0.6)
    return found[0] if found else None


def _fields(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model is not None else []


def validation_message(exc: ValidationError, section: str,
                       models: Mapping[str, type[BaseModel]] | None = None,
                       model: type[BaseModel] | None = None) -> str:
    """The first error of ``exc`` as one line naming the section and the key.

    ``models`` maps a union's tags (the ``kind``) to their models, so that an unknown key is
    compared with the keys of the kind the user chose; ``model`` is the plain model otherwise.
    An unknown key gets "did you mean …" when a valid key is close.
    """
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    where = model
    if models is not None and loc and loc[0] in models:
        where = models[loc[0]]
        loc = loc[1:]
    key = ".".join(loc)
    etype = err["type"]
    kind = where.model_fields["kind"].default if where is not None and \
        "kind" in where.model_fields else None
    tag = f" for kind '{kind}'" if isinstance(kind, str) else ""
    if etype == "extra_forbidden":
        hint = nearest(loc[-1], _fields(where)) if loc else None
        msg = f"[{section}] unknown key '{key}'{tag}"
        return msg + (f": did you mean '{hint}'?" if hint else
                      f"; valid keys: {', '.join(k for k in _fields(where) if k != 'kind')}")
    if etype in ("union_tag_invalid", "union_tag_not_found") and models is not None:
        given = (err.get("ctx") or {}).get("tag", "")
        hint = nearest(given, models) if given else None
        msg = (f"[{section}] kind must be one of {', '.join(models)}; got '{given}' "
               "(field 'kind')")
        return msg + (f": did you mean '{hint}'?" if hint else "")
    if etype == "missing":
        return f"[{section}] needs '{key}' (field '{key}')"
    text = str(err["msg"])
    if etype.startswith("value_error") and text.startswith("Value error, "):
        text = text[len("Value error, "):]
    if "(field '" in text:
        return f"[{section}] {text}"
    return f"[{section}] {key}: {text[:1].lower()}{text[1:]} (field '{key}')"


def input_error(exc: ValidationError, section: str,
                models: Mapping[str, type[BaseModel]] | None = None,
                model: type[BaseModel] | None = None) -> InputError:
    """:func:`validation_message` as an :class:`InputError` (shown without a traceback)."""
    return InputError(validation_message(exc, section, models=models, model=model))


def form_fields(options_model: type[ScreenerOptions]) -> list[str]:
    """The fields the Run page's form shows for a kind: every field of its model except
    ``kind`` and the config-only ones (in the model's order)."""
    out = []
    for name, f in options_model.model_fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if name != "kind" and extra.get("form", True):
            out.append(name)
    return out
