"""Jinja2 environments for the reports: one per target, each with its own escaping.

Templates live in ``core/templates/`` (package data). Every environment uses
``StrictUndefined``, so a key missing from a report dict fails loudly instead of printing
nothing. Escaping is the target's, always through :mod:`core.format`:

* ``text`` — a terminal: every ``{{ … }}`` passes through :func:`core.format.term_escape`
  (``finalize``), so an id can neither forge a line nor colour the terminal;
* ``md`` — Markdown: user text through the ``md`` / ``md_cell`` filters;
* ``html`` — every ``{{ … }}`` through :func:`core.format.html_escape` (quotes included), and
  autoescape on behind it; markup built by code (the inlined charts) is passed as
  :class:`markupsafe.Markup`.

Only the report path imports this module (``core.live`` and the slider never do).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from core import format as fmt

if TYPE_CHECKING:
    import jinja2

__all__ = ["render_template", "TARGETS"]

TARGETS = ("text", "md", "html")

_FILTERS = {
    "term": fmt.term_escape,
    "md": fmt.md_escape,
    "md_cell": fmt.md_cell,
    "fixed": fmt.fixed,
    "score": fmt.score,
    "pct": fmt.pct,
    "sd": fmt.sd,
    "ratio": fmt.ratio,
    "count": fmt.count,
    "points_change": fmt.points_change,
}


def _html_finalize(value: Any) -> Any:
    return value if isinstance(value, Markup) else Markup(fmt.html_escape(value))


_FINALIZE = {"text": fmt.term_escape, "md": None, "html": _html_finalize}


@cache
def _environment(target: str) -> jinja2.Environment:
    import jinja2  # here, not at import: the JSON report and the pages never pay for it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("core", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=target == "html",
        finalize=_FINALIZE[target],
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        auto_reload=False,   # templates are package files: never re-stat them per render
    )
    env.filters.update(_FILTERS)
    return env


def render_template(name: str, target: str, **context: Any) -> str:
    """Render ``core/templates/<name>`` for ``target`` (one of :data:`TARGETS`)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}; got {target!r}")
    return _environment(target).get_template(name).render(**context)
