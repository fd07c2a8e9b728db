"""``python -m core run --config audit.toml [--db DB]`` — the replication run, headless.

Wiring: ``add_run_parser(subparsers)`` registers the ``run`` subcommand (``func=run_run``);
``run_run(args)`` returns the exit code. Also runnable alone: ``python -m core.run_cli …``.

What it does, in order: read and validate the config; save the audit (freeze sheet, hash,
settings), its criteria and candidates; refuse without side-effect clearance; print the
freeze-sheet warnings and the estimate; run (pre-flight first) with a progress bar and ETA on
stderr (a live ``rich`` bar on a terminal; a plain line every 5 s otherwise, for logs and CI);
print the guards (cache verdict, model populations). Ctrl-C stops cleanly (in-flight calls
recorded as cancelled); running the same command again resumes, filling only the missing
``(candidate, run)`` pairs. Exit codes: 0 done, 1 stopped on a finding, by the circuit breaker
or with pairs missing, 2 bad input or a guard, 130 interrupted.

Before the first call it says where the calls (and the API key) go. A ``command`` or ``python``
screener runs code on this machine: it needs ``--allow-code``, and what it will run is printed
first.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

from core.config import AuditConfig, load_config, save_audit
from core.errors import AuditError
from core.estimate import audit_estimate
from core.format import term_escape, term_lines
from core.guards import cache_verdict_of, model_populations_of
from core.invalid import describe as invalid_lines
from core.invalid import invalid_answers
from core.run.handle import RunHandle
from core.run.status import RunStatus
from core.screeners.base import scrub
from core.screeners.registry import CODE_KINDS, describe_code
from core.store import DEFAULT_DB, Store

__all__ = ["LiveBar", "add_run_parser", "format_duration", "progress_line", "run_run"]


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``run`` subcommand to an ``argparse`` subparsers object and return it."""
    p = subparsers.add_parser(
        "run", help="run the replications of an audit from a TOML config (resumable)",
        description="Drive N independent replications per candidate against the screener in "
                    "the config, store every call, and resume where a previous run stopped.")
    _add_arguments(p)
    p.set_defaults(func=run_run)
    return p


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the audit config (audit.toml)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--estimate", action="store_true",
                   help="save the audit and print the estimate; make no call")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--runs", type=int, help="override [run] runs")
    p.add_argument("--concurrency", type=int, help="override [run] concurrency")
    p.add_argument("--allow-code", action="store_true",
                   help="allow a 'command' or 'python' screener to run code on this machine "
                        "(what it runs is printed first)")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(round(max(0.0, seconds)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_line(st: RunStatus, width: int = 30) -> str:
    """``[#########.....] 120/600  20%  errors 2  retries 5  ETA 01:23``."""
    filled = int(round(width * st.fraction))
    bar = "#" * filled + "." * (width - filled)
    phase = "pre-flight " if st.state == "preflight" else ""
    return (f"{phase}[{bar}] {st.done}/{st.total} {100 * st.fraction:3.0f}%  "
            f"errors {st.errors}  retries {st.retries}  ETA {format_duration(st.eta_s)}")


class LiveBar:
    """The progress of a run as a live ``rich`` bar on a terminal: pairs done of all, errors,
    retries and the engine's ETA (:attr:`RunStatus.eta_s`, the one ETA of the app and the
    terminal). While it shows, lines written to ``sys.stderr`` appear above it."""

    def __init__(self, stream: TextIO) -> None:
        self.console = Console(file=stream, highlight=False, markup=False)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total}"), TaskProgressColumn(),
            TextColumn("{task.fields[counts]}"), console=self.console,
            redirect_stdout=False, redirect_stderr=True, refresh_per_second=5)
        self.task = self.progress.add_task("run", total=None, counts="")

    def __enter__(self) -> LiveBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, st: RunStatus) -> None:
        phase = "pre-flight" if st.state == "preflight" else "run"
        self.progress.update(self.task, description=phase, completed=st.done,
                             total=st.total or None,
                             counts=(f"errors {st.errors}  retries {st.retries}  "
                                     f"ETA {format_duration(st.eta_s)}"))


def _print_estimate(cfg: AuditConfig, screener: Any, store: Store, out: TextIO,
                    latency: float | None = None) -> None:
    # the app's estimate of the same audit: one function, the stored settings
    settings = dict(store.get_audit(cfg.audit_id)["settings"])
    settings.update({"runs": cfg.options.runs, "concurrency": cfg.options.concurrency})
    if latency is not None:
        settings["preflight_latency_s"] = latency
    est = audit_estimate(settings, frozen_model=cfg.sheet.model, criteria=cfg.criteria,
                         candidates=store.get_candidates(cfg.audit_id), runs=cfg.options.runs,
                         completed=store.completed_pairs(cfg.audit_id),
                         concurrency=cfg.options.concurrency)
    for line in est.lines(cfg.options.max_calls_per_pair):
        print(term_lines(line), file=out)


def destination_line(screener: Any) -> str:
    """Where the calls go, and which host receives the API key (said before the first call)."""
    dest = screener.key_destination() if hasattr(screener, "key_destination") else None
    url = getattr(screener, "url", None)
    if dest is not None:
        env, host = dest
        return f"calls go to {url}; the API key in ${env} is sent to {host} only"
    if url:
        return f"calls go to {url}; no API key is sent"
    return f"calls stay on this machine ({getattr(screener, 'kind', 'screener')})"


