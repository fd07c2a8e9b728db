"""Step 1 — the freeze sheet: canonical hash, floating aliases, sampling regimes, blockers."""

from __future__ import annotations

import hashlib
import json

import pytest

from core.errors import InputError
from core.freeze import (
    NO_SAMPLING_MODELS,
    SAMPLING_REGIMES,
    TEMPERATURE_ZERO_NOTE,
    Criterion,
    FreezeSheet,
    floating_alias,
    harness_hash,
    parse_criteria_spec,
    sampling_params_rejected,
)

BASE = {"req_id": "ENG-2291", "req_title": "Senior Backend Engineer", "screener": "acme",
        "screener_version": "v4.2", "model": "claude-haiku-4-5-20251001", "rubric_version": "r7",
        "sampling": "settable", "temperature": 0.1, "side_effect_free": True,
        "result_cache_off": True,
        "criteria": [{"name": "technical_skills", "max": 35}, {"name": "experience", "max": 20}]}


def test_hash_is_sha256_of_canonical_json():
    sheet = {"b": 1, "a": {"y": [1, 2], "x": "é"}}
    canonical = '{"a":{"x":"é","y":[1,2]},"b":1}'
    assert harness_hash(sheet) == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_hash_stable_under_key_order():
    reordered = dict(reversed(list(BASE.items())))
    assert FreezeSheet.from_dict(BASE).hash == FreezeSheet.from_dict(reordered).hash
    assert harness_hash(json.loads(json.dumps(BASE))) == harness_hash(reordered)


@pytest.mark.parametrize("field, value", [("prompt_version", "p13"), ("model", "other-2025-01-01"),
                                          ("temperature", 0.2), ("rubric_version", "r8")])
def test_hash_changes_with_any_harness_field(field, value):
    assert FreezeSheet.from_dict({**BASE, field: value}).hash != FreezeSheet.from_dict(BASE).hash


def test_hash_changes_with_rubric_max_points():
    other = {**BASE, "criteria": [{"name": "technical_skills", "max": 30},
                                  {"name": "experience", "max": 20}]}
    assert FreezeSheet.from_dict(other).hash != FreezeSheet.from_dict(BASE).hash


@pytest.mark.parametrize("model", ["latest", "gpt-4o-latest", "llama3:latest", "claude-3-opus-latest",
                                   "gpt-4o", "claude-sonnet", "mistral-large", ""])
def test_floating_alias_flagged(model):
    assert floating_alias(model) is not None


@pytest.mark.parametrize("model", ["claude-haiku-4-5-20251001", "gpt-4o-2024-08-06",
                                   "gemini-1.5-pro-002", "llama3:8b-v1.2",
                                   "sim-screener-2026-11-01"])
def test_pinned_snapshot_not_flagged(model):
    assert floating_alias(model) is None


def test_floating_alias_is_a_warning_on_the_sheet():
    warnings = FreezeSheet.from_dict({**BASE, "model": "gpt-4o-latest"}).warnings()
    assert any("floating alias" in w for w in warnings)
    assert not any("alias" in w for w in FreezeSheet.from_dict(BASE).warnings())


def test_sampling_regimes():
    assert set(SAMPLING_REGIMES) == {"settable", "not-exposed", "cannot-be-set"}
    with pytest.raises(InputError, match="sampling"):
        FreezeSheet.from_dict({**BASE, "sampling": "hot"})
    with pytest.raises(InputError, match="settable"):
        FreezeSheet.from_dict({**BASE, "sampling": "not-exposed"})  # temperature recorded
    ok = FreezeSheet.from_dict({**BASE, "sampling": "cannot-be-set", "temperature": None})
    assert "sampling cannot be set" in ok.harness_label()


@pytest.mark.parametrize("model", ["claude-opus-5", "claude-opus-4-8", "claude-opus-4-7",
                                   "claude-sonnet-5", "claude-fable-5"])
def test_models_that_reject_sampling_parameters(model):
    assert model in NO_SAMPLING_MODELS
    assert sampling_params_rejected(model + "-20260101")
    w = FreezeSheet.from_dict({**BASE, "model": model + "-20260101"}).warnings()
    assert any("cannot-be-set" in x for x in w)


def test_sampling_settable_model_not_flagged():
    assert not sampling_params_rejected("claude-haiku-4-5-20251001")


def test_side_effect_clearance_blocks():
    sheet = FreezeSheet.from_dict({**BASE, "side_effect_free": False})
    assert sheet.blockers() and "side-effect" in sheet.blockers()[0]
    assert FreezeSheet.from_dict(BASE).blockers() == []


def test_result_cache_not_confirmed_is_warned():
    w = FreezeSheet.from_dict({**BASE, "result_cache_off": False}).warnings()
    assert any("result cache" in x for x in w)


def test_unknown_field_and_missing_req_rejected():
    with pytest.raises(InputError, match="unknown freeze-sheet field"):
        FreezeSheet.from_dict({**BASE, "colour": "blue"})
    with pytest.raises(InputError, match="req id"):
        FreezeSheet.from_dict({**BASE, "req_id": " "})
    with pytest.raises(InputError, match="unique"):
        FreezeSheet.from_dict({**BASE, "criteria": [{"name": "a"}, {"name": "a"}]})


def test_harness_label_like_the_seed():
    assert FreezeSheet.from_dict(BASE).harness_label() == \
        "acme v4.2 / claude-haiku-4-5-20251001 / rubric r7 / temperature 0.1"


def test_round_trip_dict():
    sheet = FreezeSheet.from_dict(BASE)
    again = FreezeSheet.from_dict(sheet.to_dict())
    assert again == sheet and again.hash == sheet.hash


def test_criteria_spec():
    assert parse_criteria_spec("technical_skills:10, experience:25:2,notes") == [
        Criterion("technical_skills", 10.0, 1.0), Criterion("experience", 25.0, 2.0),
        Criterion("notes", None, 1.0)]
    for bad in ("a:x", "a:0", ":5"):
        with pytest.raises(InputError):
            parse_criteria_spec(bad)


def test_temperature_zero_note_recorded():
    assert "80 distinct outputs" in TEMPERATURE_ZERO_NOTE and "1.6x" in TEMPERATURE_ZERO_NOTE


def test_hash_does_not_depend_on_int_or_float_max_points():
    """35 and 35.0 are the same rubric: a sheet read back from its dict has the same hash."""
    from core.freeze import Criterion, FreezeSheet
    a = FreezeSheet(req_id="R", criteria=(Criterion("x", 35, 1),), sampling="settable",
                    temperature=0)
    b = FreezeSheet.from_dict(a.to_dict())
    assert b.hash == a.hash
    assert FreezeSheet(req_id="R", criteria=(Criterion("x", 35.0, 1.0),), sampling="settable",
                       temperature=0.0).hash == a.hash
