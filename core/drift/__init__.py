"""Drift and grader severity — separate the grader from the screener, estimate drift, date expiry.

Method (SPEC §5, after ``seeds/004_584ac5ccdc3466e2.txt``): a rating is the sum of the evaluated
system's state in its batch, the grader's severity and noise, ``y_irt = θ_t + γ_r + ε_irt``.
The modules follow the method, in order:

* :mod:`core.drift.panel` — read and validate a ratings panel, or build one from stored audits;
* :mod:`core.drift.severity` — stage 1: OLS on batch and rater dummies with HC1 covariance
  (grader severities, batch effects on the reference rater's scale, Cochran's Q of a gap);
* :mod:`core.drift.local_level` — stage 2: the local-level model with known sampling
  covariance, exact diffuse likelihood and Kalman filter, q by maximum likelihood, boundary LR
  test of q = 0, profile interval, smoothed path;
* :mod:`core.drift.horizon` — weeks until the predictive SD reaches a change that matters, and
  the re-audit date;
* :mod:`core.drift.trend` — monthly trend with a wild cluster bootstrap, per-category trends
  with Holm / BH, deployment contrasts;
* :mod:`core.drift.outcomes` — the outcome check (Newey–West) and the cost condition;
* :mod:`core.drift.analysis` — stage 1 into stage 2 and the drift variants (the paper's
  Table 6), and all of it in one call (:func:`~core.drift.analysis.analyse_drift`);
* :mod:`core.drift.result` — JSON, text and Markdown renderings;
* :mod:`core.drift.cli` — ``python -m core drift``; :mod:`core.drift.demo` — seeded demo data.

Pure Python (numpy, scipy, pandas, statsmodels); never imports streamlit. Import from the
module that owns a name (``from core.drift.severity import fit_severity``): this package
re-exports nothing.
"""
