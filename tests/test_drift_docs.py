"""The examples in core.drift's docstrings run and print what they say (doctest), and every
statistics entry point carries a numbered References section and an example."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import core.drift

MODULES = sorted(m.name for m in pkgutil.iter_modules(core.drift.__path__, "core.drift."))

#: The statistics entry points (SPEC §5): stage 1, stage 2 and its test, horizon, trend,
#: multiple testing, contrasts, the outcome check.
ENTRY_POINTS = {
    "core.drift.severity": ["fit_severity", "cochran_q"],
    "core.drift.local_level": ["fit_local_level", "kalman_local_level", "boundary_lr_test"],
    "core.drift.horizon": ["horizon"],
    "core.drift.trend": ["monthly_trend", "category_trends", "deployment_contrasts"],
    "core.drift.outcomes": ["outcome_trend", "break_even_share"],
}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) in {name} print otherwise"
    if name in ENTRY_POINTS:
        assert result.attempted >= len(ENTRY_POINTS[name])


@pytest.mark.parametrize("name,func", [(m, f) for m, fs in ENTRY_POINTS.items() for f in fs])
def test_entry_point_has_references_and_an_example(name, func):
    doc = getattr(importlib.import_module(name), func).__doc__
    assert "References\n    ----------\n    .. [1] " in doc
    assert "Examples\n    --------\n" in doc and ">>> " in doc
    if func != "break_even_share":  # a cost condition: the paper is its only reference
        assert "statsmodels" in doc or "scipy" in doc
        assert "R: " in doc or "R:\n" in doc


def test_the_package_reexports_nothing():
    public = [n for n in vars(core.drift) if not n.startswith("_")]
    assert set(public) <= set(m.rsplit(".", 1)[1] for m in MODULES), public
