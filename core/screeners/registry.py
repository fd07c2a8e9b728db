"""The screener kinds: a mapping from ``kind`` to adapter class, and building one from options.

Every module of :mod:`core.screeners` is imported once here; each :class:`Screener` subclass
that names a ``kind`` is then in :data:`SCREENERS` — adding a kind is one new file (a class with
``kind``, ``title``, ``Options`` and ``from_options``), and a class defined anywhere else (a test,
a plug-in imported before use) registers the same way.

Code-running kinds (``runs_code``: ``command``, ``python``) run programs on this machine: they
are built only with ``allow_code=True``, which the app passes when the operator set
``AUDIT_ALLOW_CODE_SCREENERS=1`` and the command line when the user gave ``--allow-code``. A
config, a visitor of the app or a database file received from someone else cannot turn them on.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter, ValidationError

import core.screeners as _package
from core.errors import InputError
from core.freeze import Criterion, FreezeSheet
from core.screeners.base import BuildContext, Screener
from core.screeners.options import ScreenerOptions, input_error, nearest

__all__ = ["CODE_KINDS", "CODE_SCREENERS_VAR", "SCREENERS", "answer_fields", "build_screener",
           "code_screeners_enabled", "describe_code", "options_union", "screener_class",
           "validate_options"]

#: The operator's switch for code-running screeners in the app (off unless set to 1).
CODE_SCREENERS_VAR = "AUDIT_ALLOW_CODE_SCREENERS"


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


class _Kinds(Mapping[str, type[Screener]]):
    """``kind`` → adapter class, in the order the Run page lists them (``order``, then kind).

    Live: a subclass of :class:`Screener` defined after this module was imported is in it too.
    """

    def _table(self) -> dict[str, type[Screener]]:
        found = {c.kind: c for c in _subclasses(Screener)
                 if c.__dict__.get("kind") and c.__dict__.get("Options") is not None}
        return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))

    def __getitem__(self, kind: str) -> type[Screener]:
        return self._table()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"SCREENERS({', '.join(self)})"


for _mod in pkgutil.iter_modules(_package.__path__):
    importlib.import_module(f"{_package.__name__}.{_mod.name}")

#: Every screener kind: ``kind`` → adapter class.
SCREENERS: Mapping[str, type[Screener]] = _Kinds()
#: Kinds that run code on this machine (operator opt-in only).
CODE_KINDS = frozenset(k for k, c in SCREENERS.items() if c.runs_code)


def code_screeners_enabled() -> bool:
    """True when the operator enabled code-running screeners (``AUDIT_ALLOW_CODE_SCREENERS=1``)."""
    return os.environ.get(CODE_SCREENERS_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def screener_class(kind: str) -> type[Screener]:
    """The adapter class of ``kind``; :class:`InputError` naming the nearest kind otherwise."""
    try:
        return SCREENERS[kind]
    except KeyError:
        hint = nearest(str(kind), SCREENERS)
        raise InputError(f"screener kind must be one of {', '.join(SCREENERS)}; got '{kind}' "
                         "(field 'kind')" + (f": did you mean '{hint}'?" if hint else "")
                         ) from None


def options_union() -> TypeAdapter[Any]:
    """A validator of a whole ``[screener]`` table: the options models of every kind, as a
    union discriminated by ``kind``."""
    models = tuple(c.Options for c in SCREENERS.values())
    return TypeAdapter(Annotated[Union[models], Field(discriminator="kind")])  # noqa: UP007


def validate_options(kind: str, options: Mapping[str, Any],
                     section: str = "screener") -> ScreenerOptions:
    """``options`` checked against the ``Options`` model of ``kind`` (one-line
    :class:`InputError` naming the section and the key, with the nearest valid key)."""
    cls = screener_class(kind)
    try:
        return cls.Options.model_validate({**options, "kind": kind})
    except ValidationError as exc:
        raise input_error(exc, section, model=cls.Options) from None


def describe_code(kind: str, options: Mapping[str, Any]) -> str:
    """What a code-running screener would run, in one line (printed before it runs)."""
    try:
        return screener_class(kind).describe_code(validate_options(kind, options))
    except InputError:
        return f"a {kind} screener"


def answer_fields(kind: str, options: Mapping[str, Any], criteria: tuple[Criterion, ...],
                  on_invalid: str) -> dict[str, Any]:
    """The freeze-sheet fields that say what the screener is asked to answer and what an
    invalid answer leads to (``response_format``, ``schema_style``, ``answer_schema``,
    ``max_tokens``, ``on_invalid``), computed from the options without building the adapter
    (no key needed). They change what is measured, so they are hashed with the sheet."""
    cls = screener_class(kind)
    return {"on_invalid": on_invalid,
            **cls.answer_fields(validate_options(kind, options), tuple(criteria))}


def build_screener(kind: str, options: Mapping[str, Any], *, criteria: tuple[Criterion, ...],
                   sheet: FreezeSheet | None = None, seed: int = 0,
                   secrets: Mapping[str, Any] | None = None,
                   base_dir: str | Path = ".", allow_code: bool = False) -> Screener:
    """The adapter for ``kind`` with ``options``; the API key comes from ``api_key_env``.

    ``secrets`` (Streamlit secrets) is looked up before the environment. Keys never come from
    ``options`` themselves. A code-running kind needs ``allow_code`` (nothing of it is
    imported or run without it). URLs must not carry credentials and use https unless they
    point at this machine (:func:`~core.screeners.safety.check_base_url`).
    """
    cls = screener_class(kind)
    if cls.runs_code and not allow_code:
        raise InputError(f"the '{kind}' screener runs code on this machine "
                         f"({describe_code(kind, options)}) and is off unless the operator "
                         f"enables it: {CODE_SCREENERS_VAR}=1 for the app, --allow-code for the "
                         "command line (field 'kind')")
    validated = validate_options(kind, options)
    context = BuildContext(criteria=tuple(criteria), sheet=sheet, seed=int(seed),
                           secrets=secrets, base_dir=Path(base_dir))
    return cls.from_options(validated, context)
