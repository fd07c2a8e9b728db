"""Structured answers: the rubric as a strict JSON schema, in the shape each server accepts.

A small open model asked only for "a JSON object" writes keys of its own invention; given the
rubric as a schema (one required number per criterion, ``0..max``, nothing else) a
grammar-constrained server can only emit the right shape. :func:`rubric_schema` builds that
schema from ``[[criteria]]``; :func:`openai_response_fields` puts it in the request the way a
server family expects (the ``schema_style`` setting — never a guess):

``openai``
    ``response_format = {"type": "json_schema", "json_schema": {"name", "strict", "schema"}}``
    — OpenAI, vLLM, llama.cpp's ``llama-server`` and Ollama's ``/v1`` (0.5+).
``json-object-schema``
    ``response_format = {"type": "json_object", "schema": …}`` — llama-cpp-python's server
    (llama-server accepts it too).
``ollama``
    ``format = <schema>`` — Ollama's native field (its ``/v1`` endpoint takes the ``openai``
    shape; llama.cpp's server ignores ``format`` silently).

Measured on llama.cpp's server (docs/REAL_MODEL.md on the ``model`` branch): both the ``openai``
and the ``json-object-schema`` shapes become a grammar; ``integer`` bounds are enforced by it,
``number`` bounds are not — so the range check after parsing stays (an out-of-range answer is
an invalid answer of its own kind).

With ``response_format = "json_object"`` only ``{"type": "json_object"}`` is sent (the model
chooses the keys); with ``"none"`` nothing. Anthropic gets the same schema as the
``input_schema`` of a forced tool (:mod:`core.screeners.anthropic`).
"""

from __future__ import annotations

from typing import Any

from core.errors import InputError
from core.freeze import Criterion

__all__ = ["RESPONSE_FORMATS", "SCHEMA_NAME", "SCHEMA_STYLES", "default_response_format",
           "openai_response_fields", "rubric_schema"]

RESPONSE_FORMATS = ("json_schema", "json_object", "none")
SCHEMA_STYLES = ("openai", "json-object-schema", "ollama")
SCHEMA_NAME = "rubric_scores"


def default_response_format(criteria: tuple[Criterion, ...]) -> str:
    """``json_schema`` when every criterion has its maximum (the schema needs it), else
    ``json_object``."""
    if criteria and all(c.max_points is not None for c in criteria):
        return "json_schema"
    return "json_object"


def rubric_schema(criteria: tuple[Criterion, ...], *, total: bool = False) -> dict[str, Any]:
    """The strict schema of one answer.

    One required property per criterion: ``integer`` when its max points are a whole number,
    else ``number``; ``minimum`` 0 and ``maximum`` its max points; ``additionalProperties``
    false. With ``total`` a required ``total`` number (the screener's own total) is added.

    Raises
    ------
    InputError
        When a criterion has no max points (the schema could not bound it).
    """
    if not criteria:
        raise InputError("response_format = \"json_schema\" needs [[criteria]] with max points")
    props: dict[str, Any] = {}
    for c in criteria:
        if c.max_points is None:
            raise InputError(f"response_format = \"json_schema\" needs the max points of every "
                             f"criterion; '{c.name}' has none (set max in [[criteria]] or use "
                             "response_format = \"json_object\")")
        mx = float(c.max_points)
        whole = mx.is_integer()
        props[c.name] = {"type": "integer" if whole else "number", "minimum": 0,
                         "maximum": int(mx) if whole else mx}
    required = [c.name for c in criteria]
    if total:
        props["total"] = {"type": "number"}
        required.append("total")
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def openai_response_fields(response_format: str, schema_style: str,
                           schema: dict[str, Any] | None) -> dict[str, Any]:
    """The body fields an OpenAI-compatible server needs for ``response_format``."""
    if response_format == "none":
        return {}
    if response_format == "json_object":
        return {"response_format": {"type": "json_object"}}
    if response_format != "json_schema" or schema is None:
        raise InputError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}")
    if schema_style == "openai":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": SCHEMA_NAME, "strict": True,
                                                    "schema": schema}}}
    if schema_style == "json-object-schema":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if schema_style == "ollama":
        return {"format": schema}
    raise InputError(f"schema_style must be one of {', '.join(SCHEMA_STYLES)}; got "
                     f"'{schema_style}' (field 'schema_style')")
