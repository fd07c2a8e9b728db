"""The runnable examples in the statistics' docstrings stay true, and every statistics entry
point carries its references and an example (issue 10)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("core.criteria", "core.flip", "core.band", "core.live", "core.compare",
           "core.comparison", "core.audit")

ENTRY_POINTS = ("core.criteria.decompose", "core.criteria.icc1", "core.criteria.sd_interval",
                "core.flip.summarize", "core.flip.disagreement", "core.flip.clopper_pearson",
                "core.band.recommend_band", "core.band.reverse_probability",
                "core.band.capacity_halfwidth", "core.live.LiveAudit",
                "core.compare.variance_ratio", "core.compare.bootstrap_weights",
                "core.compare.bootstrap_interval", "core.comparison.Comparison",
                "core.audit.analyze_frames")


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_give_what_they_show(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name} has no runnable example"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} fail"


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_every_statistics_entry_point_has_references_and_an_example(path):
    module, _, attr = path.rpartition(".")
    doc = getattr(importlib.import_module(module), attr).__doc__ or ""
    assert "References\n" in doc and ".. [1]" in doc, f"{path} has no numbered References"
    assert "Examples\n" in doc and ">>> " in doc, f"{path} has no runnable example"
