"""Screener adapters: one module per kind, one small interface (:mod:`core.screeners.base`).

``simulated`` (in-process, the demo's default), ``http_json`` (your own endpoint),
``openai_chat`` (any OpenAI-compatible server), ``anthropic`` (Messages API), ``command``
(a program per draw) and ``python_fn`` (a ``module:function``). The kinds are listed by
:data:`core.screeners.registry.SCREENERS`; build one from a config's options with
:func:`core.screeners.registry.build_screener`.

Adding a kind is one new module here:

1. ``class MyOptions(ScreenerOptions)`` (:mod:`core.screeners.options`; ``HttpOptions`` for a
   kind that sends a key) with ``kind: Literal["my-kind"] = "my-kind"`` and one field per
   ``[screener]`` key — its type, bounds, default and ``description`` (the form's help);
2. ``class MyScreener(Screener)`` with ``kind``, ``title`` (the Run page's label),
   ``Options = MyOptions``, ``from_options(options, context)`` and ``call(client, request)``;
   a kind that runs code on this machine sets ``runs_code = True`` (operator opt-in only), an
   HTTP kind sets ``uses_http = True`` and may refine its retry rule (``retry_statuses``,
   ``retryable_http``).

The registry imports every module of this package, the config accepts ``kind = "my-kind"``
with exactly those keys, and the Run page draws its form from ``MyOptions``.

Module map: ``base`` (the interface, call records, scrubbing of secrets), ``options`` (the
options models and their one-line errors), ``registry`` (kind → class, building), ``http``
(the bounded POST), ``safety`` (files inside their folder, key variables, safe URLs),
``prompts`` (templates and the ``{application}`` rule), ``parsing`` and ``schema`` (answers
into scores), ``simulation`` (the simulated screener's world, also the demo's).
"""
