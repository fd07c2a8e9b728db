"""The replication runner against a real HTTP server on 127.0.0.1 (tests/fakeserver.py).

No HTTP mocks: every call crosses TCP. Options are small (few candidates, short backoff) so the
whole file runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from core.errors import GuardError
from core.estimate import audit_estimate
from core.freeze import Criterion, FreezeSheet
from core.guards import cache_verdict_of, model_populations_of
from core.run.clients import make_client
from core.run.engine import Runner, plan_pairs
from core.run.handle import RunHandle, registry
from core.run.options import PriceTable, RunOptions
from core.run.status import StopToken
from core.run.writer import Writer
from core.screeners.http_json import HttpJsonScreener
from core.screeners.registry import build_screener
from core.screeners.simulated import SimulatedScreener
from core.store import Store
from tests.fakeserver import FakeServer
from tests.support import http_json_config

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = (Criterion("technical_skills", 30.0), Criterion("experience", 25.0),
          Criterion("projects", 25.0), Criterion("communication", 20.0))
FAST = dict(backoff_base_s=0.01, backoff_cap_s=0.05, batch_rows=20, flush_s=0.05)
SECRET = "sk-test-Q7x9ZZsecretKEY-1234567890"


def make_audit(store: Store, audit_id: str, *, model: str = "fake-model-1", k: int = 6,
               sampling: str = "not-exposed", temperature: float | None = None,
               side_effect_free: bool = True) -> FreezeSheet:
    sheet = FreezeSheet(req_id="ENG-1", model=model, sampling=sampling,
                        temperature=temperature, side_effect_free=side_effect_free,
                        result_cache_off=True, criteria=RUBRIC)
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {"cutoff": 60})
    store.set_criteria(audit_id, pd.DataFrame({
        "criterion": [c.name for c in RUBRIC], "position": range(len(RUBRIC)),
        "max_points": [c.max_points for c in RUBRIC], "weight": [1.0] * len(RUBRIC)}))
    store.upsert_candidates(audit_id, pd.DataFrame({
        "candidate_id": [f"c{i:02d}" for i in range(k)],
        "stratum": ["band"] * (k - 2) + ["high", "low"],
        "first_pass_score": [60.0 + i for i in range(k)],
        "application": [f"Application {i}: {i + 2} years of Go." for i in range(k)]}))
    return sheet


def run(store: Store, audit_id: str, screener, **opts) -> object:
    options = RunOptions(**{"runs": 5, "concurrency": 8, "preflight": False, **FAST, **opts})
    return asyncio.run(Runner(store, audit_id, screener, options).run())


def http_screener(srv: FakeServer, model: str = "fake-model-1", **kw) -> HttpJsonScreener:
    return HttpJsonScreener(url=srv.url + "/score", model=model, criteria=RUBRIC,
                            model_path="model", **kw)


def draws_per_candidate(store: Store, audit_id: str) -> dict[str, int]:
    d = store.load_draws(audit_id)
    return d[d.criterion == "total"].groupby("candidate_id").size().to_dict()


@pytest.fixture
def store():
    s = Store(":memory:")
    yield s
    s.close()


@pytest.fixture
def server():
    with FakeServer() as srv:
        yield srv


# ---------------------------------------------------------------------------- basics
def test_simulated_run_gives_exactly_n_draws_reproducibly(store):
    make_audit(store, "a", model="sim-screener-1")
    make_audit(store, "b", model="sim-screener-1")
    sim = SimulatedScreener(criteria=RUBRIC, seed=7)
    st = run(store, "a", sim, concurrency=8)
    assert st.state == "finished" and st.done == st.total == 30
    assert draws_per_candidate(store, "a") == {f"c{i:02d}": 5 for i in range(6)}
    assert len(store.load_draws("a")) == 30 * 5          # 4 criteria + total per draw
    run(store, "b", sim, concurrency=1, seed=99)         # other order, same (seed, cand, run)
    a = store.load_draws("a")[["candidate_id", "run", "criterion", "score"]]
    b = store.load_draws("b")[["candidate_id", "run", "criterion", "score"]]
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    calls = store.load_calls("a")
    assert calls["request_id"].is_unique and (calls["status"] == "ok").all()


def test_order_interleaves_candidates_in_seeded_rounds():
    pairs = plan_pairs(["a", "b", "c"], 3, seed=1)
    assert [r for _, r in pairs] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert pairs == plan_pairs(["c", "b", "a"], 3, seed=1)
    assert plan_pairs(["a", "b", "c"], 3, seed=1, completed={("a", 1)})[0][1] == 1
    assert ("a", 1) not in plan_pairs(["a", "b", "c"], 3, seed=1, completed={("a", 1)})


def test_request_ids_are_uuid4_hex_as_the_uuid_module_makes_them(monkeypatch):
    import random
    import uuid

    from core.run import clients
    monkeypatch.setattr(clients, "_IDS", random.Random(7))
    same = random.Random(7)
    for _ in range(2000):
        rid = clients.new_request_id()
        assert rid == uuid.UUID(int=same.getrandbits(128), version=4).hex
        assert len(rid) == 32 and uuid.UUID(hex=rid).version == 4


# ---------------------------------------------------------------------------- flaky server
def test_flaky_server_still_gives_exactly_n_draws_and_records_failures(store, server):
    server.set(p500=0.12, p429=0.08, retry_after_ms="10", pmalformed=0.12, pslow=0.04,
               slow_s=0.8, seed=3)
    make_audit(store, "f", k=8)
    st = run(store, "f", http_screener(server), runs=6, timeout_s=0.3, max_retries=8,
             max_calls_per_pair=8)
    assert st.state == "finished", st.message
    assert draws_per_candidate(store, "f") == {f"c{i:02d}": 6 for i in range(8)}
    calls = store.load_calls("f", with_payload=True)
    assert calls["request_id"].is_unique
    assert (calls["status"] == "parse_error").sum() > 0
    assert calls["attempts"].max() > 1 and st.retries > 0
    bad = calls[calls["status"] != "ok"]
    # failed calls are recorded with their payload and never become draws
    assert bad.loc[bad["status"] == "parse_error", "raw_payload"].str.contains("truncated").all()
    draws = store.load_draws("f")
    assert set(draws["request_id"]) <= set(calls.loc[calls["status"] == "ok", "request_id"])
    assert not set(draws["request_id"]) & set(bad["request_id"])
    # one ok call per pair: nothing double-counted
    ok = calls[calls["status"] == "ok"]
    assert not ok.duplicated(["candidate_id", "run"]).any()
    # the server saw every request id sent as a header, retries reuse it
    seen = Counter(e.request_id for e in server.log)
    assert set(calls["request_id"]) <= set(seen)


def test_retry_after_seconds_is_respected(store, server):
    server.set(first_attempt_429=True, retry_after="1")
    make_audit(store, "r", k=2)
    st = run(store, "r", http_screener(server), runs=2, concurrency=4)
    assert st.state == "finished" and st.retries == 4
    times: dict[str, list[float]] = {}
    for e in server.log:
        times.setdefault(e.request_id, []).append(e.t)
    gaps = [t[1] - t[0] for t in times.values()]
    assert len(gaps) == 4 and min(gaps) >= 1.0 and max(gaps) < 2.5
    assert (store.load_calls("r")["attempts"] == 2).all()


def test_retry_after_ms_takes_precedence(store, server):
    server.set(first_attempt_429=True, retry_after="5", retry_after_ms="200")
    make_audit(store, "m", k=2)
    t0 = time.monotonic()
    run(store, "m", http_screener(server), runs=2)
    assert time.monotonic() - t0 < 3.0
    times: dict[str, list[float]] = {}
    for e in server.log:
        times.setdefault(e.request_id, []).append(e.t)
    assert min(t[1] - t[0] for t in times.values()) >= 0.2


def test_other_4xx_is_a_finding_and_never_retried(store, server):
    server.set(status_override=401)
    make_audit(store, "x")
    st = run(store, "x", http_screener(server), concurrency=2)
    assert st.state == "stopped" and st.findings and "HTTP 401" in st.findings[0]
    calls = store.load_calls("x")
    assert (calls["attempts"] == 1).all() and len(calls) <= 2
    assert Counter(e.request_id for e in server.log).most_common(1)[0][1] == 1
    assert store.n_draws("x") == 0


def test_rpm_limit_spaces_requests(store, server):
    make_audit(store, "q", k=2)
    run(store, "q", http_screener(server), runs=3, rpm=600)   # one start every 0.1 s
    t = sorted(e.t for e in server.log)
    assert len(t) == 6 and t[-1] - t[0] >= 0.45


# ---------------------------------------------------------------------------- guards
def test_side_effect_clearance_is_required_before_any_call(store, server):
    make_audit(store, "s", side_effect_free=False)
    with pytest.raises(GuardError, match="side-effect"):
        run(store, "s", http_screener(server))
    assert server.log == [] and len(store.load_calls("s")) == 0


def test_cache_server_gives_the_cache_verdict_of(store, server):
    server.set(cache=True)
    make_audit(store, "c")
    run(store, "c", http_screener(server), runs=4)
    v = cache_verdict_of(store, "c")
    assert v.cache_test and "cache test, not a variance test" in v.message
    assert len(v.single_payload) == 6
    server.set(cache=False)
    make_audit(store, "v")
    run(store, "v", http_screener(server), runs=4)
    v2 = cache_verdict_of(store, "v")
    assert not v2.cache_test and v2.single_payload == ()


def test_the_cache_guard_waits_for_two_calls_per_candidate(store, server):
    """After the pre-flight (3 calls of one candidate) the guard does not speak for the
    other candidates: "every one of the 1 candidates got varying payloads" was premature."""
    make_audit(store, "wait")
    options = RunOptions(runs=4, concurrency=4, preflight=True, **FAST)
    asyncio.run(Runner(store, "wait", http_screener(server), options, until="preflight").run())
    v = cache_verdict_of(store, "wait")
    assert not v.cache_test and v.message.startswith("not judged yet: 1 of 6 candidate(s)")
    asyncio.run(Runner(store, "wait", http_screener(server), options).run())
    assert cache_verdict_of(store, "wait").message == \
        "every one of the 6 candidates got varying payloads"


def test_preflight_stops_a_deterministic_or_cached_screener(store, server):
    server.set(cache=True)
    make_audit(store, "p")
    with pytest.raises(GuardError, match="deterministic or cached"):
        run(store, "p", http_screener(server), preflight=True)
    assert len(server.log) == 3
    calls = store.load_calls("p")
    assert len(calls) == 3 and calls["candidate_id"].nunique() == 1
    # resuming does not call again: the verdict comes from the stored payloads
    with pytest.raises(GuardError):
        run(store, "p", http_screener(server), preflight=True)
    assert len(server.log) == 3


def test_preflight_passes_a_stochastic_screener_and_measures_latency(store, server):
    server.set(latency_ms=20)
    make_audit(store, "pl")
    options = RunOptions(runs=4, concurrency=4, preflight=True, **FAST)
    st = asyncio.run(Runner(store, "pl", http_screener(server), options, until="preflight").run())
    assert st.done == 3 and st.preflight_latency_s is not None and st.preflight_latency_s >= 0.02
    st = asyncio.run(Runner(store, "pl", http_screener(server), options).run())
    assert st.done == st.total == 24
    assert len(store.load_calls("pl")) == 24


def test_preflight_never_gives_a_candidate_more_runs_than_the_audit(store, server):
    """With 2 runs per candidate the pre-flight makes 2 calls, not 3: every candidate ends
    with exactly 2 draws."""
    make_audit(store, "p2")
    options = RunOptions(runs=2, concurrency=4, preflight=True, **FAST)
    st = asyncio.run(Runner(store, "p2", http_screener(server), options).run())
    assert st.done == st.total == 12
    assert set(draws_per_candidate(store, "p2").values()) == {2}


def test_a_server_reporting_another_model_from_the_start_stops_at_the_preflight(store,
                                                                               server):
    """llama.cpp's server reports its --alias (or the file name), not the id sent: caught by
    the pre-flight, before the whole run is spent on a second population."""
    server.set(model="qwen2.5-0.5b-instruct-q4_k_m.gguf")
    make_audit(store, "mm")
    with pytest.raises(GuardError, match="reports the model 'qwen2.5-0.5b-instruct-q4_k_m.gguf'"):
        run(store, "mm", http_screener(server), preflight=True)
    assert len(server.log) == 3


def test_a_different_reported_model_is_a_second_population(store, server):
    server.set(switch_model_after=12, switch_model="fake-model-1-2026-02-01")
    make_audit(store, "d")
    run(store, "d", http_screener(server), concurrency=1)
    pops = model_populations_of(store, "d")
    assert pops.split and "second population" in pops.message
    table = pops.table.set_index("model")
    assert table.loc["fake-model-1", "draws"] == 12
    assert table.loc["fake-model-1-2026-02-01", "draws"] == 18
    assert not table.loc["fake-model-1-2026-02-01", "frozen"]
    draws = store.load_draws("d")
    assert set(draws["model"]) == {"fake-model-1", "fake-model-1-2026-02-01"}


# ---------------------------------------------------------------------------- model APIs
def test_openai_shape_fenced_json_no_fixed_seed(store, server):
    server.set(fence=True)
    sheet = make_audit(store, "o", model="qwen2.5-7b-instruct-q4_k_m", sampling="settable",
                       temperature=0.1)
    scr = build_screener("openai-chat", {"base_url": server.url + "/v1"}, criteria=RUBRIC,
                         sheet=sheet)
    st = run(store, "o", scr, runs=3)
    assert st.state == "finished" and st.done == 18
    bodies = [e.body for e in server.log]
    assert all("seed" not in b for b in bodies)
    assert all(b["temperature"] == 0.1 and b["response_format"]["type"] == "json_schema"
               and b["max_tokens"] == 512 for b in bodies)
    calls = store.load_calls("o")
    assert (calls["input_tokens"] == 120).all() and (calls["cached_input_tokens"] == 64).all()
    # seed_per_draw: a different seed on every call, recorded
    make_audit(store, "o2", model="qwen2.5-7b-instruct-q4_k_m")
    server.log.clear()
    scr2 = build_screener("openai-chat", {"base_url": server.url + "/v1", "seed_per_draw": True},
                          criteria=RUBRIC, sheet=sheet)
    run(store, "o2", scr2, runs=3)
    seeds = [e.body["seed"] for e in server.log]
    assert len(set(seeds)) == len(seeds) == 18
    assert set(store.load_calls("o2")["seed"]) == set(seeds)


def test_anthropic_omits_sampling_for_cannot_be_set_models(store, server):
    sheet = make_audit(store, "an", model="claude-opus-4-7", sampling="cannot-be-set")
    scr = build_screener("anthropic", {"base_url": server.url}, criteria=RUBRIC, sheet=sheet)
    st = run(store, "an", scr, runs=2)
    assert st.state == "finished" and st.done == 12
    for e in server.log:
        assert e.path == "/v1/messages"
        assert not {"temperature", "top_p", "top_k"} & set(e.body)
        assert e.body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert e.headers["anthropic-version"] == "2023-06-01"
    calls = store.load_calls("an")
    assert (calls["cached_input_tokens"] == 90).all() and (calls["input_tokens"] == 120).all()
    assert set(store.load_draws("an")["model"]) == {"claude-opus-4-7"}


def test_anthropic_400_on_temperature_is_a_finding_not_retried(store, server):
    sheet = make_audit(store, "a4", model="claude-opus-4-7", sampling="settable",
                       temperature=0.0)
    scr = build_screener("anthropic", {"base_url": server.url}, criteria=RUBRIC, sheet=sheet)
    st = run(store, "a4", scr, concurrency=2)
    assert st.state == "stopped"
    assert any("temperature" in f and "not retried" in f for f in st.findings)
    assert all(e.status == 400 for e in server.log) and len(server.log) <= 2
    assert (store.load_calls("a4")["attempts"] == 1).all()
    assert store.n_draws("a4") == 0


# ---------------------------------------------------------------------------- stop / resume
def test_cancelling_in_flight_calls_does_not_exhaust_the_pool(store, server):
    async def scenario() -> list[str]:
        states = []
        async with make_client(RunOptions(concurrency=8, timeout_s=10.0)) as client:
            for cycle in range(3):
                server.set(latency_ms=3000)
                aid = f"cx{cycle}"
                make_audit(store, aid, k=8)
                stop = StopToken()
                opts = RunOptions(runs=4, concurrency=8, preflight=False, **FAST)
                runner = Runner(store, aid, http_screener(server), opts, client=client,
                                stop=stop)
                task = asyncio.create_task(runner.run())
                while server.arrivals < 8 * (cycle + 1) + 32 * cycle:
                    await asyncio.sleep(0.02)       # 8 requests in flight at the server
                stop.set()
                st = await task
                states.append(st.state)
                assert st.cancelled == 8
                server.set(latency_ms=0)
                aid2 = f"ok{cycle}"
                make_audit(store, aid2, k=8)
                st2 = await Runner(store, aid2, http_screener(server),
                                   RunOptions(runs=4, concurrency=8, preflight=False,
                                              timeout_s=5, **FAST), client=client).run()
                states.append(st2.state)
                assert st2.done == 32, st2.message
        return states

    states = asyncio.run(scenario())
    assert states == ["stopped", "finished"] * 3
    calls = store.load_calls("cx0")
    assert (calls["status"] == "cancelled").sum() == 8
    assert store.n_draws("cx0") == 0


def test_run_handle_stops_from_another_thread_and_resumes(store):
    make_audit(store, "h", model="sim-screener-1", k=10)
    sim = SimulatedScreener(criteria=RUBRIC, seed=1, latency_s=0.05)
    opts = RunOptions(runs=6, concurrency=4, preflight=False, **FAST)
    h = registry().start(store, "h", sim, opts)
    with pytest.raises(GuardError, match="already in progress"):
        registry().start(store, "h", sim, opts)
    while h.status().done < 8:
        time.sleep(0.01)
    h.stop()
    assert h.join(10)
    st = h.status()
    assert st.state == "stopped" and 8 <= st.done < 60 and st.cancelled > 0
    partial = draws_per_candidate(store, "h")
    assert sum(partial.values()) == st.done
    h2 = RunHandle(store, "h", sim, opts).start()
    assert h2.join(30)
    assert h2.status().state == "finished"
    assert draws_per_candidate(store, "h") == {f"c{i:02d}": 6 for i in range(10)}
    calls = store.load_calls("h")
    ok = calls[calls["status"] == "ok"]
    assert not ok.duplicated(["candidate_id", "run"]).any()




def test_sigkill_mid_run_then_resume_gives_exactly_n_draws(tmp_path, server):
    server.set(latency_ms=15, p500=0.1, echo_auth_on_error=True, seed=11)
    runs, k = 6, 12
    cfg = http_json_config(tmp_path, server.url, runs, k)
    db = tmp_path / "audit.duckdb"
    env = {**os.environ, "FAKE_SCREENER_KEY": SECRET, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "core.run_cli", "--config", str(cfg), "--db", str(db),
           "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while sum(1 for e in server.log if e.status == 200) < 30 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    out1, err1 = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    killed_at = sum(1 for e in server.log if e.status == 200)
    assert killed_at < runs * k
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    s = Store(db)
    try:
        assert draws_per_candidate(s, "kill") == {f"c{i:02d}": runs for i in range(k)}
        calls = s.load_calls("kill", with_payload=True)
        assert calls["request_id"].is_unique
        ok = calls[calls["status"] == "ok"]
        assert not ok.duplicated(["candidate_id", "run"]).any()
        draws = s.load_draws("kill")
        assert draws.groupby(["candidate_id", "run"])["request_id"].nunique().max() == 1
        errors = calls[calls["status"] == "error"]
        assert len(errors) and not errors["raw_payload"].str.contains(SECRET).any()
        assert errors["raw_payload"].str.contains("redacted").any()
    finally:
        s.close()
    # the key was sent to the server, yet is nowhere in the database file or the logs
    assert any(SECRET in e.headers.get("authorization", "") for e in server.log)
    assert SECRET.encode() not in db.read_bytes()
    wal = Path(str(db) + ".wal")
    assert not wal.exists() or SECRET.encode() not in wal.read_bytes()
    for text in (out1, err1, done.stdout, done.stderr):
        assert SECRET.encode() not in text


def _result(i: int) -> tuple[dict, list[dict]]:
    """One successful call row and its total draw, as the engine hands them to the writer."""
    rid = f"r{i:04d}"
    return ({"request_id": rid, "candidate_id": f"c{i:02d}", "run": 1, "attempts": 1,
             "status": "ok", "raw_payload": "{}", "source": "runner"},
            [{"candidate_id": f"c{i:02d}", "run": 1, "criterion": "total", "score": 50.0,
              "request_id": rid, "model": None, "clipped": False}])


def _wait_for_calls(store: Store, audit_id: str, n: int, within_s: float = 30.0) -> int:
    deadline = time.monotonic() + within_s
    while (got := len(store.load_calls(audit_id))) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def test_the_writer_writes_on_its_clock_without_being_asked(store):
    """What a kill -9 can lose is bounded by flush_s: results are written on the writer's clock,
    all those waiting in one transaction, with no flush() and no batch_rows reached."""
    make_audit(store, "w", k=3)
    writer = Writer(store, "w", batch_rows=1000, flush_s=0.5)
    try:
        for i in range(3):
            writer.put(*_result(i))
        assert _wait_for_calls(store, "w", 3) == 3
        assert writer.batches == 1 and writer.error is None
    finally:
        writer.close()
    assert len(store.load_draws("w")) == 3


def test_the_writer_wakes_early_when_batch_rows_results_wait(store):
    make_audit(store, "w", k=12)
    writer = Writer(store, "w", batch_rows=5, flush_s=60)
    try:
        for i in range(12):
            writer.put(*_result(i))
        assert _wait_for_calls(store, "w", 10) >= 10     # two full batches, long before 60 s
        writer.flush()                                   # and flush() writes the rest
        assert len(store.load_calls("w")) == 12
        assert writer.batches >= 3                       # never more than 5 in one
    finally:
        writer.close()


def test_ctrl_c_stops_cleanly_and_the_same_command_resumes(tmp_path, server):
    """SIGINT (Ctrl-C): exit 130 with 'run the same command again', no crash at exit, the
    in-flight calls recorded as cancelled; the same command then finishes with N draws each."""
    server.set(latency_ms=20, seed=3)
    runs, k = 6, 12
    cfg = http_json_config(tmp_path, server.url, runs, k)
    db = tmp_path / "audit.duckdb"
    env = {**os.environ, "FAKE_SCREENER_KEY": SECRET, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "core", "run", "--config", str(cfg), "--db", str(db),
           "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while sum(1 for e in server.log if e.status == 200) < 20 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    err = err.decode()
    assert proc.returncode == 130, err
    assert "run the same command again to resume" in err
    assert "Traceback" not in err and "FATAL" not in err and "terminate called" not in err
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    s = Store(db)
    try:
        assert draws_per_candidate(s, "kill") == {f"c{i:02d}": runs for i in range(k)}
        assert s.load_calls("kill")["request_id"].is_unique
    finally:
        s.close()


def test_api_key_never_in_errors_findings_or_store(tmp_path, server, monkeypatch):
    monkeypatch.setenv("FAKE_SCREENER_2_API_KEY", SECRET + "-b")
    server.set(status_override=401, echo_auth_on_error=True)
    db = tmp_path / "k.duckdb"
    s = Store(db)
    make_audit(s, "k")
    scr = build_screener("openai-chat", {"base_url": server.url + "/v1", "model": "fake-model-1",
                                         "api_key_env": "FAKE_SCREENER_2_API_KEY"}, criteria=RUBRIC)
    assert SECRET not in repr(scr) and SECRET not in str(scr.describe())
    st = run(s, "k", scr, concurrency=1)
    assert st.findings and "[redacted]" in st.findings[0]
    assert all(SECRET not in f for f in st.findings)
    calls = s.load_calls("k", with_payload=True)
    assert not calls["error"].str.contains(SECRET).any()
    assert not calls["raw_payload"].str.contains(SECRET).any()
    assert SECRET not in str(s.get_audit("k"))
    s.close()
    assert SECRET.encode() not in db.read_bytes()


# ---------------------------------------------------------------------------- estimates
def test_estimate_counts_missing_calls_tokens_cost_and_wall_time(store, server):
    make_audit(store, "e", model="qwen2.5-7b-instruct-q4_k_m")
    prices = PriceTable({"qwen2.5-7b-instruct-q4_k_m": {"input": 1.0, "output": 4.0}})
    settings = {"screener": {"kind": "openai-chat", "base_url": server.url + "/v1",
                             "model": "qwen2.5-7b-instruct-q4_k_m"}}
    cands = store.get_candidates("e")
    est = audit_estimate({**settings, "prices": prices.to_dict(), "latency_s": 2.0},
                         frozen_model="qwen2.5-7b-instruct-q4_k_m", criteria=RUBRIC,
                         candidates=cands, runs=15, completed={("c00", 1), ("c00", 2)},
                         concurrency=8)
    assert est.calls == 6 * 15 - 2
    assert est.wall_time_s == pytest.approx(11 * 2.0)      # ceil(88 / 8) · 2 s
    assert est.input_tokens > 0 and est.output_tokens == est.calls * (30 + 12 * 4)
    assert est.cost == pytest.approx((est.input_tokens * 1.0 + est.output_tokens * 4.0) / 1e6)
    assert any("estimate" in n for n in est.notes)
    none = audit_estimate(settings, frozen_model="qwen2.5-7b-instruct-q4_k_m", criteria=RUBRIC,
                          candidates=cands, runs=15, concurrency=8)
    # no price: no cost; no latency measured or typed: a default, said as such
    assert none.cost is None and "no price" in none.sources["cost"]
    assert "a default" in none.sources["latency"]
    assert PriceTable.from_dict(prices.to_dict()).to_dict() == prices.to_dict()


# ---------------------------------------------------------------------------- structured answers
def chat(srv: FakeServer, sheet: FreezeSheet, **opts) -> object:
    return build_screener("openai-chat", {"base_url": srv.url + "/v1", **opts},
                          criteria=RUBRIC, sheet=sheet)


@pytest.mark.parametrize("style,where", [
    ("openai", lambda b: b["response_format"]["json_schema"]["schema"]),
    ("json-object-schema", lambda b: b["response_format"]["schema"]),
    ("ollama", lambda b: b["format"]),
])
def test_the_rubric_goes_as_a_strict_schema_in_the_shape_the_server_takes(store, server, style,
                                                                          where):
    sheet = make_audit(store, "js")
    st = run(store, "js", chat(server, sheet, schema_style=style), runs=2)
    assert st.state == "finished" and st.done == 12
    schema = where(server.log[0].body)
    assert schema["required"] == [c.name for c in RUBRIC]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["experience"] == {"type": "integer", "minimum": 0,
                                                  "maximum": 25}
    assert all(e.body["max_tokens"] == 512 for e in server.log)
    if style == "openai":
        rf = server.log[0].body["response_format"]
        assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True


def test_a_fractional_maximum_gives_a_number_and_a_total_can_be_required():
    from core.screeners.schema import rubric_schema
    s = rubric_schema((Criterion("a", 10.0), Criterion("b", 2.5)), total=True)
    assert s["properties"]["a"]["type"] == "integer"
    assert s["properties"]["b"] == {"type": "number", "minimum": 0, "maximum": 2.5}
    assert s["required"] == ["a", "b", "total"]


def test_without_maxima_the_default_is_json_object_and_json_schema_is_refused(store, server):
    from core.errors import InputError
    no_max = (Criterion("a"), Criterion("b"))
    scr = build_screener("openai-chat", {"base_url": server.url + "/v1", "model": "m-1"},
                         criteria=no_max)
    assert scr.response_format == "json_object"
    with pytest.raises(InputError, match="max points"):
        build_screener("openai-chat", {"base_url": server.url + "/v1", "model": "m-1",
                                       "response_format": "json_schema"}, criteria=no_max)


def test_a_server_that_rejects_the_schema_stops_the_run_before_spending(store, server):
    server.set(reject_schema=True)
    sheet = make_audit(store, "rej", k=10)
    st = run(store, "rej", chat(server, sheet), runs=15, preflight=True)
    assert st.state == "stopped" and store.n_draws("rej") == 0
    assert len(server.log) <= 3                       # the pre-flight's calls at most
    assert "schema_style" in st.findings[0] and "response_format" in st.findings[0]
    assert "grammar" in st.findings[0]                # the server's own words


def test_truncated_and_refused_answers_are_their_own_kinds(store, server):
    sheet = make_audit(store, "tr", k=2)
    server.set(finish_reason="length")
    run(store, "tr", chat(server, sheet, max_tokens=64), runs=2, breaker=False)
    calls = store.load_calls("tr")
    assert set(calls["status"]) == {"truncated"} and store.n_draws("tr") == 0
    assert calls["error"].str.contains("max_tokens = 64").all()
    server.set(finish_reason="stop", refusal=True)
    make_audit(store, "rf", k=2)
    run(store, "rf", chat(server, sheet), runs=2, breaker=False)
    assert set(store.load_calls("rf")["status"]) == {"refused"}
    server.set(refusal=False, finish_reason="length")
    an = make_audit(store, "at", k=2, model="claude-haiku-4-5-20251001")
    scr = build_screener("anthropic", {"base_url": server.url}, criteria=RUBRIC, sheet=an)
    run(store, "at", scr, runs=2, breaker=False)
    assert set(store.load_calls("at")["status"]) == {"truncated"}


def test_anthropic_gets_a_forced_tool_whose_input_schema_is_the_rubric(store, server):
    sheet = make_audit(store, "tool", k=2, model="claude-haiku-4-5-20251001")
    scr = build_screener("anthropic", {"base_url": server.url}, criteria=RUBRIC, sheet=sheet)
    st = run(store, "tool", scr, runs=2)
    assert st.done == 4
    body = server.log[0].body
    assert body["tool_choice"] == {"type": "tool", "name": body["tools"][0]["name"]}
    assert body["tools"][0]["input_schema"]["required"] == [c.name for c in RUBRIC]


def test_content_null_from_llama_server_is_a_parse_error_not_a_broken_response(store, server):
    server.set(content_null=True)
    sheet = make_audit(store, "cn", k=2)
    run(store, "cn", chat(server, sheet), runs=2, breaker=False, max_calls_per_pair=1)
    calls = store.load_calls("cn")
    assert set(calls["status"]) == {"parse_error"}
    assert calls["error"].str.contains("empty answer").all()


# ---------------------------------------------------------------------------- circuit breaker
def test_a_screener_answering_in_prose_stops_early_with_one_paragraph(store, server):
    server.set(answer="prose")
    sheet = make_audit(store, "pr", k=10)
    st = run(store, "pr", chat(server, sheet, response_format="json_object"), runs=15,
             concurrency=4)
    assert st.state == "stopped" and st.breaker
    assert st.calls <= 20 + 4                          # the first 20, plus those in flight
    para = st.message
    assert para.startswith("Stopped by the circuit breaker")
    assert "Most failures are parse error" in para and "response_format" in para
    assert "This candidate looks" in para              # one raw answer, shortened
    assert "\n" not in para
    assert len(store.load_calls("pr")) == st.calls     # what was stored is kept


def test_the_breaker_trips_on_failures_in_a_row_and_can_be_turned_off(store, server):
    server.set(answer="invented")
    sheet = make_audit(store, "row", k=4)
    st = run(store, "row", chat(server, sheet), runs=5, concurrency=1,
             breaker_first_calls=1000, breaker_consecutive=6)
    assert st.state == "stopped" and "6 calls in a row failed" in st.breaker
    assert st.calls == 6
    make_audit(store, "off", k=2)
    st2 = run(store, "off", chat(server, sheet), runs=2, breaker=False, max_calls_per_pair=3)
    assert st2.state == "finished" and st2.calls == 2 * 2 * 3
    assert "4 parse error" in st2.message               # why each missing pair is missing


def test_the_preflight_respects_max_calls_per_pair(store, server):
    server.set(answer="prose")
    sheet = make_audit(store, "pf", k=3)
    run(store, "pf", chat(server, sheet), runs=3, preflight=True, breaker=False,
        max_calls_per_pair=2)
    per_pair = store.load_calls("pf").groupby(["candidate_id", "run"]).size()
    assert per_pair.max() == 2 and len(per_pair) == 9


# ---------------------------------------------------------------------------- on_invalid
def test_on_invalid_recall_clip_and_keep_as_failed(store, server):
    from core.invalid import invalid_answers
    server.set(answer="out_of_range")
    sheet = make_audit(store, "rc", k=2)
    run(store, "rc", chat(server, sheet, response_format="json_object"), runs=2, breaker=False,
        max_calls_per_pair=3, on_invalid="recall")
    calls = store.load_calls("rc")
    assert len(calls) == 12 and set(calls["status"]) == {"out_of_range"}
    inv = invalid_answers(calls, store.load_draws("rc"), "recall")
    assert inv.rate == 1.0 and inv.by_kind["out_of_range"] == 12 and inv.recalls == 8
    assert inv.conditioned and "lower bound" in inv.warning()

    make_audit(store, "kf", k=2)
    run(store, "kf", chat(server, sheet, response_format="json_object"), runs=2,
        breaker=False, max_calls_per_pair=3, on_invalid="keep-as-failed")
    calls = store.load_calls("kf")
    assert len(calls) == 4 and store.n_draws("kf") == 0
    inv = invalid_answers(calls, store.load_draws("kf"), "keep-as-failed")
    assert inv.recalls == 0 and not inv.conditioned

    make_audit(store, "cl", k=2)
    st = run(store, "cl", chat(server, sheet, response_format="json_object"), runs=2,
             breaker=False, on_invalid="clip")
    assert st.done == 4
    draws = store.load_draws("cl")
    crit = draws[draws["criterion"] != "total"]
    assert crit["clipped"].all()
    maxima = {c.name: c.max_points for c in RUBRIC}
    assert all(row.score == maxima[row.criterion] for row in crit.itertuples())
    inv = invalid_answers(store.load_calls("cl"), draws, "clip")
    assert inv.clipped == 4 and inv.invalid == 4 and inv.by_kind["out_of_range"] == 4


def test_invalid_rates_per_candidate_by_hand():
    from core.invalid import invalid_answers
    t = pd.Timestamp("2026-01-01")
    rows = [  # (candidate, run, status, minute)
        ("a", 1, "parse_error", 0), ("a", 1, "ok", 1), ("a", 2, "ok", 2),
        ("b", 1, "truncated", 0), ("b", 1, "refused", 1), ("b", 1, "ok", 2), ("b", 2, "ok", 3),
        ("b", 2, "error", 1), ("c", 1, "ok", 0), ("c", 2, "cancelled", 1)]
    calls = pd.DataFrame([{"request_id": f"r{i}", "candidate_id": c, "run": r, "status": s,
                           "started_at": t + pd.Timedelta(minutes=m), "source": "runner"}
                          for i, (c, r, s, m) in enumerate(rows)])
    draws = pd.DataFrame({"request_id": ["r8"], "clipped": [True]})
    inv = invalid_answers(calls, draws, "recall")
    assert inv.answered == 8 and inv.invalid == 4       # 3 kinds + 1 clipped answer of c
    assert inv.by_kind == {"parse_error": 1, "out_of_range": 1, "truncated": 1, "refused": 1}
    assert inv.calls == 9 and inv.recalls == 3
    per = inv.per_candidate.set_index("candidate_id")
    assert per.loc["b", "rate"] == pytest.approx(2 / 4)
    assert per.loc["a", "rate"] == pytest.approx(1 / 3)
    assert per.loc["c", "rate"] == pytest.approx(1.0)
    assert list(inv.per_candidate["candidate_id"]) == ["c", "b", "a"]


# ---------------------------------------------------------------------------- bounds
def test_a_deeply_nested_answer_is_a_parse_error_and_the_workers_live(store, server):
    server.set(answer="nested")
    sheet = make_audit(store, "nest", k=3)
    st = run(store, "nest", chat(server, sheet, response_format="none"), runs=2,
             breaker=False, max_calls_per_pair=1)
    assert st.state == "finished" and st.calls == 6
    calls = store.load_calls("nest")
    assert len(calls) == 6 and set(calls["status"]) == {"parse_error"}


def test_a_dripping_server_trips_the_call_deadline(store, server):
    server.set(drip_s=0.05)
    sheet = make_audit(store, "drip", k=2)
    st = run(store, "drip", chat(server, sheet), runs=2, timeout_s=5, call_deadline_s=0.5,
             max_calls_per_pair=1, breaker=False)
    calls = store.load_calls("drip")
    assert st.done == 0 and len(calls) == 4
    assert calls["error"].str.contains("call_deadline_s").all()


def test_a_huge_response_is_refused_while_it_streams(store, server):
    server.set(huge_bytes=3_000_000)
    sheet = make_audit(store, "big", k=2)
    run(store, "big", chat(server, sheet), runs=2, max_calls_per_pair=1, breaker=False,
        max_response_bytes=1_000_000)
    calls = store.load_calls("big", with_payload=True)
    assert calls["error"].str.contains("max_response_bytes").all()
    assert calls["raw_payload"].isna().all()


def test_retry_after_is_capped_in_total_per_call(store, server):
    server.set(first_attempt_429=True, retry_after="100000")
    make_audit(store, "ra", k=2)
    t0 = time.monotonic()
    run(store, "ra", http_screener(server), runs=2, retry_wait_total_s=5, max_calls_per_pair=1,
        breaker=False)
    assert time.monotonic() - t0 < 60                 # nothing waited 120 s
    calls = store.load_calls("ra")
    assert (calls["attempts"] == 1).all()
    assert calls["error"].str.contains("retry_wait_total_s").all()


def test_the_run_deadline_stops_and_says_why_pairs_are_missing(store, server):
    server.set(latency_ms=300)
    make_audit(store, "dl", k=6)
    st = run(store, "dl", http_screener(server), runs=10, concurrency=2, run_deadline_s=1.0)
    assert st.state == "stopped" and "run deadline" in st.message
    assert 0 < st.done < 60 and "not called" in st.message


@pytest.mark.parametrize("field,value", [("concurrency", 10_000_000), ("runs", 1e9),
                                         ("runs", 2.5), ("max_calls_per_pair", 0),
                                         ("timeout_s", float("inf")), ("on_invalid", "drop")])
def test_absurd_options_are_refused_before_anything_is_allocated(field, value):
    from core.errors import InputError
    with pytest.raises(InputError, match=field):
        RunOptions(**{field: value})


# ---------------------------------------------------------------------------- secrets
@pytest.mark.parametrize("transform", ["base64", "upper"])
def test_a_key_echoed_back_transformed_is_scrubbed(tmp_path, server, monkeypatch, transform):
    key = "sk-Transform" + transform + "Zq81xLowerUPPER77"
    monkeypatch.setenv("ECHO_SCREENER_API_KEY", key)
    server.set(status_override=401, echo_auth_on_error=True, echo_transform=transform)
    db = tmp_path / "t.duckdb"
    s = Store(db)
    sheet = make_audit(s, "tx")
    scr = chat(server, sheet, api_key_env="ECHO_SCREENER_API_KEY")
    st = run(s, "tx", scr, concurrency=1)
    import base64
    forms = [key, key.upper(), base64.b64encode(key.encode()).decode()]
    calls = s.load_calls("tx", with_payload=True)
    text = calls.astype(str).to_csv() + " ".join(st.findings)
    assert "[redacted]" in text and not any(f in text for f in forms)
    s.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("t.duckdb*"))
    assert not any(f.encode() in raw for f in forms)


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DATABASE_URL",
                                  "HOME"])
def test_a_variable_that_is_not_a_model_key_is_never_sent(server, monkeypatch, name):
    from core.errors import InputError
    monkeypatch.setenv(name, "value-that-must-not-leave-1234")
    with pytest.raises(InputError, match="does not look like a model API key"):
        build_screener("openai-chat", {"base_url": server.url + "/v1", "model": "m-1",
                                       "api_key_env": name}, criteria=RUBRIC)
    monkeypatch.setenv("AUDIT_API_KEY_ENV_ALLOW", f"OTHER,{name}")
    scr = build_screener("openai-chat", {"base_url": server.url + "/v1", "model": "m-1",
                                         "api_key_env": name}, criteria=RUBRIC)
    assert scr.key_destination() == (name, f"127.0.0.1:{server.port}")


@pytest.mark.parametrize("url,says", [
    ("https://user:pw@api.example.com/v1", "credentials"),
    ("https://api.example.com/v1?api-key=abc", "credentials"),
    ("https://api.example.com/v1?key=abc", "credentials"),
    ("http://api.example.com/v1", "plain http"),
    ("http://10.0.0.5:8080/v1", "plain http"),
    ("ftp://127.0.0.1/v1", r"http\(s\) URL"),
])
def test_unsafe_base_urls_are_refused(url, says):
    from core.errors import InputError
    with pytest.raises(InputError, match=says) as e:
        build_screener("openai-chat", {"base_url": url, "model": "m-1"}, criteria=RUBRIC)
    assert "abc" not in str(e.value) and "pw" not in str(e.value)
    build_screener("openai-chat", {"base_url": "http://localhost:8080/v1", "model": "m-1"},
                   criteria=RUBRIC)


# ---------------------------------------------------------------------------- code screeners
def _code_config(tmp: Path, screener: str) -> Path:
    (tmp / "sample.csv").write_text("candidate_id,application\nc1,a\nc2,b\n")
    cfg = tmp / "code.toml"
    cfg.write_text(textwrap.dedent("""
        [audit]
        id = "code"
        req_id = "ENG-9"
        [harness]
        model = "cli-model-1"
        side_effect_free = true
        result_cache_off = true
        [[criteria]]
        name = "skills"
        max = 10
        [screener]
        """) + screener + textwrap.dedent("""
        [run]
        runs = 2
        sample = "sample.csv"
        preflight = false
        """))
    return cfg


def _cli(cfg: Path, db: Path, *extra: str, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "core", "run", "--config", str(cfg), "--db",
                           str(db), "--no-progress", *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_a_command_screener_runs_nothing_without_allow_code(tmp_path):
    marker = tmp_path / "marker"
    (tmp_path / "screen.py").write_text(
        f"import json, pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "print(json.dumps({'skills': 5}))\n")
    argv = json.dumps([sys.executable, str(tmp_path / "screen.py")])
    cfg = _code_config(tmp_path, f'kind = "command"\ncommand = {argv}\n')
    db = tmp_path / "c.duckdb"
    refused = _cli(cfg, db, env={"AUDIT_ALLOW_CODE_SCREENERS": "1"})   # the app's switch only
    assert refused.returncode == 2 and not marker.exists()
    assert "--allow-code" in refused.stderr and "Traceback" not in refused.stderr
    allowed = _cli(cfg, db, "--allow-code")
    assert allowed.returncode == 0, allowed.stderr
    assert "will run on this machine: the program" in allowed.stderr
    assert marker.read_text() == "ran"


def test_a_python_screener_naming_os_system_runs_nothing_without_allow_code(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "sample.csv").write_text(f"candidate_id,application\nc1,touch {marker}\n"
                                         f"c2,touch {marker}\n")
    cfg = _code_config(tmp_path, 'kind = "python"\nfunction = "os:system"\n')
    (tmp_path / "sample.csv").write_text(f"candidate_id,application\nc1,touch {marker}\n"
                                         f"c2,touch {marker}\n")
    res = _cli(cfg, tmp_path / "p.duckdb")
    assert res.returncode == 2 and not marker.exists()
    assert "runs code on this machine" in res.stderr


def test_the_cli_says_which_host_receives_the_key_before_the_first_call(tmp_path, server):
    cfg = http_json_config(tmp_path, server.url, 2, 2)
    res = _cli(cfg, tmp_path / "h.duckdb", "--estimate",
               env={"FAKE_SCREENER_KEY": SECRET})
    assert res.returncode == 0, res.stderr
    assert (f"the API key in $FAKE_SCREENER_KEY is sent to 127.0.0.1:{server.port} only"
            in res.stderr)
    assert "worst case: 32 calls" in res.stderr         # 4 pairs × max_calls_per_pair 8
    assert server.arrivals == 0 and SECRET not in res.stderr


# ---------------------------------------------------------------------------- one estimate
def test_the_audit_estimate_states_its_sources_and_the_worst_case():
    cands = pd.DataFrame({"candidate_id": ["a", "b"], "application": ["x" * 400, "y" * 800]})
    settings = {"screener": {"kind": "openai-chat", "base_url": "http://127.0.0.1:1/v1",
                             "prompt": "{application}", "system": "", "max_tokens": 100},
                "prices": {"m-1": {"input": 1.0, "output": 4.0}}, "max_calls_per_pair": 3,
                "concurrency": 2}
    est = audit_estimate(settings, frozen_model="m-1", criteria=RUBRIC, candidates=cands,
                         runs=5, completed={("a", 1)})
    assert est.calls == 9 and est.whole_calls == 10
    per_in = (0 + 600) / 4                              # mean application, no template text
    assert est.input_tokens == 9 * per_in and est.output_tokens == 9 * 78
    assert est.cost == pytest.approx((9 * per_in * 1.0 + 9 * 78 * 4.0) / 1e6)
    assert est.worst_calls == 27
    assert est.worst_cost == pytest.approx((27 * per_in * 1.0 + 27 * 100 * 4.0) / 1e6)
    assert est.wall_time_s == 5 * 2.0                   # ⌈9 / 2⌉ × the 2 s default
    assert "a default until the pre-flight measures it" in est.sources["latency"]
    assert "from the applications" in est.sources["input tokens"]
    typed = audit_estimate({**settings, "latency_s": 3.0}, frozen_model="m-1",
                           criteria=RUBRIC, candidates=cands, runs=5)
    assert typed.wall_time_s == 5 * 3.0 and "typed" in typed.sources["latency"]
    measured = audit_estimate({**settings, "latency_s": 3.0, "preflight_latency_s": 0.5},
                              frozen_model="m-1", criteria=RUBRIC, candidates=cands, runs=5)
    assert measured.wall_time_s == 5 * 0.5 and "measured" in measured.sources["latency"]
    sim = audit_estimate({"screener": {"kind": "simulated", "latency_ms": 200},
                          "latency_s": 9.0}, frozen_model="m-1", criteria=RUBRIC,
                         candidates=40, runs=15)
    assert sim.cost == 0.0 and sim.calls == 600 and sim.wall_time_s == 75 * 0.2
    assert "assumed 1,500" in sim.sources["input tokens"]
    assert "no paid call" in sim.sources["cost"]


def test_a_default_openai_config_runs_to_a_report_that_shows_the_invalid_rate(tmp_path,
                                                                              server):
    """The issue's 'done when': a default config with criteria maxima, an OpenAI-compatible
    server whose answers are sometimes unusable → a finished audit, and the report (a second
    command) gives the invalid-answer rate."""
    server.set(pmalformed=0.35)
    cfg = http_json_config(tmp_path, server.url, 3, 6)
    text = cfg.read_text().replace('kind = "http-json"', 'kind = "openai-chat"').replace(
        f'url = "{server.url}/score"', f'base_url = "{server.url}/v1"').replace(
        'model_path = "model"\n', "").replace('api_key_env = "FAKE_SCREENER_KEY"\n', "")
    cfg.write_text(text)
    db = tmp_path / "r.duckdb"
    res = _cli(cfg, db)
    assert res.returncode == 0, res.stderr
    assert "invalid answers:" in res.stderr
    assert server.log[0].body["response_format"]["type"] == "json_schema"
    rep = subprocess.run([sys.executable, "-m", "core", "report", "--db", str(db), "--audit",
                          "kill", "--format", "text"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert rep.returncode == 0, rep.stderr
    section = rep.stdout[rep.stdout.index("INVALID ANSWERS"):]
    s = Store(db, read_only=True)
    calls = s.load_calls("kill")
    s.close()
    n_bad = int((calls["status"] == "parse_error").sum())
    n_answers = int(calls["status"].isin(["ok", "parse_error"]).sum())
    assert n_bad > 0, (calls["status"].value_counts(), section)
    assert f"invalid answers: {n_bad} of {n_answers} answers" in section


def test_a_run_that_would_send_another_schema_than_the_frozen_one_is_refused(store, server):
    import dataclasses
    sheet = make_audit(store, "stale")
    scr = chat(server, sheet)
    stale = dataclasses.replace(sheet, response_format="json_schema",
                                answer_schema={"type": "object", "properties": {}},
                                max_tokens=512, on_invalid="recall")
    store.save_audit("stale", stale.to_dict(), stale.hash)
    with pytest.raises(GuardError, match="answer_schema"):
        run(store, "stale", scr)
    assert server.arrivals == 0


def test_the_cli_stops_a_prose_screener_with_the_breaker_paragraph(tmp_path, server):
    server.set(answer="prose")
    cfg = http_json_config(tmp_path, server.url, 15, 12)
    text = cfg.read_text().replace('kind = "http-json"', 'kind = "openai-chat"').replace(
        f'url = "{server.url}/score"', f'base_url = "{server.url}/v1"\n'
        'response_format = "json_object"').replace('model_path = "model"\n', "").replace(
        'api_key_env = "FAKE_SCREENER_KEY"\n', "")
    cfg.write_text(text)
    res = _cli(cfg, tmp_path / "b.duckdb")
    assert res.returncode == 1, res.stderr
    assert "Stopped by the circuit breaker: 15 calls in a row failed" in res.stderr, \
        res.stderr[-1500:]
    assert "Most failures are parse error" in res.stderr and "response_format" in res.stderr
    assert server.arrivals <= 24 and "Traceback" not in res.stderr
    # a call already in flight when the breaker trips may still finish: 15 or a few more
    m = re.search(r"invalid answers: (\d+) of (\d+) answers \(100\.0%\); parse error (\d+)",
                  res.stderr)
    assert m and m.group(1) == m.group(2) == m.group(3) and 15 <= int(m.group(1)) <= 18
    assert "Pairs without a draw:" in res.stderr and "not called" in res.stderr


def test_a_small_run_against_a_failing_server_is_judged_on_its_first_calls(store, server):
    """6 pairs (fewer than the 20-call window) against a server that always fails: the breaker
    judges the first call of each pair instead of letting every pair spend its calls."""
    server.set(status_override=503)
    make_audit(store, "small", k=3)
    st = run(store, "small", http_screener(server), runs=2, concurrency=1, max_retries=0,
             max_calls_per_pair=3)
    assert st.state == "stopped" and st.breaker
    assert "6 of the first 6 calls failed" in st.breaker
    assert st.calls == 6 and "HTTP 503" in st.breaker


# ---------------------------------------------------------------------------- progress
def test_the_run_command_shows_a_live_bar_on_a_terminal_and_plain_lines_otherwise(tmp_path,
                                                                                  server):
    """On a terminal: rich's live bar with the engine's ETA. Piped (logs, CI): plain lines
    with no control sequence at all, ending with the final count."""
    import pty

    server.set(latency_ms=20)
    cfg = http_json_config(tmp_path, server.url, 3, 4)
    env = {**os.environ, "FAKE_SCREENER_KEY": SECRET, "PYTHONPATH": str(ROOT),
           "COLUMNS": "120", "TERM": "xterm"}
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "core", "run", "--config", str(cfg), "--db",
                             str(tmp_path / "tty.duckdb")], cwd=ROOT, env=env,
                            stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:          # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, shown
    assert "━" in shown and "ETA" in shown and "12/12" in shown
    assert "finished: all pairs have a draw" in shown

    piped = subprocess.run([sys.executable, "-m", "core", "run", "--config", str(cfg), "--db",
                            str(tmp_path / "pipe.duckdb")], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "\x1b" not in piped.stderr and "━" not in piped.stderr
    assert "] 12/12 100%" in piped.stderr


def test_the_config_reader_loads_the_run_options_without_the_engine():
    """core.config needs RunOptions and PriceTable only: the engine, its retry library and its
    writer thread stay unloaded (issue 10: no importer pulls the whole runner for two types)."""
    code = ("import sys, core.config; "
            "print(sorted(m for m in sys.modules if m.startswith('core.run')), "
            "'tenacity' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "['core.run', 'core.run.options'] False"


def test_the_retry_wait_honours_and_caps_retry_after_and_backs_off_with_full_jitter():
    """The wait before a retry: the server's Retry-After capped at retry_after_cap_s (plus at
    most 1 s of jitter); without one, U(0, min(cap, base·2^(attempt−1)))."""
    from tenacity import AsyncRetrying, RetryCallState

    from core.run.retry import RetryAfterWait
    from core.screeners.base import CallFailed

    def state(attempt: int, exc: CallFailed) -> RetryCallState:
        rs = RetryCallState(AsyncRetrying(), fn=None, args=(), kwargs={})
        rs.attempt_number = attempt
        rs.set_exception((type(exc), exc, None))
        return rs

    wait = RetryAfterWait(base_s=0.5, cap_s=30.0, retry_after_cap_s=120.0)
    asked = [wait(state(1, CallFailed("429", status=429, retryable=True,
                                      retry_after=100_000.0))) for _ in range(50)]
    assert all(120.0 <= w <= 121.0 for w in asked)
    short = [wait(state(1, CallFailed("429", status=429, retryable=True, retry_after=2.0)))
             for _ in range(50)]
    assert all(2.0 <= w <= 2.1 for w in short)
    third = [wait(state(3, CallFailed("503", status=503, retryable=True))) for _ in range(400)]
    assert all(0.0 <= w <= 2.0 for w in third) and max(third) > 1.0   # 0.5·2² = 2 s ceiling
    tenth = [wait(state(10, CallFailed("503", status=503, retryable=True))) for _ in range(400)]
    assert all(0.0 <= w <= 30.0 for w in tenth) and max(tenth) > 15.0  # capped at 30 s
