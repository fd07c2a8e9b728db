"""The ``python`` adapter: a ``module:function`` callable, sync or async.

The function receives the application text and, as keyword arguments when it accepts them,
``candidate_id``, ``run``, ``request_id`` and ``seed``. It returns a dict (the answer) or a
string of JSON. A synchronous function runs in a worker thread so it does not stall the others.
An exception it raises is an error of that call (not retried).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import BuildContext, CallFailed, RawResult, Screener, ScreenRequest
from core.screeners.options import ScreenerOptions
from core.screeners.parsing import ParseSpec

__all__ = ["PythonOptions", "PythonScreener", "load_callable"]


class PythonOptions(ScreenerOptions):
    """``[screener]`` with ``kind = "python"`` (imports code: operator opt-in only)."""

    kind: Literal["python"] = "python"
    function: str = Field(
        "", title="Function",
        description="module:function, imported into this process; it receives the "
                    "application text and returns the answer (a dict or JSON text).",
        json_schema_extra={"placeholder": "my_package.screen:score", "columns": 1,
                           "order": -1})


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``"package.module:function"``."""
    if ":" not in spec:
        raise InputError(f"function must be written module:function; got '{spec}' "
                         "(field 'function')")
    mod_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot load '{spec}': {exc} (field 'function')") from None
    if not callable(obj):
        raise InputError(f"'{spec}' is not callable (field 'function')")
    return obj


class PythonScreener(Screener):
    """A ``module:function`` called once per draw."""

    kind = "python"
    title = "A Python function"
    order = 50
    Options = PythonOptions
    uses_http = False
    runs_code = True

    def __init__(self, *, function: str | Callable[..., Any], model: str,
                 criteria: tuple[Criterion, ...] = (), parse: ParseSpec | None = None) -> None:
        super().__init__(model=model, criteria=criteria, parse=parse)
        self.function_name = function if isinstance(function, str) else \
            f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', '?')}"
        self.fn = load_callable(function) if isinstance(function, str) else function
        try:
            params = inspect.signature(self.fn).parameters
            self._var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
            self._accepts = set(params)
        except (TypeError, ValueError):
            self._var_kw, self._accepts = True, set()

    @classmethod
    def from_options(cls, options: PythonOptions, context: BuildContext) -> PythonScreener:
        model = options.model_id(context)
        if not options.function:
            raise InputError("the python screener needs function = \"module:function\"")
        return cls(function=options.function, model=model, criteria=context.criteria,
                   parse=options.parse_spec())

    @classmethod
    def endpoint(cls, options: PythonOptions) -> str:
        return f"python: {options.function}"

    @classmethod
    def describe_code(cls, options: PythonOptions) -> str:
        return f"the Python function {options.function} (imported into this process)"

    async def call(self, client: Any, request: ScreenRequest) -> RawResult:
        extra = {"candidate_id": request.candidate_id, "run": request.run,
                 "request_id": request.request_id, "seed": request.seed}
        kwargs = extra if self._var_kw else {k: v for k, v in extra.items()
                                             if k in self._accepts}
        try:
            if inspect.iscoroutinefunction(self.fn):
                out = await self.fn(request.application, **kwargs)
            else:
                out = await asyncio.to_thread(self.fn, request.application, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user function: any failure is that call's error
            raise CallFailed(f"{self.function_name} raised {type(exc).__name__}: {exc}") \
                from None
        payload = out if isinstance(out, str) else json.dumps(out, default=str)
        return RawResult(payload=payload, model=self.model)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "function": self.function_name}
