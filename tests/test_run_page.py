"""AppTest of the Run page's console: screener form, estimate + pre-flight, price table, run.

The screener is configured through the page against the real HTTP fake server
(``tests/fakeserver.py``, OpenAI shape); the background run lives in the process-wide registry,
and since AppTest cannot fire ``run_every`` the tests rerun the script until the handle ends.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core.demo import demo_freeze_sheet
from core.estimate import audit_estimate
from core.format import money
from core.ingest import criteria_frame
from core.runner import registry
from core.screeners.base import render_template, rubric_text
from core.screeners.openai_chat import DEFAULT_PROMPT, DEFAULT_SYSTEM
from core.screeners.registry import build_screener
from core.store import Store
from tests.apptest_helpers import app_on, app_store, open_page, plain
from tests.fakeserver import FakeServer

TIMEOUT = 60
ROOT = Path(__file__).resolve().parents[1]
KEY_ENV = "RUNPAGE_TEST_API_KEY"
KEY = "sk-runpage-9f8QzXsecretVALUE-000111222333"


@pytest.fixture()
def db(tmp_path, monkeypatch):
    path = tmp_path / "audits.duckdb"
    monkeypatch.setenv("AUDIT_DB", str(path))
    return path


@pytest.fixture()
def server():
    with FakeServer() as srv:
        yield srv


_store = app_store
_app_on = app_on
_open = open_page
_plain = plain


def _button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _wait_for_run(at: AppTest, audit_id: str, timeout: float = 30.0) -> None:
    """Rerun the page until the registry's handle has ended (AppTest cannot fire run_every)."""
    t0 = time.monotonic()
    while True:
        h = registry().get(audit_id)
        assert h is not None, "no run was started"
        if not h.running:
            break
        assert time.monotonic() - t0 < timeout, "the run did not end in time"
        time.sleep(0.1)
        at.run()
    at.run()  # the page as the user sees it once the run has ended
    assert not at.exception, at.exception


def _all_text(at: AppTest) -> str:
    """Every element's proto (labels, values, defaults, table bytes) and the session state."""
    out: list[str] = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    out.append(repr(at.session_state.to_dict()))
    return "\n".join(out)


def _make_audit(db: Path, audit_id: str, *, k: int = 8, settings: dict | None = None) -> None:
    """An audit with the demo's frozen sheet and ``k`` candidates with application text,
    saved through core before the app opens the file."""
    sheet = demo_freeze_sheet()
    store = Store(db)
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {"runs": 4, **(settings or {})})
    store.set_criteria(audit_id, criteria_frame(list(sheet.criteria)))
    store.set_candidates(audit_id, pd.DataFrame({
        "candidate_id": [f"c{i:02d}" for i in range(k)],
        "stratum": ["band"] * (k - 2) + ["high", "low"],
        "first_pass_score": [65.0 + i for i in range(k)],
        "application": [f"Application {i}: {i + 2} years of Go, led a payments migration. " * 3
                        for i in range(k)]}))
    store.close()


def _fill_openai_form(at: AppTest, audit_id: str, *, base_url: str,
                      key_env: str | None = None, prompt: str | None = None) -> AppTest:
    at.selectbox(key=f"scr-{audit_id}-kind").set_value("openai-chat").run()
    assert not at.exception, at.exception
    k = f"scr-{audit_id}-openai-chat"
    at.text_input(key=f"{k}-base_url").set_value(base_url)
    if key_env is not None:
        at.text_input(key=f"{k}-api_key_env").set_value(key_env)
    if prompt is not None:
        at.text_area(key=f"{k}-prompt").set_value(prompt)
    _button(at, "Save the screener").click().run()
    assert not at.exception, at.exception
    return at


