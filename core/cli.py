"""Command line: the same core, headless.

``python -m core import | report | sample | demo | audits | run | drift`` — ``--help`` on each.
Exit 0 on success; exit 2 on bad input with one line on stderr naming file, row and column.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.cli_args import (
    MAX_K,
    audit_name,
    band_k,
    finite_float,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    run_count,
)
from core.errors import AuditError, InputError
from core.format import csv_safe_frame, term_escape, term_lines
from core.store import DEFAULT_DB

if TYPE_CHECKING:  # not at start: `import` of a file never loads pandas
    import pandas as pd

__all__ = ["main", "build_parser", "DEFAULT_DB"]


def _add_analysis_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cutoff", type=finite_float, help="the cutoff that gates the stage today")
    p.add_argument("--comparison", choices=[">=", ">"], help="pass means total >= cutoff "
                   "(default) or > cutoff")
    p.add_argument("--pool", help="pool file (candidate_id, first_pass_score): needed for the "
                   "effective cutoff and the throughput cost")
    p.add_argument("--criteria", help="criteria max points and weights: "
                   "'technical_skills:10,experience:25:2,…' or a CSV with criterion,max,weight")
    p.add_argument("--clip", action="store_true", help="clip scores outside 0..max (counted "
                   "and reported) instead of rejecting the file")
    p.add_argument("--applications-per-req", type=positive_float, dest="applications_per_req",
                   help="applications per req (default: the pool size)")
    p.add_argument("--k", type=band_k, help="band width in within-SDs (default 2, at most "
                   f"{MAX_K:g})")
    p.add_argument("--top", type=positive_int, dest="top_k", help="the recruiter works the top "
                   "K of a ranked list: the effective cutoff is the K-th highest pool score")
    p.add_argument("--of", type=positive_int, dest="of_n", help="…of a list of N")
    p.add_argument("--capacity", type=nonneg_float,
                   help="reviewer capacity in manual reviews per req")
    p.add_argument("--format", choices=["text", "md", "json", "html"], default="text")
    p.add_argument("--out", help="write the report to this file instead of stdout")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given one of this module's own ``command``, the run and
    drift parsers (which import the runner, scipy…) are left out, so ``import`` starts fast."""
    parser = argparse.ArgumentParser(
        prog="python -m core",
        description="Screening score variance audit: how much of an AI screener's score is the "
                    "candidate and how much is the draw.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("import", help="import exported draws (and a pool) into the database",
                       description="Validate a draws file (CSV, Parquet or JSON Lines; long or "
                                   "wide) and store it. Every fault of the file is listed (line "
                                   "as a spreadsheet shows it, column, value) and nothing is "
                                   "written; the same file twice is a no-op. Draws go into a new "
                                   "audit, or into an existing audit whose sample holds their "
                                   "candidates and whose frozen model they report.")
    p.add_argument("file", help="draws file")
    p.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--audit", required=True, type=audit_name,
                   help="audit id to import into (created if new)")
    p.add_argument("--pool", help="pool file (candidate_id, first_pass_score)")
    p.add_argument("--criteria", help="criteria maxima and weights: 'name:max[:weight],…' or a "
                   "criteria CSV (default for an existing audit: its frozen maxima). Without "
                   "maxima an implausible score rejects the file")
    p.add_argument("--clip", action="store_true", help="clip scores outside 0..max (counted "
                   "and reported) instead of rejecting the file")
    p.add_argument("--cutoff", type=finite_float, help="store the audit's cutoff")
    p.add_argument("--applications-per-req", type=positive_float, dest="applications_per_req")
    p.add_argument("--max-file-mb", type=float, dest="max_file_mb",
                   help="refuse files larger than this (default 1024, or AUDIT_MAX_FILE_MB)")
    p.add_argument("--max-rows", type=float, dest="max_rows",
                   help="refuse files with more rows (default 2,000,000, or AUDIT_MAX_ROWS)")
    p.add_argument("--max-line-kb", type=float, dest="max_line_kb",
                   help="refuse lines longer than this (default 1024, or AUDIT_MAX_LINE_KB)")

    p = sub.add_parser("report", help="print the audit report",
                       description="Report from a draws FILE, or from a stored audit with --db "
                                   "and --audit.")
    p.add_argument("file", nargs="?", help="draws file (or use --db and --audit)")
    p.add_argument("--db", help="DuckDB file with the audit")
    p.add_argument("--audit", help="audit id in --db")
    _add_analysis_options(p)

    p = sub.add_parser("sample", help="draw a stratified sample from a pool",
                       description="Band candidates within cutoff ± 1.5·spread and anchors at "
                                   "least 3·spread away on each side, seeded.")
    p.add_argument("pool", help="pool file (candidate_id, first_pass_score)")
    p.add_argument("--cutoff", type=finite_float, help="cutoff (or use --top/--of)")
    p.add_argument("--top", type=positive_int, dest="top_k", help="effective cutoff = K-th "
                   "highest pool score")
    p.add_argument("--spread", type=positive_float, required=True,
                   help="expected within-candidate SD in points (estimate, or a pilot's)")
    p.add_argument("--band", type=nonneg_int, default=None, help="band candidates (default 24)")
    p.add_argument("--high", type=nonneg_int, default=None, help="high anchors (default 8)")
    p.add_argument("--low", type=nonneg_int, default=None, help="low anchors (default 8)")
    p.add_argument("--runs", type=run_count, default=None,
                   help="runs per candidate (default 15)")
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--reduced", action="store_true",
                   help="reduced preset: 24 band, 6 anchors a side, 6 runs = 216 calls")
    p.add_argument("--out", required=True, help="sample CSV to write")
    p.add_argument("--db", help="DuckDB file with the audit whose screener, prices and "
                   "latency the estimate uses (as the Sample page does)")
    p.add_argument("--audit", help="audit id in --db")
    p.add_argument("--latency", type=positive_float, default=None,
                   help="seconds per call for the wall-time estimate (else the audit's "
                        "measured or typed latency, else a stated default)")

    p = sub.add_parser("demo", help="create the demo audit (offline, seeded)")
    p.add_argument("--db", default=DEFAULT_DB)
    p.add_argument("--rebuild", action="store_true", help="recreate it even if present")

    p = sub.add_parser("audits", help="list the audits in a database")
    p.add_argument("--db", default=DEFAULT_DB)

    _add_compare_parser(sub)

    for mod, adder in (() if command in _COMMANDS else (
            ("core.run_cli", "add_run_parser"), ("core.drift.cli", "add_drift_parser"))):
        getattr(importlib.import_module(mod), adder)(sub)
    return parser