def run_run(args: argparse.Namespace) -> int:
    """Run (or resume) the audit in ``args.config``; see the module notes for exit codes."""
    err = sys.stderr
    try:
        cfg = load_config(args.config)
        # a given 0 is checked like any other value (it was taken as "not given")
        runs, concurrency = getattr(args, "runs", None), getattr(args, "concurrency", None)
        if runs is not None or concurrency is not None:
            from dataclasses import replace
            cfg = replace(cfg, options=replace(
                cfg.options, runs=cfg.options.runs if runs is None else runs,
                concurrency=cfg.options.concurrency if concurrency is None else concurrency))
        sample = cfg.load_sample()
        allow = bool(getattr(args, "allow_code", False))
        if cfg.screener_kind in CODE_KINDS and allow:
            print("will run on this machine: "
                  + term_escape(describe_code(cfg.screener_kind, cfg.screener_options)),
                  file=err)
        screener = cfg.build_screener(allow_code=allow)
        store = Store(args.db)
    except AuditError as exc:
        print(term_lines(f"error: {scrub(exc)}"), file=err)
        return 2
    try:
        save_audit(store, cfg, sample)
        print(f"audit {term_escape(cfg.audit_id)}: harness {cfg.sheet.hash[:12]} "
              f"({cfg.sheet.harness_label()})", file=err)
        for w in cfg.sheet.warnings():
            print(term_lines(f"  warning: {w}"), file=err)
        blockers = cfg.sheet.blockers()
        if blockers:
            print("error: no call was made: " + "; ".join(blockers), file=err)
            return 2
        _print_estimate(cfg, screener, store, err)
        print(term_escape(destination_line(screener)), file=err)
        if getattr(args, "estimate", False):
            return 0
        return _drive(cfg, screener, store, show=not getattr(args, "no_progress", False))
    except AuditError as exc:
        print(term_lines(f"error: {scrub(exc)}"), file=err)
        return 2
    finally:
        store.close()


def _drive(cfg: AuditConfig, screener: Any, store: Store, show: bool) -> int:
    err = sys.stderr
    tty = show and err.isatty()
    handle = RunHandle(store, cfg.audit_id, screener, cfg.options, prices=cfg.prices).start()
    interrupted = False
    last_line = 0.0
    refined = False
    bar = LiveBar(err) if tty else None
    try:
        with bar if bar is not None else nullcontext():
            while not handle.join(0.2):
                st = handle.status()
                now = time.monotonic()
                if not refined and st.state == "running" \
                        and st.preflight_latency_s is not None:
                    refined = True
                    # sys.stderr, looked up now: above the live bar while it shows
                    print(f"pre-flight: median latency {st.preflight_latency_s:.2f} s",
                          file=sys.stderr)
                    _print_estimate(cfg, screener, store, sys.stderr,
                                    latency=st.preflight_latency_s)
                if bar is not None:
                    bar.update(st)
                elif show and now - last_line >= 5.0:
                    print(progress_line(st), file=err, flush=True)
                    last_line = now
            if bar is not None:
                bar.update(handle.status())
    except KeyboardInterrupt:
        interrupted = True
        print("\nstopping: cancelling in-flight calls and writing what is done…", file=err)
        handle.stop()
        while True:
            try:
                handle.join()
                break
            except KeyboardInterrupt:
                print("still stopping (the store stays consistent); wait…", file=err)
    st = handle.status()
    if show and not tty:
        print(progress_line(st), file=err)
    if handle.error is not None and not isinstance(handle.error, AuditError):
        print(f"error: {scrub(type(handle.error).__name__)}: {scrub(handle.error)}", file=err)
        return 2
    if handle.error is not None:
        print(f"error: {scrub(handle.error)}", file=err)
        return 2
    print(term_escape(f"{st.state}: {st.message} ({st.calls} calls this session, "
                      f"{st.errors} failed, {st.retries} retries, {st.cancelled} cancelled)"),
          file=err)
    for f in st.findings:
        print(f"  finding: {term_escape(f)}", file=err)
    inv = invalid_answers(store.load_calls(cfg.audit_id), store.load_draws(cfg.audit_id),
                          cfg.options.on_invalid)
    for line in invalid_lines(inv.to_dict()):
        print(term_escape(line), file=err)
    verdict = cache_verdict_of(store, cfg.audit_id)
    print(term_lines(f"cache guard: {verdict.message}"), file=err)
    pops = model_populations_of(store, cfg.audit_id, cfg.sheet.model)
    print(term_lines(f"model guard: {pops.message}"), file=err)
    if st.state == "finished" and st.done == st.total:
        print(f"report: python -m core report --db {store.path} --audit {cfg.audit_id} "
              "--format text", file=err)
    if interrupted:
        print("stopped; run the same command again to resume", file=err)
        return 130
    return 0 if st.state == "finished" and st.done == st.total else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.run_cli",
                                     description="Run (or resume) an audit from a TOML config.")
    _add_arguments(parser)
    return run_run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