# ---------------------------------------------------------------------------- (a) end to end
def test_openai_screener_saved_preflighted_and_run_to_exactly_n_draws(db, server, monkeypatch):
    """A new audit from the demo's sheet, its sample saved on the Sample page; the screener
    configured on the Run page against the OpenAI-shaped fake server; pre-flight; run."""
    monkeypatch.setenv(KEY_ENV, KEY)
    audit_id = "rp-e2e"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.text_input[0].set_value(audit_id)          # Freeze: new audit from this sheet
    _button(at, "Create the audit").click().run()
    at = _open(_app_on(audit_id), "sample")
    _button(at, "Save this sample to the audit").click().run()
    at = _open(at, "run")
    store = _store()
    assert len(store.get_candidates(audit_id)) == 40

    at = _fill_openai_form(at, audit_id, base_url=server.url + "/v1", key_env=KEY_ENV)
    assert any(s.value.startswith("Screener saved") for s in at.success)
    settings = store.get_audit(audit_id)["settings"]
    assert settings["screener"]["kind"] == "openai-chat"
    assert settings["screener"]["base_url"] == server.url + "/v1"
    assert settings["screener"]["api_key_env"] == KEY_ENV
    assert KEY not in json.dumps(settings)

    # one estimate: the Sample page and the Run page show the same numbers for the same audit
    run_page = _metrics(_open(_app_on(audit_id), "run"))
    sample_page = _metrics(_open(_app_on(audit_id), "sample"))
    assert run_page["Calls to make"] == "600"
    for label in ("Calls to make", "Input tokens", "Output tokens", "Cost", "Wall time"):
        assert run_page[label] == sample_page[label], label
    at = _open(_app_on(audit_id), "run")
    at.number_input(key=f"run-{audit_id}-runs").set_value(3).run()
    m = _metrics(at)
    assert m["Calls to make"] == "120"
    assert m["Wall time"] == "30 s"               # ⌈120 / 8⌉ × the default 2 s, said so
    caption = " ".join(_plain(c.value) for c in at.caption)
    assert "2.00 s a call, a default until the pre-flight measures it" in caption
    assert "assumed 1,500 a call: the sample holds no application text" in caption
    assert "Worst case: 360 calls" in caption     # 120 pairs × 3 calls each
    assert f"the API key in the variable {KEY_ENV} is sent to 127.0.0.1:{server.port} only" \
        in caption
    assert server.arrivals == 0                   # nothing is called before the user asks

    _button(at, "Run the 3-run pre-flight").click().run()
    _wait_for_run(at, audit_id)
    assert server.arrivals == 3
    m = _metrics(at)
    assert m["Calls to make"] == "117"
    assert re.fullmatch(r"\d+(\.\d)? s", m["Wall time"]), m["Wall time"]
    assert any("measured by the pre-flight" in _plain(c.value) for c in at.caption)
    assert any(s.value.startswith("Pre-flight done") for s in at.success)
    # the audit has draws: the screener is frozen, shown read-only
    assert not [b for b in at.button if b.label == "Save the screener"]
    summary = next(d.value for d in at.dataframe if list(d.value.columns) == ["setting", "value"])
    assert server.url + "/v1" in summary["value"].tolist()

    _button(at, "Start the run").click().run()
    _wait_for_run(at, audit_id)
    draws = store.load_draws(audit_id)
    per_candidate = draws[draws["criterion"] == "total"].groupby("candidate_id").size()
    assert len(per_candidate) == 40 and set(per_candidate) == {3}
    assert any("Every candidate has its 3 runs (120 draws)" in s.value for s in at.success)
    assert _metrics(at)["Calls stored"] == "120"
    # the key named by the variable did reach the server, and nowhere else
    assert server.log[-1].headers.get("authorization") == f"Bearer {KEY}"
    assert KEY not in _all_text(at)


