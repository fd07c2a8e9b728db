"""Screener adapters and the parsing presets (flat / nested / paths), without the engine."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import ScreenRequest, register_secret, scrub
from core.screeners.command import CommandScreener
from core.screeners.http import parse_retry_after
from core.screeners.http_json import fill_body
from core.screeners.parsing import ParseError, ParseSpec, extract_json, parse_scores
from core.screeners.python_fn import PythonScreener
from core.screeners.registry import build_screener

RUBRIC = (Criterion("technical_skills", 10.0), Criterion("experience", 25.0, 2.0))
HACKERRANK = {"scores": {"technical_skills": {"score": 8, "max": 10},
                         "experience": {"score": 25, "max": 25}},
              "bonus_points": {"total": 3}, "deductions": {"total": 1}}


def req(app: str = "hello") -> ScreenRequest:
    return ScreenRequest("r" * 32, "c1", 1, app, 42)


# ---------------------------------------------------------------------------- parsing
def test_flat_keeps_the_screeners_total():
    p = parse_scores('{"technical_skills": 8, "experience": 25, "total": 80}', RUBRIC,
                     ParseSpec())
    assert p.scores == {"technical_skills": 8.0, "experience": 25.0}
    assert p.total == 80.0 and p.total_from_screener


def test_flat_without_total_uses_the_weighted_sum():
    p = parse_scores({"technical_skills": 8, "experience": "25"}, RUBRIC, ParseSpec())
    assert p.total == 8 + 2 * 25 and not p.total_from_screener


def test_nested_hackerrank_total_is_capped_sum_plus_bonus_minus_deductions():
    p = parse_scores(HACKERRANK, RUBRIC, ParseSpec(preset="nested"))
    assert p.scores == {"technical_skills": 8.0, "experience": 25.0}
    assert p.total == 8 + 25 + 3 - 1


def test_nested_score_over_max_is_an_error_or_clipped():
    over = json.loads(json.dumps(HACKERRANK))
    over["scores"]["technical_skills"]["score"] = 12
    with pytest.raises(ParseError, match="outside 0..10"):
        parse_scores(over, RUBRIC, ParseSpec(preset="nested"))
    p = parse_scores(over, RUBRIC, ParseSpec(preset="nested", out_of_range="clip"))
    assert p.scores["technical_skills"] == 10 and p.clipped == {"technical_skills"}
    assert p.total == 10 + 25 + 3 - 1          # min(score, max) in the screener's own total


def test_paths_preset_reads_explicit_paths():
    spec = ParseSpec(preset="paths", paths={"technical_skills": "result.items.0.value",
                                            "experience": "result.items.1.value",
                                            "total": "result.sum"})
    obj = {"result": {"items": [{"value": 7}, {"value": 20}], "sum": 47}}
    p = parse_scores(obj, RUBRIC, spec)
    assert p.scores == {"technical_skills": 7.0, "experience": 20.0} and p.total == 47


@pytest.mark.parametrize("bad", [
    {"technical_skills": True, "experience": 3},
    {"technical_skills": "eight", "experience": 3},
    {"technical_skills": float("nan"), "experience": 3},
    {"technical_skills": -1, "experience": 3},
    {"experience": 3},
    [1, 2],
])
def test_bad_answers_are_parse_errors(bad):
    with pytest.raises(ParseError):
        parse_scores(bad, RUBRIC, ParseSpec())


def test_json_is_found_in_code_fences_and_prose():
    assert extract_json('Sure!\n```json\n{"a": 1}\n```\nDone.') == {"a": 1}
    assert extract_json('The scores are {"a": 2} as requested.') == {"a": 2}
    with pytest.raises(ParseError):
        extract_json("no json here")
    with pytest.raises(ParseError):
        extract_json('{"a": 1, "b":')


def test_payload_path_unwraps_a_json_string_in_an_envelope():
    env = {"data": {"content": '{"technical_skills": 5, "experience": 10}'}}
    p = parse_scores(env, RUBRIC, ParseSpec(payload_path="data.content"))
    assert p.scores["technical_skills"] == 5


def test_unknown_preset_is_refused():
    with pytest.raises(InputError, match="preset"):
        ParseSpec(preset="xml")


# ---------------------------------------------------------------------------- plumbing
def test_retry_after_prefers_ms_then_seconds_then_date():
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    when = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 < parse_retry_after({"retry-after": format_datetime(when, usegmt=True)}) <= 31
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_body_template_escapes_application_text():
    app = 'He said "hi"\n{not a placeholder} \\ end'
    body = fill_body({"input": {"text": "{application}", "id": "cand-{candidate_id}"},
                      "n": "{run}"}, {"application": app, "candidate_id": "7", "run": 3})
    assert body == {"input": {"text": app, "id": "cand-7"}, "n": 3}
    assert json.loads(json.dumps(body))["input"]["text"] == app


def test_scrub_removes_registered_secrets():
    register_secret("sk-unit-test-secret-999")
    assert scrub("bad key sk-unit-test-secret-999 given") == "bad key [redacted] given"


def test_missing_api_key_variable_names_the_variable_only(monkeypatch):
    monkeypatch.delenv("NO_SUCH_SCREENER_API_KEY", raising=False)
    with pytest.raises(InputError, match="NO_SUCH_SCREENER_API_KEY"):
        build_screener("openai-chat", {"base_url": "http://127.0.0.1:9/v1", "model": "m-1",
                                       "api_key_env": "NO_SUCH_SCREENER_API_KEY"}, criteria=RUBRIC)


def test_streamlit_secrets_are_looked_up_before_the_environment(monkeypatch):
    monkeypatch.setenv("X_SCREENER_API_KEY", "from-env-value-1")
    scr = build_screener("anthropic", {"model": "claude-haiku-4-5-20251001",
                                       "api_key_env": "X_SCREENER_API_KEY"}, criteria=RUBRIC,
                         secrets={"X_SCREENER_API_KEY": "from-secrets-value-2"})
    assert scr._api_key == "from-secrets-value-2"
    assert "from-secrets" not in repr(scr) and "from-secrets" not in str(scr.describe())


def test_credentials_in_config_headers_are_refused():
    with pytest.raises(InputError, match="api_key_env"):
        build_screener("http-json", {"url": "http://127.0.0.1:9", "model": "m-1",
                                     "headers": {"Authorization": "Bearer abc"}},
                       criteria=RUBRIC)


@pytest.mark.parametrize("kind,options,field", [
    ("openai-chat", {"base_url": "http://127.0.0.1:9/v1", "model": "m-1",
                     "prompt": "Score this candidate."}, "prompt_template"),
    ("anthropic", {"model": "claude-haiku-4-5-20251001", "prompt": "Score it."},
     "prompt_template"),
    ("http-json", {"url": "http://127.0.0.1:9", "model": "m-1",
                   "body": {"id": "{candidate_id}"}}, "body_template"),
])
def test_a_template_without_the_application_is_refused(kind, options, field):
    """A prompt that never inserts {application} would score an empty application N times."""
    with pytest.raises(InputError, match=field) as exc:
        build_screener(kind, options, criteria=RUBRIC)
    assert "{application}" in str(exc.value)


def test_unknown_screener_field_is_refused():
    with pytest.raises(InputError, match="temprature"):
        build_screener("openai-chat", {"base_url": "http://127.0.0.1:9/v1", "model": "m-1",
                                       "temprature": 1}, criteria=RUBRIC)


# ---------------------------------------------------------------------------- command / python
SCRIPT = ("import json,os,sys;app=sys.stdin.read() if len(sys.argv)<2 else "
          "open(sys.argv[1]).read();print(json.dumps({'technical_skills':len(app)%10,"
          "'experience':int(os.environ['SCREENER_RUN'])}))")


@pytest.mark.parametrize("mode", ["stdin", "file"])
def test_command_adapter_reads_json_from_stdout(mode):
    scr = CommandScreener(argv=[sys.executable, "-c", SCRIPT], model="cli-1", criteria=RUBRIC,
                          input_mode=mode)
    raw = asyncio.run(scr.call(None, req("abcdefg")))
    p = scr.parse(raw)
    assert p.scores == {"technical_skills": 7.0, "experience": 1.0}


def test_command_adapter_timeout_is_retryable_and_failure_is_not():
    from core.screeners.base import CallFailed
    slow = CommandScreener(argv=[sys.executable, "-c", "import time; time.sleep(5)"],
                           model="cli-1", timeout_s=0.3)
    with pytest.raises(CallFailed) as e:
        asyncio.run(slow.call(None, req()))
    assert e.value.retryable and "timeout" in str(e.value)
    bad = CommandScreener(argv=[sys.executable, "-c", "import sys; sys.exit(3)"],
                          model="cli-1")
    with pytest.raises(CallFailed) as e2:
        asyncio.run(bad.call(None, req()))
    assert not e2.value.retryable and "status 3" in str(e2.value)


def score_fn(application: str, *, run: int) -> dict:
    """Used by the python adapter test as ``tests.test_screeners:score_fn``."""
    return {"technical_skills": len(application) % 10, "experience": run}


def test_python_adapter_loads_module_function():
    scr = PythonScreener(function="tests.test_screeners:score_fn", model="py-1", criteria=RUBRIC)
    p = scr.parse(asyncio.run(scr.call(None, req("abc"))))
    assert p.scores == {"technical_skills": 3.0, "experience": 1.0}
    with pytest.raises(InputError, match="module:function"):
        PythonScreener(function="nocolon", model="py-1")


def test_simulated_adapter_is_seeded_per_candidate_and_run():
    scr = build_screener("simulated", {}, criteria=(), seed=5)
    a = asyncio.run(scr.call(None, ScreenRequest("x", "c1", 2, "", 0)))
    b = asyncio.run(scr.call(None, ScreenRequest("y", "c1", 2, "", 1)))
    c = asyncio.run(scr.call(None, ScreenRequest("z", "c1", 3, "", 0)))
    assert a.payload == b.payload and a.payload != c.payload
    assert set(scr.parse(a).scores) == {"technical_skills", "experience", "projects",
                                        "communication"}


def test_fill_body_fast_paths_give_what_the_placeholder_rules_give():
    values = {"application": "a {candidate_id} b", "candidate_id": "c1", "request_id": "r",
              "run": 3, "seed": 5, "model": "m"}
    body = {"x": ["{run}", "{seed}x", "p{application}q", "", "plain", 1, None,
                  {"y": "{model}", "z": "{unknown}"}], "t": ("{run}",)}
    assert fill_body(body, values) == {
        "x": [3, "5x", "pa c1 bq", "", "plain", 1, None, {"y": "m", "z": "{unknown}"}],
        "t": ("{run}",)}


@pytest.mark.parametrize("payload", [
    '{"technical_skills": 7, "experience": 20, "model": "m"}',
    '  {"technical_skills": 7, "experience": 20}\n',
    '{"technical_skills": 70, "experience": 20}',
    '{"technical_skills": 7}',
    '"{\\"technical_skills\\": 7, \\"experience\\": 20}"',
    '[{"technical_skills": 7, "experience": 20}]',
    'Scores: {"technical_skills": 7, "experience": 20}',
])
def test_parse_of_an_answer_the_adapter_decoded_already_is_the_parse_of_its_text(payload):
    from core.screeners.base import RawResult
    from core.screeners.http_json import HttpJsonScreener

    screener = HttpJsonScreener(url="http://127.0.0.1:1/score", model="m", criteria=RUBRIC)

    def outcome(raw: RawResult) -> object:
        try:
            return screener.parse(raw)
        except ParseError as exc:
            return (type(exc).__name__, str(exc))

    plain = RawResult(payload=payload)
    memo = RawResult(payload=payload)
    try:
        doc = json.loads(payload)
    except json.JSONDecodeError:
        doc = None
    if type(doc) is dict:
        memo.decoded = (payload, doc)
    assert outcome(memo) == outcome(plain)
    other = RawResult(payload=payload)
    other.decoded = ("{}", {"technical_skills": 1, "experience": 1})   # not this payload's
    assert outcome(other) == outcome(plain)
