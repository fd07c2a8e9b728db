"""Screener adapters: one module per kind, one small interface (:mod:`core.screeners.base`).

``simulated`` (in-process, the demo's default), ``http_json`` (your own endpoint),
``openai_chat`` (any OpenAI-compatible server), ``anthropic`` (Messages API), ``command``
(a program per draw) and ``python_fn`` (a ``module:function``). The kinds are listed by
:data:`core.screeners.registry.SCREENERS`; build one from a config's options with
:func:`core.screeners.registry.build_screener`.
"""