def estimate_by_hand(cands: pd.DataFrame, calls: int, p_in: float, p_out: float) -> float:
    values = {"rubric": rubric_text(demo_freeze_sheet().criteria), "application": "",
              "candidate_id": "", "request_id": "0" * 32}
    overhead = len(render_template(DEFAULT_PROMPT, values)) + len(
        render_template(DEFAULT_SYSTEM, values))
    mean_app = cands["application"].str.len().mean()
    per_in = -(-(overhead + mean_app) // 4)
    return calls * (per_in * p_in + (30 + 12 * 4) * p_out) / 1e6


# ---------------------------------------------------------------------------- (b) prices
def test_price_table_edit_is_saved_and_drives_the_estimated_cost(db, server):
    audit_id = "rp-prices"
    base = server.url + "/v1"
    _make_audit(db, audit_id, settings={"screener": {"kind": "openai-chat", "base_url": base}})
    at = _open(_app_on(audit_id), "run")
    model = demo_freeze_sheet().model
    assert _metrics(at)["Cost"] == "—"            # no price for the frozen model yet
    assert any(f"no price for '{model}'" in _plain(c.value) for c in at.caption)
    editor = at.data_editor[0]
    assert editor.value["model"].tolist() == [model]  # its row is offered, empty

    at.session_state[editor.key] = {"edited_rows": {0: {"input": 2.5, "output": 10.0,
                                                        "cached_input": 0.25}},
                                    "added_rows": [], "deleted_rows": []}
    _button(at, "Save the prices").click().run()
    assert not at.exception, at.exception
    store = _store()
    saved = store.get_audit(audit_id)["settings"]["prices"]
    assert saved == {model: {"input": 2.5, "output": 10.0, "cached_input": 0.25}}
    expected = audit_estimate(store.get_audit(audit_id)["settings"], frozen_model=model,
                              criteria=demo_freeze_sheet().criteria,
                              candidates=store.get_candidates(audit_id), runs=4).cost
    # by hand: 32 calls × (⌈(template + application characters) / 4⌉ input at $2.5/M +
    # 78 output at $10/M) — the applications are measured, not assumed
    cands = store.get_candidates(audit_id)
    assert expected == pytest.approx(estimate_by_hand(cands, 32, 2.5, 10.0))
    assert expected and _metrics(at)["Cost"] == money(expected)

    # a higher price → a higher cost, proportionally
    editor = at.data_editor[0]
    at.session_state[editor.key] = {"edited_rows": {0: {"input": 25.0, "output": 100.0}},
                                    "added_rows": [], "deleted_rows": []}
    _button(at, "Save the prices").click().run()
    assert _metrics(at)["Cost"] == money(expected * 10)

    # a row with a model but only one price is refused, and nothing changes
    editor = at.data_editor[0]
    at.session_state[editor.key] = {"edited_rows": {},
                                    "added_rows": [{"model": "other-model", "input": 1.0}],
                                    "deleted_rows": []}
    _button(at, "Save the prices").click().run()
    assert any(_plain(e.value).startswith("The prices were not saved: price table, row 2 "
                                          "('other-model'): give both") for e in at.error)
    assert store.get_audit(audit_id)["settings"]["prices"][model]["input"] == 25.0
    assert "other-model" not in store.get_audit(audit_id)["settings"]["prices"]
    assert server.arrivals == 0


# ---------------------------------------------------------------------------- (c) form errors
@pytest.mark.parametrize(("case", "fields", "says"), [
    ("missing base URL", {"base_url": ""}, "the openai-chat screener needs base_url"),
    ("no {application}", {"prompt": "Score this candidate please."},
     "the prompt template has no {application} placeholder"),
    ("a key in the name field", {"key_env": KEY},
     "'API key variable' takes the name of an environment variable"),
    ("variable not set", {"key_env": "RUNPAGE_UNSET_VARIABLE"},
     "the API key variable 'RUNPAGE_UNSET_VARIABLE' is not set"),
    ("plain http to another host", {"base_url": "http://10.1.2.3:8080/v1"},
     "'base_url' uses plain http:// to 10.1.2.3"),
    ("credentials in the URL", {"base_url": "https://u:pw@api.example.com/v1"},
     "'base_url' carries credentials"),
])
def test_form_error_is_a_sentence_and_saves_nothing(db, server, case, fields, says):
    audit_id = f"rp-err-{abs(hash(case)) % 10_000}"
    _make_audit(db, audit_id)
    at = _open(_app_on(audit_id), "run")
    store = _store()
    before = store.get_audit(audit_id)["settings"]
    at = _fill_openai_form(at, audit_id, base_url=fields.get("base_url", server.url + "/v1"),
                           key_env=fields.get("key_env"), prompt=fields.get("prompt"))
    errors = [_plain(e.value) for e in at.error]
    assert any(e.startswith("The screener was not saved: " + says) for e in errors), errors
    assert not any(s.value.startswith("Screener saved") for s in at.success)
    assert store.get_audit(audit_id)["settings"] == before
    assert KEY not in "\n".join(errors)
    assert "Traceback" not in _all_text(at)


def test_a_model_other_than_the_frozen_one_is_saved_with_a_warning(db, server):
    audit_id = "rp-model"
    _make_audit(db, audit_id)
    at = _open(_app_on(audit_id), "run")
    at.selectbox(key=f"scr-{audit_id}-kind").set_value("openai-chat").run()
    k = f"scr-{audit_id}-openai-chat"
    at.text_input(key=f"{k}-base_url").set_value(server.url + "/v1")
    at.text_input(key=f"{k}-model").set_value("gpt-other-latest")
    _button(at, "Save the screener").click().run()
    frozen = demo_freeze_sheet().model
    warnings = [_plain(w.value) for w in at.warning]
    assert any(f"'gpt-other-latest', but the frozen sheet says '{frozen}'" in w
               for w in warnings), warnings
    assert _store().get_audit(audit_id)["settings"]["screener"]["model"] == "gpt-other-latest"


# ---------------------------------------------------------------------------- (d) the key
def test_api_key_never_shown_nor_stored_even_when_the_server_echoes_it(db, monkeypatch):
    """The server answers 401 quoting the credentials it got: the finding is shown, the key
    is not — not in any element, the session state, or the database file."""
    monkeypatch.setenv(KEY_ENV, KEY)
    audit_id = "rp-key"
    _make_audit(db, audit_id)
    with FakeServer(status_override=401, echo_auth_on_error=True) as srv:
        at = _open(_app_on(audit_id), "run")
        at = _fill_openai_form(at, audit_id, base_url=srv.url + "/v1", key_env=KEY_ENV)
        assert any(s.value.startswith("Screener saved") for s in at.success)
        _button(at, "Run the 3-run pre-flight").click().run()
        _wait_for_run(at, audit_id)
        assert srv.log and srv.log[0].headers.get("authorization") == f"Bearer {KEY}"
    warnings = [_plain(w.value) for w in at.warning]
    assert any(w.startswith("Finding: HTTP 401") and "[redacted]" in w for w in warnings), \
        warnings
    assert KEY not in _all_text(at)
    # no draw: the form stays editable, so the user can fix the key and try again
    assert [b for b in at.button if b.label == "Save the screener"]
    store = _store()
    calls = store.load_calls(audit_id, with_payload=True)
    failed = calls[calls["status"] == "error"]    # the others were cancelled by the stop
    assert len(failed) >= 1
    assert failed["raw_payload"].str.contains("[redacted]", regex=False).all()
    stored = calls.astype(str).to_csv() + json.dumps(store.get_audit(audit_id), default=str)
    assert KEY not in stored
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))  # file + WAL
    assert KEY.encode() not in raw


