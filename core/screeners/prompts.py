"""Prompt templates of the chat screeners: the defaults, rendering, and the one placeholder rule.

The rule that the application must reach the screener — ``{application}`` in a prompt template
or in an HTTP body template — lives here once (:func:`require_application`); the config, the
adapters and the Run page's form all call it.

No pydantic here: the estimate (Sample page) renders the templates to count their characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.safety import inside_folder

__all__ = ["APPLICATION", "DEFAULT_MAX_TOKENS", "DEFAULT_PROMPT", "DEFAULT_SYSTEM",
           "MAX_TOKENS_CAP", "overhead_chars", "render_template", "require_application",
           "rubric_text", "template_text"]

#: The placeholder the candidate's application replaces.
APPLICATION = "{application}"
#: Output tokens allowed per call unless set: a scores object needs well under 200.
DEFAULT_MAX_TOKENS = 512
#: The largest output limit accepted.
MAX_TOKENS_CAP = 32_768

DEFAULT_SYSTEM = (
    "You are a screening assistant. Score the application against this rubric and answer with "
    "one JSON object only: one key per criterion, exactly as named, with its score within the "
    "criterion's range, and nothing else.\n"
    "Rubric:\n{rubric}")
DEFAULT_PROMPT = "Application:\n{application}"


def require_application(text: str, what: str, field_name: str) -> str:
    """``text`` when it inserts the application; :class:`InputError` otherwise.

    A template without ``{application}`` would send every candidate the same text: every call
    would score nothing, N times over.
    """
    if APPLICATION not in text:
        raise InputError(f"the {what} has no {APPLICATION} placeholder, so every call would "
                         "send the same text without the candidate's application: put "
                         f"{APPLICATION} where the application goes (field '{field_name}')")
    return text


def rubric_text(criteria: tuple[Criterion, ...]) -> str:
    """The rubric as lines for a prompt: ``- technical_skills: 0-30 points (weight 1)``."""
    lines = []
    for c in criteria:
        mx = "?" if c.max_points is None else f"{c.max_points:g}"
        lines.append(f"- {c.name}: 0-{mx} points (weight {c.weight:g})")
    return "\n".join(lines)


def render_template(template: str, values: Mapping[str, Any]) -> str:
    """Replace ``{name}`` for the known names only; every other brace is left as written.

    ``str.format`` would choke on the JSON examples prompts usually contain.
    """
    out = template
    for key, val in values.items():
        out = out.replace("{" + key + "}", str(val))
    return out


def template_text(options: Mapping[str, Any], file_key: str, inline_key: str,
                  base_dir: str | Path, default: str | None) -> str | None:
    """A template from a file named by ``options[file_key]`` (inside ``base_dir``), else the
    inline ``options[inline_key]``, else ``default``."""
    if options.get(file_key):
        path = inside_folder(base_dir, str(options[file_key]), file_key)
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read {file_key} '{path}': {exc.strerror} "
                             f"(field '{file_key}')") from None
    if options.get(inline_key) is not None:
        return str(options[inline_key])
    return default


def overhead_chars(options: Mapping[str, Any], criteria: tuple[Criterion, ...],
                   base_dir: str | Path = ".") -> int:
    """Characters of the system and prompt templates rendered without an application (the
    part of every call's input that is not the application)."""
    prompt = template_text(options, "prompt_template", "prompt", base_dir, DEFAULT_PROMPT) or ""
    system = template_text(options, "system_template", "system", base_dir, DEFAULT_SYSTEM) or ""
    values = {"rubric": rubric_text(tuple(criteria)), "application": "", "candidate_id": "",
              "request_id": "0" * 32}
    return len(render_template(prompt, values)) + len(render_template(system, values))
