"""``python -m core drift PANEL …`` — the drift analysis, headless (text, Markdown or JSON).

Wiring: ``add_drift_parser(subparsers)`` registers the ``drift`` subcommand (and sets
``func=run_drift``); ``run_drift(args)`` returns the exit code: 0 ok, 2 bad input (one line on
stderr naming the file, row and column).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.drift.analysis import analyse_drift
from core.drift.panel import read_panel
from core.drift.result import drift_result_json, format_drift_markdown, format_drift_text
from core.errors import AuditError
from core.format import term_lines
from core.tables import FileFaults

__all__ = ["add_drift_parser", "run_drift", "MAX_REPS"]

#: Wild bootstrap replications the command accepts (as ``compare``'s bootstrap): more only
#: spends minutes for a p-value that no longer moves.
MAX_REPS = 100_000


def add_drift_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``drift`` subcommand to an ``argparse`` subparsers object and return it."""
    p = subparsers.add_parser(
        "drift", help="grader severity, drift q and the re-audit date from a ratings panel",
        description="Separate grader severity from the screener's state, estimate drift "
                    "(q per week) and the date by which the audit should be redone.")
    p.add_argument("panel", help="ratings panel: CSV / Parquet / JSON Lines with columns "
                                 "batch (ISO date), rater, score [, item, category]")
    p.add_argument("--deployments", default="",
                   help="comma-separated deployment dates (the state may jump freely there), "
                        "e.g. 2026-04-12,2026-07-16")
    p.add_argument("--free-steps", default="",
                   help="comma-separated extra dates where the state may also jump")
    p.add_argument("--reference", default=None,
                   help="reference rater (default: the one present in most batches)")
    p.add_argument("--D", dest="D", type=float, default=None,
                   help="change that matters, in score units (default: largest deployment "
                        "contrast, else 0.2 × score SD)")
    p.add_argument("--covariance", choices=["full", "diagonal"], default="full",
                   help="stage 1 sampling covariance carried into stage 2 (default full)")
    p.add_argument("--reps", type=int, default=999, help="wild bootstrap replications (999)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (0 or more)")
    p.add_argument("--db", default=None, help="audit database; with --screener, save the result")
    p.add_argument("--screener", default=None,
                   help="screener name under which the result is saved (needs --db)")
    p.add_argument("--format", choices=["json", "text", "md"], default="text",
                   help="json (the saved result), text (terminal) or md (Markdown)")
    p.set_defaults(func=run_drift)
    return p


def run_drift(args: argparse.Namespace) -> int:
    """Run the drift analysis for parsed ``args``; print JSON, text or Markdown; return the exit
    code."""
    try:
        if (args.db is None) != (args.screener is None):
            raise AuditError("--db and --screener go together: pass both to save the result, "
                             "or neither")
        if not 0 <= args.reps <= MAX_REPS:
            raise AuditError(f"--reps must be from 0 to {MAX_REPS:,}; got {args.reps}")
        if args.seed < 0:
            raise AuditError(f"--seed must be 0 or more; got {args.seed}")
        panel = read_panel(args.panel)
        name = str(args.panel).replace("\\", "/").rsplit("/", 1)[-1]
        analysis = analyse_drift(panel, deployments=args.deployments, reference=args.reference,
                                 D=args.D, free_steps=args.free_steps,
                                 covariance=args.covariance, reps=args.reps, seed=args.seed,
                                 panel_name=name)
        result = drift_result_json(analysis)
        if args.db is not None:
            from core.store import Store

            store = Store(args.db)
            try:
                store.save_drift_result(args.screener, result)
            finally:
                store.close()
    except AuditError as exc:
        lines = exc.lines() if isinstance(exc, FileFaults) else [str(exc)]
        for line in lines:
            print(term_lines(f"error: {line}"), file=sys.stderr)
        if isinstance(exc, FileFaults) and exc.total > 1:
            print(f"error: {exc.total:,} faults in all; nothing was analysed", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(result, indent=2, allow_nan=False))
    elif args.format == "md":
        print(term_lines(format_drift_markdown(result)), end="")
    else:
        print(term_lines(format_drift_text(result)))
    return 0