# ---------------------------------------------------------------------------- (e) cache guard
def test_a_cached_screener_blocks_at_the_preflight(db):
    audit_id = "rp-cache"
    _make_audit(db, audit_id)
    with FakeServer(cache=True) as srv:
        at = _open(_app_on(audit_id), "run")
        at = _fill_openai_form(at, audit_id, base_url=srv.url + "/v1")
        _button(at, "Run the 3-run pre-flight").click().run()
        _wait_for_run(at, audit_id)
        assert srv.arrivals == 3
    blocked = [_plain(e.value) for e in at.error if "Blocked by a guard" in e.value]
    assert blocked and "deterministic or cached" in blocked[0]
    # the pre-flight is 3 calls of one candidate: the cache guard of the whole sample does not
    # speak yet (it needs two calls per candidate); the pre-flight's block says it all
    assert any("Cache guard: not judged yet: 1 of 8 candidate(s)" in _plain(c.value)
               for c in at.caption)
    assert _button(at, "Start the run").disabled


# ---------------------------------------------------------------------------- issue 12: code
def test_code_running_kinds_are_offered_only_when_the_operator_enables_them(db, monkeypatch):
    audit_id = "rp-kinds"
    _make_audit(db, audit_id)
    monkeypatch.delenv("AUDIT_ALLOW_CODE_SCREENERS", raising=False)
    at = _open(_app_on(audit_id), "run")
    options = at.selectbox(key=f"scr-{audit_id}-kind").options
    assert not any("command-line" in o or "Python function" in o for o in options)
    monkeypatch.setenv("AUDIT_ALLOW_CODE_SCREENERS", "1")
    at = _open(_app_on(audit_id), "run")
    options = at.selectbox(key=f"scr-{audit_id}-kind").options
    assert any("command-line" in o for o in options) and any("Python" in o for o in options)


