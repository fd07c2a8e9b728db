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
import tempfile
from collections.abc import Sequence
from typing import Any

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import CallFailed, RawResult, Screener, ScreenRequest
from core.screeners.parsing import ParseSpec

__all__ = ["CommandScreener"]


class CommandScreener(Screener):
    """``argv`` run per draw (no shell)."""

    kind = "command"
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
