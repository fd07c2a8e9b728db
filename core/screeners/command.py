"""The ``command`` adapter: run a program once per draw and read its JSON answer from stdout.

The application goes to the program's stdin (``input = "stdin"``) or into a temporary file whose
path replaces ``{application_path}`` in the arguments (``input = "file"``; appended when no
argument names it). The environment carries ``SCREENER_REQUEST_ID``, ``SCREENER_CANDIDATE_ID``,
``SCREENER_RUN`` and ``SCREENER_SEED``. A program that outlives ``timeout_s`` is killed and the
call retried (a timeout); a non-zero exit is an error of that call.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import BuildContext, CallFailed, RawResult, Screener, ScreenRequest
from core.screeners.options import ScreenerOptions, config_only
from core.screeners.parsing import ParseSpec

__all__ = ["CommandOptions", "CommandScreener"]


class CommandOptions(ScreenerOptions):
    """``[screener]`` with ``kind = "command"`` (runs a program: operator opt-in only)."""

    kind: Literal["command"] = "command"
    command: str | list[str] = Field(
        "", title="Command",
        description="Run once per draw (no shell); the application arrives on stdin or as a "
                    "file; the answer is JSON on stdout.",
        json_schema_extra={"placeholder": "python my_screener.py --rubric r7.json",
                           "columns": 1, "order": -1})
    input: Literal["stdin", "file"] = Field(
        "stdin", title="The application goes",
        description="On the program's stdin, or in a temporary file whose path replaces "
                    "{application_path} in the arguments.", json_schema_extra={"columns": 1})
    timeout_s: float = Field(
        120.0, gt=0, le=86_400, title="Timeout per call (s)",
        description="A program that runs longer is killed and the call retried.",
        json_schema_extra={"columns": 1, "step": 10})
    cwd: str | None = config_only(
        description="The folder the program runs in (relative to the config).")

    def argv(self) -> list[str]:
        """The program and its arguments (a string is split as a shell would, never run by
        one)."""
        cmd = self.command
        return shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]


class CommandScreener(Screener):
    """``argv`` run per draw (no shell)."""

    kind = "command"
    title = "A command-line program"
    order = 40
    Options = CommandOptions
    uses_http = False
    runs_code = True

    def __init__(self, *, argv: Sequence[str], model: str, criteria: tuple[Criterion, ...] = (),
                 parse: ParseSpec | None = None, input_mode: str = "stdin",
                 timeout_s: float = 120.0, cwd: str | None = None) -> None:
        super().__init__(model=model, criteria=criteria, parse=parse)
        if not argv:
            raise InputError("the command screener needs a program (field 'command')")
        if input_mode not in ("stdin", "file"):
            raise InputError("input must be 'stdin' or 'file' (field 'input')")
        self.argv = [str(a) for a in argv]
        self.input_mode = input_mode
        self.timeout_s = float(timeout_s)
        self.cwd = cwd

    @classmethod
    def from_options(cls, options: CommandOptions, context: BuildContext) -> CommandScreener:
        base = Path(context.base_dir)
        return cls(argv=options.argv(), model=options.model_id(context),
                   criteria=context.criteria, parse=options.parse_spec(),
                   input_mode=options.input, timeout_s=options.timeout_s,
                   cwd=str((base / options.cwd).resolve()) if options.cwd
                   else str(base.resolve()))

    @classmethod
    def endpoint(cls, options: CommandOptions) -> str:
        return f"command: {options.command}"

    @classmethod
    def describe_code(cls, options: CommandOptions) -> str:
        return ("the program " + shlex.join(options.argv()) + " (once per draw, the "
                "application on " + ("stdin)" if options.input == "stdin" else "a file)"))

    async def call(self, client: Any, request: ScreenRequest) -> RawResult:
        env = {**os.environ, "SCREENER_REQUEST_ID": request.request_id,
               "SCREENER_CANDIDATE_ID": request.candidate_id,
               "SCREENER_RUN": str(request.run), "SCREENER_SEED": str(request.seed)}
        path = None
        argv = list(self.argv)
        stdin_data: bytes | None = request.application.encode("utf-8")
        if self.input_mode == "file":
            fd, path = tempfile.mkstemp(prefix="application-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(request.application)
            if any("{application_path}" in a for a in argv):
                argv = [a.replace("{application_path}", path) for a in argv]
            else:
                argv.append(path)
            stdin_data = None
        try:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, env=env, cwd=self.cwd)
            except OSError as exc:
                raise CallFailed(f"cannot start {argv[0]!r}: {exc.strerror or exc}",
                                 finding=True) from None
            try:
                out, err = await asyncio.wait_for(proc.communicate(stdin_data), self.timeout_s)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise CallFailed(f"timeout: the program ran over {self.timeout_s:g} s",
                                 retryable=True) from None
            except asyncio.CancelledError:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                raise
        finally:
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if len(out) > self.call_limits.max_response_bytes:
            raise CallFailed(f"the program wrote {len(out):,} bytes, over max_response_bytes = "
                             f"{self.call_limits.max_response_bytes:,}")
        text = out.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            tail = err.decode("utf-8", errors="replace").strip()[-300:]
            raise CallFailed(f"the program exited with status {proc.returncode}: {tail}",
                             payload=text)
        return RawResult(payload=text, model=self.model)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "command": self.argv, "input": self.input_mode,
                "timeout_s": self.timeout_s}