def test_a_saved_command_screener_from_a_database_file_never_runs(db, tmp_path, monkeypatch):
    """A .duckdb received from someone else carries a command screener: the page names it,
    builds nothing, and no button can run it."""
    monkeypatch.delenv("AUDIT_ALLOW_CODE_SCREENERS", raising=False)
    marker = tmp_path / "marker"
    script = tmp_path / "evil.py"
    script.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    audit_id = "rp-evil"
    _make_audit(db, audit_id, settings={"screener": {
        "kind": "command", "command": [sys.executable, str(script)]}})
    at = _open(_app_on(audit_id), "run")
    errors = " ".join(_plain(e.value) for e in at.error)
    assert "runs code on this machine" in errors and "AUDIT_ALLOW_CODE_SCREENERS" in errors
    assert not [b for b in at.button if b.label == "Run the 3-run pre-flight"]
    assert _button(at, "Start the run").disabled
    assert not marker.exists()


# ---------------------------------------------------------------------------- issue 8
def test_saving_the_screener_freezes_the_answer_format_in_the_sheet(db, server):
    audit_id = "rp-sheet"
    _make_audit(db, audit_id)
    at = _open(_app_on(audit_id), "run")
    old_hash = _store().get_audit(audit_id)["harness_hash"]
    at = _fill_openai_form(at, audit_id, base_url=server.url + "/v1")
    audit = _store().get_audit(audit_id)
    assert audit["freeze"]["response_format"] == "json_schema"
    assert audit["freeze"]["max_tokens"] == 512 and audit["freeze"]["on_invalid"] == "recall"
    assert audit["freeze"]["answer_schema"]["properties"]["experience"]["maximum"] == 20
    assert audit["harness_hash"] != old_hash


def test_a_screener_answering_in_prose_is_stopped_and_the_page_says_why(db):
    audit_id = "rp-prose"
    _make_audit(db, audit_id, k=10)
    with FakeServer(answer="prose") as srv:
        at = _open(_app_on(audit_id), "run")
        at.selectbox(key=f"scr-{audit_id}-kind").set_value("openai-chat").run()
        k = f"scr-{audit_id}-openai-chat"
        at.text_input(key=f"{k}-base_url").set_value(srv.url + "/v1")
        at.selectbox(key=f"{k}-response_format").set_value("json_object")
        _button(at, "Save the screener").click().run()
        at.number_input(key=f"run-{audit_id}-runs").set_value(15).run()
        _button(at, "Start the run").click().run()
        _wait_for_run(at, audit_id)
        assert srv.arrivals <= 20 + 8                 # stopped early, not 150 × 3 calls
    text = " ".join(_plain(e.value) for e in at.error)
    assert "Stopped by the circuit breaker" in text and "response_format" in text
    caption = " ".join(_plain(c.value) for c in at.caption)
    assert "Invalid answers:" in caption and "parse error" in caption
    assert "Traceback" not in _all_text(at)


