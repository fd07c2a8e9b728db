"""One audit analysed: guards first (cache, second population), settings, stored vs frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.audit import Settings, analyze, analyze_frames, cache_guard
from core.ingest import import_draws
from core.report import render_text, report_dict
from tests.support import FIXTURES, anchored_totals, long_frame, totals_frame


def _payload_counts(distinct: dict[str, int], calls: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"candidate_id": list(distinct), "calls_with_payload": calls,
                         "distinct_payloads": list(distinct.values())})


def test_cache_guard_all_identical_withholds():
    g = cache_guard(_payload_counts({"A": 1, "B": 1}))
    assert g["withhold"] and g["verdict"] == "cache test, not a variance test"
    assert g["single_payload_candidates"] == ["A", "B"]


def test_cache_guard_some_identical_lists_them_without_withholding():
    g = cache_guard(_payload_counts({"A": 1, "B": 3}))
    assert not g["withhold"] and g["verdict"] == "variance test"
    assert g["single_payload_candidates"] == ["A"] and g["distinct_payloads_min"] == 1


def test_cache_guard_without_payloads_is_not_checked():
    g = cache_guard(None)
    assert not g["checked"] and not g["withhold"]


def test_cached_run_withholds_statistics_in_every_format():
    long = totals_frame({"A": [5, 6, 7], "B": [1, 2, 3]})
    res = analyze_frames(long, settings=Settings(cutoff=4),
                         payload_counts=_payload_counts({"A": 1, "B": 1}))
    d = report_dict(res)
    assert d["guards"]["statistics_withheld"]
    assert d["criteria"] is None and d["flip"] is None and d["band"] is None
    text = render_text(res)
    assert "cache test, not a variance test" in text and "STATISTICS WITHHELD" in text
    assert "FLIP RATE AT CUTOFF" not in text and "PER-CRITERION" not in text
    assert "NOT ESTABLISHED BY THIS REPORT" in text


def test_cached_import_end_to_end(store, tmp_path):
    # every candidate's three payloads are byte-identical (a result cache keyed on candidate)
    rows = ["candidate_id,run,total,raw_payload"]
    for cid, t in (("A", 5), ("B", 9)):
        for r in (1, 2, 3):
            rows.append(f'{cid},{r},{t},"{{""total"": {t}}}"')
    p = tmp_path / "cached.csv"
    p.write_text("\n".join(rows) + "\n")
    import_draws(store, "K", p)
    res = analyze(store, "K", cutoff=7)
    assert res.withheld and "cache test, not a variance test" in render_text(res)


def test_second_population_excluded_and_flagged():
    long = totals_frame({"A": [5, 6, 7], "B": [1, 2, 3]})
    long["model"] = "m-2025-01-01"
    long.loc[(long.candidate_id == "A") & (long.run == 3), "model"] = "m-2025-06-01"
    res = analyze_frames(long, settings=Settings(cutoff=4), freeze={"model": "m-2025-01-01"})
    pop = res.guards["populations"]
    assert pop["flagged"] and pop["excluded_draws"] == 1
    assert res.draws.N == 5
    assert "SECOND POPULATION" in render_text(res)


def test_settings_merge_explicit_beats_stored():
    s = Settings.merge({"cutoff": 70, "k": 2.5, "unknown": 1}, cutoff=None, k=3.0)
    assert (s.cutoff, s.k) == (70, 3.0)


def test_no_cutoff_audits_the_median_and_says_so():
    res = analyze_frames(totals_frame({"A": [1, 2], "B": [3, 10]}))
    assert res.cutoff == 2.5 and any("median" in n for n in res.notes)


def test_stored_audit_equals_frames_analysis(store):
    import_draws(store, "A", FIXTURES / "draws_long.csv", criteria="a:10,b:10")
    stored = analyze(store, "A", cutoff=10)
    frames = analyze_frames(long_frame({"X": {"a": [1, 2, 3], "b": [4, 6, 5]},
                                        "Y": {"a": [5, 5, 8], "b": [2, 2, 2]},
                                        "Z": {"a": [9, 9, 9], "b": [7, 8, 9]}}),
                            criteria=store.get_criteria("A"), settings=Settings(cutoff=10))
    pd.testing.assert_frame_equal(stored.criteria, frames.criteria)
    assert stored.view().flip == frames.view().flip


def test_composition_counts():
    totals = anchored_totals(np.random.default_rng(2), band=5, high=6, low=7, runs=4)
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=50))
    c = res.composition()
    assert (c["candidates"], c["evaluations"]) == (18, 72)
    # band candidates whose mean drifts past t ± 1.5σ are "between"
    assert (c["band"] + c["between"], c["high_anchors"], c["low_anchors"]) == (5, 6, 7)


@pytest.mark.parametrize("k", [1.0, 2.0, 3.0])
def test_view_k_changes_only_the_band(k):
    totals = anchored_totals(np.random.default_rng(9))
    res = analyze_frames(totals_frame(totals), settings=Settings(cutoff=50))
    v = res.view(k=k)
    assert v.band.k == k
    assert v.band.two_sd == pytest.approx((50 - k * res.live.within_sd, 50 + k * res.live.within_sd))
    assert v.flip == res.view().flip


def test_a_single_candidate_gives_no_verdicts_and_says_why():
    """Only a pre-flight's draws (one candidate, 3 runs): no between-SD, no verdict, a note."""
    import pandas as pd

    from core.audit import analyze_frames
    rows = [("c1", r, "a", float(r)) for r in range(1, 4)] + \
        [("c1", r, "total", float(r)) for r in range(1, 4)]
    res = analyze_frames(pd.DataFrame(rows, columns=["candidate_id", "run", "criterion",
                                                     "score"]), settings=None)
    assert res.criteria["verdict"].tolist() == ["", ""]
    assert any("only 1 candidate has draws" in n for n in res.notes)
    assert res.icc is None