def _add_compare_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare", help="did the fix work? compare two audits of the same req",
        description="Audit A (before a change) against audit B (after): within-candidate noise "
                    "per criterion with F intervals, decision noise at one cutoff with a "
                    "bootstrap interval, each audit's band and manual reviews per req.")
    p.add_argument("--db", default=DEFAULT_DB, help=f"DuckDB file (default {DEFAULT_DB})")
    p.add_argument("--audit", action="append", required=True, metavar="ID",
                   help="give it twice: --audit A --audit B")
    p.add_argument("--cutoff", type=finite_float, help="one cutoff for both (default: A's "
                   "audited cutoff)")
    p.add_argument("--k", type=band_k, help="band width in within-SDs (default: A's setting)")
    p.add_argument("--capacity", type=float, help="reviewer capacity in manual reviews per req, "
                   "for both")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap replications (default "
                   "2000)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--format", choices=["text", "md", "json", "html"], default="text")
    p.add_argument("--out", help="write the report to this file instead of stdout")
    p.set_defaults(func=_cmd_compare)
    p.error = _one_line_error  # type: ignore[method-assign]


def _one_line_error(message: str) -> None:
    """A bad option: one line naming it on stderr, exit 2 (no usage block)."""
    print(f"error: {message} (see 'python -m core compare --help')", file=sys.stderr)
    sys.exit(2)