def test_invalid_answer_rates_on_the_criteria_page_and_in_every_report_format(db):
    """A screener whose answers are often unparseable, re-called: the Criteria page and each
    report format give the rate overall, by kind and per candidate, and warn that the draws
    are conditioned on validity (re-calls above 5% of calls)."""
    import asyncio

    from core.audit import analyze
    from core.report import render
    from core.runner import Runner, RunOptions
    audit_id = "rp-invalid"
    _make_audit(db, audit_id, k=8)
    store = Store(db)
    sheet = demo_freeze_sheet()
    with FakeServer(pmalformed=0.3, seed=4) as srv:
        scr = build_screener("openai-chat", {"base_url": srv.url + "/v1"},
                             criteria=sheet.criteria, sheet=sheet)
        st = asyncio.run(Runner(store, audit_id, scr, RunOptions(
            runs=4, preflight=False, max_calls_per_pair=6, backoff_base_s=0.01,
            flush_s=0.05, breaker=False)).run())
    assert st.done == 32
    result = analyze(store, audit_id)
    inv = result.invalid
    store.close()
    assert inv.measured and inv.by_kind["parse_error"] == inv.invalid > 0
    assert inv.rate == pytest.approx(inv.invalid / inv.answered)
    assert inv.conditioned
    for fmt in ("text", "md", "json", "html"):
        out = render(result, fmt)
        assert "lower bound" in out, fmt
        assert f"{inv.invalid} of {inv.answered} answers" in out or fmt == "json", fmt
    assert '"by_kind"' in render(result, "json")
    at = _open(_app_on(audit_id), "criteria")
    caption = " ".join(_plain(c.value) for c in at.caption)
    assert f"{inv.invalid} of {inv.answered} answers" in caption
    assert "Per candidate:" in caption
    assert any("lower bound" in _plain(w.value) for w in at.warning)


def test_the_command_line_and_the_run_page_give_the_same_estimate(db):
    """One estimate: `run --estimate` on a config and the Run page of the audit it saved show
    the same calls, tokens and worst case (template files and applications measured alike)."""
    import os
    import subprocess
    res = subprocess.run([sys.executable, "-m", "core", "run", "--config",
                          str(ROOT / "examples" / "audit-openai.toml"), "--db", str(db),
                          "--estimate"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stderr.splitlines() if x.startswith("estimate:"))
    calls, tin, tout = re.search(r"estimate: (\d+) calls, ~([\d,]+) input and ~([\d,]+) output",
                                 line).groups()
    worst = re.search(r"worst case: ([\d,]+) calls", res.stderr).group(1)
    at = _open(_app_on("eng-2291-qwen"), "run")
    m = _metrics(at)
    assert (m["Calls to make"], m["Input tokens"], m["Output tokens"]) == (calls, tin, tout)
    caption = " ".join(_plain(c.value) for c in at.caption)
    assert f"Worst case: {worst} calls" in caption
    assert "from the applications and the prompt" in caption


def test_the_sheet_follows_criteria_edited_after_the_screener_was_saved(db, server):
    """Criteria maxima changed on the Freeze page after the screener was saved: before the
    first draw the Run page re-freezes the schema from the current criteria."""
    import dataclasses

    from core.freeze import Criterion
    audit_id = "rp-resync"
    _make_audit(db, audit_id)
    _fill_openai_form(_open(_app_on(audit_id), "run"), audit_id, base_url=server.url + "/v1")
    store = _store()
    frozen = store.get_audit(audit_id)["freeze"]
    assert frozen["answer_schema"]["properties"]["experience"]["maximum"] == 20
    sheet = dataclasses.replace(
        demo_freeze_sheet(), criteria=(Criterion("technical_skills", 35.0),
                                       Criterion("experience", 40.0)),
        **{k: frozen[k] for k in ("response_format", "schema_style", "answer_schema",
                                  "max_tokens", "on_invalid")})
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash)   # what the Freeze page would save
    _open(_app_on(audit_id), "run")
    schema = _store().get_audit(audit_id)["freeze"]["answer_schema"]
    assert schema["required"] == ["technical_skills", "experience"]
    assert schema["properties"]["experience"]["maximum"] == 40


def test_the_simulated_latency_field_and_the_estimate_agree_before_saving(db):
    """The form shows the latency the run will use, and the estimate says where it comes
    from: no '200 ms' in the field beside '0.0 s' in the estimate."""
    audit_id = "rp-simlat"
    _make_audit(db, audit_id)
    at = _open(_app_on(audit_id), "run")
    field = at.number_input(key=f"scr-{audit_id}-simulated-latency_ms")
    assert field.value == 0
    caption = " ".join(_plain(c.value) for c in at.caption)
    assert "0.00 s a call, the simulated screener's setting" in caption
    field.set_value(300)
    _button(at, "Save the screener").click().run()
    caption = " ".join(_plain(c.value) for c in at.caption)
    assert "0.30 s a call, the simulated screener's setting" in caption
    assert _metrics(at)["Wall time"] == "1.2 s"     # ⌈8 candidates × 4 runs / 8⌉ × 0.3 s
