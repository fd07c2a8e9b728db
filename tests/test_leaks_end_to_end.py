"""Issue 12, point 2, end to end: a config from elsewhere sends neither a file from outside its
folder nor a secret that is not a model key. ``python -m core run`` against a real fake server
that records every request (path, headers, body); the test reads what arrived.

The unit tests (tests/test_config.py, tests/test_runner.py) show the refusals; these show that
nothing left the machine when they happen, and that what an allowed run sends holds only the
sample's own applications and the named key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakeserver import FakeServer
from tests.support import ROOT, http_json_config

SECRET_FILE_TEXT = "root:x:0:0:secret-line-7f3a9c:/root:/bin/bash"
SECRET_ENV_VALUE = "AKIA-not-a-model-key-5d1e"


@pytest.fixture()
def server():
    with FakeServer() as srv:
        yield srv


def _run(cfg: Path, db: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "run", "--config", str(cfg), "--db",
                           str(db), "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def _everything_sent(srv: FakeServer) -> str:
    return "\n".join(json.dumps(e.body, default=str) + json.dumps(e.headers) for e in srv.log)


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    """``tmp/outside/passwd`` (a file the config must not reach) and ``tmp/cfg/`` (the
    config's folder)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text(SECRET_FILE_TEXT + "\n")
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    return outside / "passwd", cfg_dir


def _with_sample(cfg_dir: Path, url: str, paths: list[str]) -> Path:
    cfg = http_json_config(cfg_dir, url, runs=2, k=len(paths))
    rows = ["candidate_id,stratum,first_pass_score,application_path"]
    rows += [f"c{i},band,{60 + i},{p}" for i, p in enumerate(paths)]
    (cfg_dir / "sample.csv").write_text("\n".join(rows) + "\n")
    return cfg


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_an_application_path_out_of_the_folder_sends_nothing(tmp_path, server, how):
    secret, cfg_dir = _folders(tmp_path)
    (cfg_dir / "ok.txt").write_text("An application inside the folder.")
    if how == "symlink":
        (cfg_dir / "link.txt").symlink_to(secret)
    out = {"dotdot": "../outside/passwd", "absolute": str(secret), "symlink": "link.txt"}[how]
    cfg = _with_sample(cfg_dir, server.url, ["ok.txt", out])
    db = tmp_path / "a.duckdb"
    r = _run(cfg, db, {"FAKE_SCREENER_KEY": "fake-key-1"})
    assert r.returncode == 2, r.stderr
    assert "application_path" in r.stderr and "Traceback" not in r.stderr
    assert server.arrivals == 0 and server.log == []
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("a.duckdb*"))
    assert SECRET_FILE_TEXT.encode() not in stored


def test_a_config_naming_a_cloud_secret_sends_it_nowhere(tmp_path, server):
    _, cfg_dir = _folders(tmp_path)
    cfg = http_json_config(cfg_dir, server.url, runs=2, k=2)
    cfg.write_text(cfg.read_text().replace('api_key_env = "FAKE_SCREENER_KEY"',
                                           'api_key_env = "AWS_SECRET_ACCESS_KEY"'))
    r = _run(cfg, tmp_path / "k.duckdb", {"AWS_SECRET_ACCESS_KEY": SECRET_ENV_VALUE})
    assert r.returncode == 2 and "does not look like a model API key" in r.stderr
    assert SECRET_ENV_VALUE not in r.stderr + r.stdout
    assert server.arrivals == 0


def test_an_allowed_run_sends_only_the_folders_applications_and_the_named_key(tmp_path,
                                                                               server):
    """The control: inside the folder, with a model key, the run goes through — and the
    recorded requests carry that key and those applications, never the outside file or the
    other secret in the environment."""
    _, cfg_dir = _folders(tmp_path)
    (cfg_dir / "a.txt").write_text("Application A: five years of Go.")
    (cfg_dir / "b.txt").write_text("Application B: ten years of Java.")
    cfg = _with_sample(cfg_dir, server.url, ["a.txt", "b.txt"])
    r = _run(cfg, tmp_path / "ok.duckdb", {"FAKE_SCREENER_KEY": "fake-key-1",
                                           "AWS_SECRET_ACCESS_KEY": SECRET_ENV_VALUE})
    assert r.returncode == 0, r.stderr
    assert "fake-key-1" not in r.stderr + r.stdout
    sent = _everything_sent(server)
    assert len(server.log) == 4
    assert "five years of Go" in sent and "ten years of Java" in sent
    assert SECRET_FILE_TEXT not in sent and SECRET_ENV_VALUE not in sent
    assert all("fake-key-1" in json.dumps(e.headers) for e in server.log)