def _cmd_compare(a: argparse.Namespace) -> int:
    from core.audit import analyze
    from core.compare_report import render
    from core.comparison import Comparison
    from core.store import Store

    if len(a.audit) != 2:
        raise AuditError(f"give exactly two audits, --audit A --audit B; got {len(a.audit)}")
    if not Path(a.db).exists():
        raise AuditError(f"the database file {a.db} does not exist; create it with "
                         "'python -m core import' or 'python -m core demo'")
    store = Store(a.db, read_only=True)
    try:
        for audit_id in a.audit:
            if not store.audit_exists(audit_id):
                known = ", ".join(str(x) for x in store.list_audits()["audit_id"]) or "none"
                raise AuditError(f"no audit '{audit_id}' in {a.db} (audits: {known})")
            if store.n_draws(audit_id) == 0:
                raise AuditError(f"audit '{audit_id}' has no draws yet: run or import it first")
        results = [analyze(store, audit_id) for audit_id in a.audit]
    finally:
        store.close()
    comparison = Comparison(results[0], results[1], reps=a.reps, seed=a.seed, k=a.k,
                            capacity=a.capacity)
    _write(render(comparison, a.format, cutoff=a.cutoff), a.out)
    return 0


def _write(text: str, out: str | None) -> None:
    if out:
        try:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write the output file ({exc.strerror or exc}); choose "
                             "another path", file=out) from None
        print(f"wrote {term_escape(out)}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _cmd_import(a: argparse.Namespace) -> int:
    from core.format import num, term_escape
    from core.ingest import (
        FileFaults,
        Limits,
        commit_draws,
        commit_pool,
        target_criteria,
        validate_draws,
        validate_pool,
    )
    from core.store import Store

    limits = Limits.from_env(max_file_mb=a.max_file_mb, max_rows=a.max_rows,
                             max_line_kb=a.max_line_kb)
    # the target's frozen maxima check the range; a database that does not exist yet is only
    # created once the file is valid (a rejected import writes nothing)
    store = Store(a.db) if Path(a.db).exists() else None
    try:
        criteria = a.criteria or (target_criteria(store, a.audit) if store else None)
        draws = validate_draws(a.file, criteria=criteria, clip=a.clip, limits=limits)
        pool = validate_pool(a.pool, limits=limits) if a.pool else None
    except FileFaults as exc:
        for line in exc.lines():
            print(f"error: {term_escape(line)}", file=sys.stderr)
        if exc.total > 1:
            print(f"error: {exc.total:,} faults in all; nothing was imported", file=sys.stderr)
        return 2
    store = store or Store(a.db)
    res = commit_draws(store, a.audit, draws)
    created = " (a new audit)" if res.get("new_audit") else ""
    msg = (f"{res['status']}: {res['evaluations']} evaluations of {res['candidates']} "
           f"candidates ({res['runs_min']}-{res['runs_max']} runs), criteria "
           f"{', '.join(res['criteria']) or '(total only)'} into audit '{a.audit}'{created} "
           f"in {a.db}")
    print(term_escape(msg))
    for r in res["ranges"]:
        mx = "" if r.get("max_points") is None else f" of max {num(r['max_points'], 2)}"
        print(term_escape(f"  {r['criterion']}: min {num(r['min'], 2)}, median "
                          f"{num(r['median'], 2)}, max {num(r['max'], 2)}{mx}"))
    for w in res["warnings"]:
        print(f"warning: {term_escape(w)}")
    if pool is not None:
        pres = commit_pool(store, a.audit, pool)
        print(f"pool: {pres['applicants']} applicants")
    settings = {k: v for k, v in (("cutoff", a.cutoff),
                                  ("applications_per_req", a.applications_per_req))
                if v is not None}
    if settings:
        store.update_settings(a.audit, settings)
    return 0


def _settings_args(a: argparse.Namespace) -> dict[str, Any]:
    return {"cutoff": a.cutoff, "comparison": a.comparison, "k": a.k, "top_k": a.top_k,
            "of_n": a.of_n, "applications_per_req": a.applications_per_req,
            "capacity": a.capacity}


def _cmd_report(a: argparse.Namespace) -> int:
    from core.audit import Settings, analyze, analyze_frames
    from core.ingest import criteria_frame, validate_draws, validate_pool
    from core.report import render
    from core.store import Store

    if a.file and (a.db or a.audit):
        raise AuditError("give either a draws FILE or --db with --audit, not both")
    if a.top_k is not None and a.of_n is not None and a.top_k > a.of_n:
        raise AuditError(f"--top {a.top_k} is more than the list it is taken from (--of "
                         f"{a.of_n}): the recruiter works the top K of N, K at most N")
    if a.file:
        imp = validate_draws(a.file, criteria=a.criteria, clip=a.clip)
        pool = validate_pool(a.pool).pool if a.pool else None
        stored: dict[str, Any] = {}
        result = analyze_frames(
            imp.draws, criteria=criteria_frame(imp.criteria), pool=pool,
            candidates=imp.candidates, settings=Settings.merge(stored, **_settings_args(a)),
            freeze={"req_id": Path(a.file).stem, "screener": "imported draws",
                    "model": (imp.calls["model"].dropna().iloc[0]
                              if imp.calls["model"].notna().any() else "")},
            audit_id=Path(a.file).stem,
            payload_counts=_payload_counts(imp.calls))
    else:
        if not (a.db and a.audit):
            raise AuditError("give a draws FILE, or --db and --audit for a stored audit")
        if not Path(a.db).exists():
            raise AuditError(f"the database file {a.db} does not exist; create it with "
                             "'python -m core import' or 'python -m core demo'")
        pool_import = validate_pool(a.pool) if a.pool else None
        store = Store(a.db, read_only=pool_import is None)
        _require_audit(store, a.audit)
        if pool_import is not None:
            from core.ingest import commit_pool
            commit_pool(store, a.audit, pool_import)
        with store.session():
            result = analyze(store, a.audit, **_settings_args(a))
    _write(render(result, a.format), a.out)
    return 0


def _require_audit(store: Any, audit_id: str) -> None:
    """A mistyped audit id is an error naming the known ones, never a new empty audit."""
    if store.audit_exists(audit_id):
        return
    known = [str(x) for x in store.list_audits()["audit_id"]]
    shown = ", ".join(known[:10]) + (f" … ({len(known)} in all)" if len(known) > 10 else "")
    raise InputError(f"no audit '{audit_id}' in {store.path}; known: {shown or '(none)'}",
                     column=None)


def _payload_counts(calls: pd.DataFrame) -> pd.DataFrame | None:
    c = calls[calls["payload_sha256"].notna()]
    if len(c) == 0:
        return None
    return (c.groupby("candidate_id").agg(calls_with_payload=("payload_sha256", "size"),
                                          distinct_payloads=("payload_sha256", "nunique"))
            .reset_index())


def _cmd_sample(a: argparse.Namespace) -> int:
    from dataclasses import replace

    from core.flip import effective_cutoff
    from core.ingest import validate_pool
    from core.sample import DEFAULT_DESIGN, REDUCED_DESIGN, stratified_sample

    if (a.db is None) != (a.audit is None):
        raise AuditError("give --db and --audit together (the audit whose screener and prices "
                         "the estimate uses), or neither")
    pool = validate_pool(a.pool).pool
    if a.cutoff is None and a.top_k is None:
        raise AuditError("give --cutoff, or --top K for the effective cutoff of a top-K list")
    if a.cutoff is not None and a.top_k is not None:
        raise AuditError("give --cutoff or --top K, not both: --top sets the cutoff to the "
                         "K-th highest pool score")
    cutoff = a.cutoff if a.top_k is None else effective_cutoff(
        pool["first_pass_score"].to_numpy(), a.top_k)
    design = REDUCED_DESIGN if a.reduced else DEFAULT_DESIGN
    changes = {k: getattr(a, k) for k in ("band", "high", "low", "runs")
               if getattr(a, k) is not None}
    design = replace(design, **changes)
    frame = stratified_sample(pool, cutoff, a.spread, design, seed=a.seed)
    # the estimate reads the audit first: a mistyped --audit writes no sample file
    estimate = _sample_estimate(a, frame.sample, design.runs)
    try:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        # a spreadsheet opens this file: cells that look like formulas are neutralised
        csv_safe_frame(frame.sample).to_csv(a.out, index=False)
    except OSError as exc:
        raise InputError(f"cannot write the sample ({exc.strerror or exc}); choose another "
                         "path", file=a.out) from None
    c = frame.counts
    lo, hi = design.sd_interval_factors()
    print(f"sample: {sum(c.values())} candidates ({c['band']} band, {c['high']} high, "
          f"{c['low']} low) around cutoff {cutoff:g} -> {term_escape(a.out)}")
    print(f"design '{design.name}': {design.runs} runs each; one candidate's SD is known to "
          f"{lo:.2f}x - {hi:.2f}x (95%)")
    for line in estimate:
        print(term_lines(line))
    for s in frame.shortfalls:
        print(f"shortfall: {term_escape(s)}")
    return 0


def _sample_estimate(a: argparse.Namespace, sample: pd.DataFrame, runs: int) -> list[str]:
    """The run's estimate for the drawn sample: :func:`core.estimate.audit_estimate` with the
    audit's stored settings (``--db``/``--audit``, as the Sample page), or with none — then
    the cost is unknown and the latency a stated default, never a made-up number."""
    from core.estimate import audit_estimate
    from core.freeze import FreezeSheet
    from core.store import Store

    settings: dict[str, Any] = {"screener": {"kind": "unchosen"}}
    model, criteria, lines = "", (), []
    if a.db is not None:
        if not Path(a.db).exists():
            raise AuditError(f"the database file {a.db} does not exist")
        store = Store(a.db, read_only=True)
        try:
            if not store.audit_exists(a.audit):
                raise AuditError(f"no audit '{a.audit}' in {a.db}")
            audit = store.get_audit(a.audit)
        finally:
            store.close()
        settings = dict(audit["settings"])
        model = str(audit["freeze"].get("model") or "")
        try:
            criteria = FreezeSheet.from_dict(audit["freeze"]).criteria
        except (AuditError, TypeError):
            criteria = ()
    else:
        lines.append("estimate without an audit (--db/--audit): no screener or prices known")
    if a.latency is not None:
        settings = {k: v for k, v in settings.items() if k != "preflight_latency_s"}
        settings["latency_s"] = a.latency
    est = audit_estimate(settings, frozen_model=model, criteria=tuple(criteria),
                         candidates=sample, runs=int(runs), typed_where="given with --latency"
                         if a.latency is not None else "typed on the Sample page")
    return lines + est.lines(settings.get("max_calls_per_pair") or 3)


def _cmd_demo(a: argparse.Namespace) -> int:
    from core.demo import DEMO_V2_AUDIT_ID, ensure_demo
    from core.store import Store

    audit = ensure_demo(Store(a.db), rebuild=a.rebuild)
    db = term_escape(a.db)
    print(f"demo audit '{audit}' ready in {db}; report: python -m core report --db {db} "
          f"--audit {audit}")
    print(f"its second audit '{DEMO_V2_AUDIT_ID}' (the noisy criterion split) too; compare: "
          f"python -m core compare --db {a.db} --audit {audit} --audit {DEMO_V2_AUDIT_ID}")
    return 0


def _cmd_audits(a: argparse.Namespace) -> int:
    from core.store import Store

    if not Path(a.db).exists():
        raise AuditError(f"the database file {a.db} does not exist")
    df = Store(a.db, read_only=True).list_audits()
    if len(df) == 0:
        print("no audits")
    for r in df.itertuples():
        print(f"{term_escape(r.audit_id)}\t{r.evaluations} evaluations\t"
              f"harness {term_escape(str(r.harness_hash)[:12])}")
    return 0


_COMMANDS = {"import": _cmd_import, "report": _cmd_report, "sample": _cmd_sample,
             "demo": _cmd_demo, "audits": _cmd_audits}


def main(argv: list[str] | None = None) -> int:
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(argv)
    try:
        handler = _COMMANDS.get(args.command) or getattr(args, "func", None)
        if handler is None:  # pragma: no cover - every subparser sets one
            parser.error(f"unknown command {args.command}")
        return int(handler(args))
    except AuditError as exc:
        # a file with several faults (report FILE, sample POOL): every one listed, as import
        # does, never only the first
        lines = exc.lines() if callable(getattr(exc, "lines", None)) else [str(exc)]
        for line in lines:
            print(f"error: {term_escape(line)}", file=sys.stderr)
        total = getattr(exc, "total", 1)
        if isinstance(total, int) and total > 1:
            print(f"error: {total:,} faults in all; fix them in the file", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`… | head`): stop quietly, as the shell's own tools do
        # (what was written to the database is committed; nothing more is printed)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except MemoryError:
        print("error: not enough memory for this input; use a smaller file", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: one line, not a traceback
        if os.environ.get("AUDIT_DEBUG"):
            raise
        print(f"error: unexpected {type(exc).__name__}: {term_escape(str(exc)[:300])} — this "
              "is a bug, please report it (AUDIT_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
