"""The demo audit: seeded (identical on every build) and showing every pathology."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.demo import DEMO_AUDIT_ID, build_demo, ensure_demo
from core.report import report_dict
from core.store import Store


def test_two_builds_give_identical_draws():
    a, b = build_demo(), build_demo()
    for key in ("draws", "pool", "candidates"):
        pd.testing.assert_frame_equal(a[key], b[key])
    pd.testing.assert_frame_equal(a["calls"], b["calls"])
    assert a["cutoff"] == b["cutoff"]


def test_another_seed_gives_other_draws():
    a, b = build_demo(), build_demo(seed=1)
    assert not a["draws"]["score"].equals(b["draws"]["score"])


def test_demo_shape(demo_result):
    c = demo_result.composition()
    assert (c["candidates"], c["band"], c["high_anchors"], c["low_anchors"]) == (40, 24, 8, 8)
    assert (c["runs_min"], c["runs_max"], c["evaluations"]) == (15, 15, 600)
    assert demo_result.pool_size == 410
    assert demo_result.strata_source == "the sample file"


def test_demo_cutoff_78_effective_vs_70(demo_result):
    assert demo_result.cutoff == 78 and demo_result.configured_cutoff == 70
    d = report_dict(demo_result)
    assert d["cutoff"]["effective"] and d["cutoff"]["top_k"] == 40


def test_demo_verdicts(demo_result):
    v = dict(zip(demo_result.criteria["criterion"], demo_result.criteria["verdict"]))
    assert v == {"technical_skills": "WORKING", "experience": "DEAD", "projects": "NOISY",
                 "communication": "WORKING", "total": ""}
    assert list(demo_result.remediation["criterion"]) == ["projects", "experience"]


def test_demo_dead_criterion_gives_full_marks_to_nearly_everyone(demo_result):
    exp = demo_result.criteria.set_index("criterion").loc["experience"]
    assert exp["modal_score"] == exp["max_points"] == 20
    assert exp["modal_candidates"] >= 30


def test_demo_scores_clump_on_rubric_integers(demo_result):
    scores = demo_result.draws.scores
    assert np.all(scores == np.round(scores))


def test_demo_guards_pass_and_reliability_reported(demo_result):
    g = demo_result.guards
    assert g["cache"]["checked"] and not g["cache"]["withhold"]
    assert not g["populations"]["flagged"]
    assert demo_result.icc is not None and demo_result.reliability_withheld is None
    v = demo_result.view()
    assert v.flip.candidates_with_flip > 0 and not v.needs_pool


def test_ensure_demo_is_idempotent(tmp_path):
    s = Store(tmp_path / "d.duckdb")
    try:
        assert ensure_demo(s) == DEMO_AUDIT_ID
        before = s.data_version(DEMO_AUDIT_ID)
        ensure_demo(s)
        assert s.data_version(DEMO_AUDIT_ID) == before and s.n_draws(DEMO_AUDIT_ID) == 3000
    finally:
        s.close()


@pytest.mark.parametrize("key", ["draws", "pool"])
def test_stored_demo_equals_built_demo(demo_db, key):
    built = build_demo()[key]
    s = Store(demo_db, read_only=True)
    try:
        stored = s.load_draws(DEMO_AUDIT_ID) if key == "draws" else s.get_pool(DEMO_AUDIT_ID)
    finally:
        s.close()
    cols = ["candidate_id", "run", "criterion", "score"] if key == "draws" else [
        "candidate_id", "first_pass_score"]
    a = stored[cols].sort_values(cols[:-1]).reset_index(drop=True)
    b = built[cols].sort_values(cols[:-1]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
