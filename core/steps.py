"""Where an audit stands: each step's status, and how far its run has got.

One place for the sidebar, the statistics pages' "provisional" banner, the CLI and the reports:

* :func:`run_progress` — draws stored against draws expected (candidates × runs per candidate),
  so a page can say "provisional: 212 of 600 draws";
* :func:`step_status` — done / needs … / blocked because … / running for each of the six steps.
  A step that did not happen reads as not done, with what would do it: an imported audit has no
  frozen harness of its own and no sample drawn from a pool.

No streamlit import; SQL stays in :mod:`core.store`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import AuditError
from core.freeze import FreezeSheet
from core.store import Store

__all__ = ["StepStatus", "RunProgress", "run_progress", "step_status", "IMPORTED_SCREENER"]

#: The screener name of the freeze sheet an import creates for a new audit (core.ingest).
IMPORTED_SCREENER = "imported draws"


@dataclass(frozen=True)
class StepStatus:
    """One step: ``state`` is ``done`` | ``needs`` | ``blocked`` | ``running``."""

    step: str
    state: str
    text: str


@dataclass(frozen=True)
class RunProgress:
    """Draws stored (``done``, distinct candidate × run pairs) against ``expected``.

    ``expected`` is candidates × runs per candidate when both are known (a planned run), else
    ``None`` (an import: what was uploaded is the whole audit).
    """

    done: int
    expected: int | None
    running: bool = False

    @property
    def incomplete(self) -> bool:
        """True while a run is going or a planned run has fewer draws than it expects."""
        return self.running or (self.expected is not None and self.done < self.expected)

    def label(self) -> str:
        """``212 of 600 draws`` (``212 draws`` when nothing is expected)."""
        if self.expected is None:
            return f"{self.done:,} draws"
        return f"{self.done:,} of {self.expected:,} draws"


def _sheet(audit: dict) -> FreezeSheet | None:
    try:
        return FreezeSheet.from_dict(audit["freeze"])
    except (AuditError, TypeError, KeyError, ValueError):
        return None


def run_progress(store: Store, audit_id: str, running: tuple[int, int] | None = None
                 ) -> RunProgress:
    """Draws stored against draws expected for ``audit_id``.

    ``running`` is ``(done, total)`` from a background run in this process, when one is going;
    its total wins over the plan (it is what the run will fill).
    """
    audit = store.get_audit(audit_id)
    done = len(store.completed_pairs(audit_id)) if store.n_draws(audit_id) else 0
    runs = audit["settings"].get("runs")
    n_cands = len(store.get_candidates(audit_id))
    imported = len(store.list_imports(audit_id)) > 0
    expected = n_cands * int(runs) if runs and n_cands and not imported else None
    if running is not None:
        return RunProgress(done=done, expected=max(int(running[1]), expected or 0) or None,
                           running=True)
    return RunProgress(done=done, expected=expected)


def step_status(store: Store, audit_id: str, running: tuple[int, int] | None = None
                ) -> list[StepStatus]:
    """Each step's status, in order: freeze, sample, run, criteria, flip, band.

    ``running`` as in :func:`run_progress`.
    """
    audit = store.get_audit(audit_id)
    sheet = _sheet(audit)
    n_draws = store.n_draws(audit_id)
    n_cands = len(store.get_candidates(audit_id))
    n_pool = len(store.get_pool(audit_id))
    imported = len(store.list_imports(audit_id)) > 0
    out: list[StepStatus] = []
    if sheet is None:
        out.append(StepStatus("freeze", "needs", "needs a complete freeze sheet"))
    elif sheet.screener == IMPORTED_SCREENER:
        out.append(StepStatus("freeze", "needs",
                              "not done — imported draws, no harness recorded: start a new "
                              "audit from a filled sheet and import the draws into it"))
    elif sheet.blockers():
        out.append(StepStatus("freeze", "blocked",
                              "blocked because side-effect clearance is missing"))
    else:
        out.append(StepStatus("freeze", "done", "done — harness frozen"))
    if n_cands and imported:
        out.append(StepStatus("sample", "needs",
                              f"not done — {n_cands:,} candidates came with the imported draws, "
                              "not drawn from a pool" + ("" if n_pool else
                                                         "; upload the pool for reviews per req")))
    elif n_cands:
        out.append(StepStatus("sample", "done", f"done — {n_cands:,} candidates"))
    elif n_pool:
        out.append(StepStatus("sample", "needs", "needs a sample drawn from the pool"))
    else:
        out.append(StepStatus("sample", "needs", "needs the pool (or upload draws on Run)"))
    prog = run_progress(store, audit_id, running)
    if prog.running:
        out.append(StepStatus("run", "running", f"running — {prog.label()}"))
    elif not n_draws:
        blocked = sheet is not None and bool(sheet.blockers()) and n_cands
        out.append(StepStatus("run", "blocked" if blocked else "needs",
                              "blocked because side-effect clearance is missing" if blocked
                              else "needs draws (run the screener or upload)"))
    elif prog.incomplete:
        missing = (prog.expected or 0) - prog.done
        out.append(StepStatus("run", "needs", f"needs {missing:,} more draws (resume)"))
    else:
        how = "imported" if imported else "done"
        out.append(StepStatus("run", "done", f"{how} — {prog.done:,} draws"))
    with_draws = len({c for c, _ in store.completed_pairs(audit_id)}) if n_draws else 0
    if with_draws < 2:
        for step in ("criteria", "flip", "band"):
            out.append(StepStatus(step, "needs", "needs draws" if not n_draws else
                                  "needs draws from at least 2 candidates"))
        return out
    partial = prog.incomplete
    done = f"provisional — {prog.label()}" if partial else "done"
    state_ = "needs" if partial else "done"
    crit = store.get_criteria(audit_id)
    out.append(StepStatus("criteria", state_ if len(crit) else "needs",
                          done if len(crit) else "skipped — the screener returns only a total"))
    out.append(StepStatus("flip", state_, f"{done} — move the cutoff"))
    out.append(StepStatus("band", state_ if n_pool else "needs",
                          done if n_pool else "needs the pool for reviews per req"))
    return out
