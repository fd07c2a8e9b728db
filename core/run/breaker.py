"""The circuit breaker: stop a run whose screener is failing systematically, and say why.

It trips when ``breaker_fail_share`` or more of the first ``breaker_first_calls`` finished
calls failed, or ``breaker_consecutive`` calls in a row failed; its one paragraph names the
dominant failure kind, shows one raw answer of that kind and the setting most likely to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.format import excerpt
from core.invalid import KIND_NAMES
from core.run.options import RunOptions
from core.screeners.base import CallFailed

__all__ = ["Breaker", "breaker_paragraph", "error_kind"]

#: The setting most likely to fix a systematic failure of each kind.
_FIXES = {
    "parse_error": ("response_format = \"json_schema\" in [screener] (the server then enforces "
                    "the rubric's keys), or the prompt / parse preset (parse, payload_path) so "
                    "the answer's keys are the criterion names"),
    "out_of_range": ("the criterion maxima in [[criteria]] and the rubric the prompt shows, or "
                     "[run] on_invalid = \"clip\""),
    "truncated": ("[screener] max_tokens (raise it), or a prompt that asks for the scores "
                  "only"),
    "refused": "the prompt (the model refuses to score it)",
}
_FIX_ERROR = ("[run] timeout_s, concurrency or rpm, or the server itself (base_url / url): "
              "the calls got no answer")


def error_kind(failure: CallFailed) -> str:
    """A call that got no usable answer, by kind: ``HTTP 503``, ``timeout or connection``, or
    ``error`` (an adapter failure)."""
    if failure.status and failure.status >= 400:
        return f"HTTP {failure.status}"
    if failure.retryable:
        return "timeout or connection"
    return "error"


def breaker_paragraph(why: str, failures: Mapping[str, int],
                      examples: Mapping[str, str]) -> str:
    """The circuit breaker's one paragraph: why it stopped, the dominant error kind, one raw
    answer of that kind (shortened, escaped) and the setting most likely to fix it."""
    if failures:
        kind, n = max(failures.items(), key=lambda kv: (kv[1], kv[0]))
    else:
        kind, n = "error", 0
    total = sum(failures.values())
    label = KIND_NAMES.get(kind, kind)
    fix = _FIXES.get(kind, _FIX_ERROR)
    if kind.startswith("HTTP 4"):
        fix = ("what the harness sends, as the server's message says (the model id, sampling "
               "parameters, response_format / schema_style, max_tokens, or api_key_env)")
    sample = excerpt(examples.get(kind, ""), 160) or "(empty)"
    return (f"Stopped by the circuit breaker: {why}, so the screener is failing "
            f"systematically and further calls would be spent for nothing. Most failures are "
            f"{label} ({n} of {total}). One raw answer: {sample} The setting most likely to "
            f"fix it: {fix}. What was stored is kept; after the change, run again (a changed "
            "harness needs a new audit).")



class Breaker:
    """Fed one finished call at a time (under the engine's lock); says when to stop, once.

    Parameters
    ----------
    options : RunOptions
        ``breaker``, ``breaker_first_calls``, ``breaker_fail_share``, ``breaker_consecutive``.
    pairs_left : int
        Pairs the run still has to fill: a run with fewer than ``breaker_first_calls`` is
        judged on its first call of each pair (at least 5), not never.
    """

    def __init__(self, options: RunOptions, pairs_left: int | None = None) -> None:
        self.options = options
        self.window = int(options.breaker_first_calls)
        if pairs_left is not None:
            self.window = min(self.window, max(5, int(pairs_left)))
        self.outcomes: list[bool] = []      # True = failed, per finished call, in order
        self.streak = 0
        self.message: str | None = None

    def feed(self, failed: bool, failures: Mapping[str, int],
             examples: Mapping[str, str]) -> str | None:
        """One finished call; the breaker's paragraph when it trips (once), else None."""
        opts = self.options
        if not opts.breaker or self.message is not None:
            return None
        self.outcomes.append(failed)
        self.streak = self.streak + 1 if failed else 0
        why = None
        if len(self.outcomes) == self.window and \
                sum(first := self.outcomes[:self.window]) >= \
                opts.breaker_fail_share * len(first):
            why = (f"{sum(first)} of the first {len(first)} calls failed "
                   f"(breaker_fail_share = {opts.breaker_fail_share:g})")
        elif self.streak >= opts.breaker_consecutive:
            why = (f"{self.streak} calls in a row failed "
                   f"(breaker_consecutive = {opts.breaker_consecutive})")
        if why is None:
            return None
        self.message = breaker_paragraph(why, dict(failures), examples)
        return self.message
