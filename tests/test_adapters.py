"""Adapters own their options: the registry, the config's one-line errors, the generated form.

* a typo'd key in a config is one line naming the table and the key, with the nearest valid key
  (on the command line too, without a traceback);
* a screener kind defined here, in a test file, is in the registry, builds from a config and
  gets its Run-page form from its options model;
* every kind's form shows exactly its model's fields;
* pydantic is not loaded on the slider path (pages other than Run, ``core.live``).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field
from streamlit.testing.v1 import AppTest

from core.config import parse_config
from core.errors import InputError
from core.freeze import Criterion
from core.screeners.base import BuildContext, CallFailed, RawResult, Screener, ScreenRequest
from core.screeners.options import ScreenerOptions, form_fields
from core.screeners.registry import SCREENERS, build_screener

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = (Criterion("skills", 10.0),)
MINIMAL = """
[audit]
id = "a1"
req_id = "ENG-1"
[harness]
model = "m-2025-01-01"
side_effect_free = true
[[criteria]]
name = "skills"
max = 10
"""
OPENAI = MINIMAL + '[screener]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'


# ---------------------------------------------------------------------------- a new kind
class EchoOptions(ScreenerOptions):
    """``[screener]`` with ``kind = "echo"``: answers every criterion with one score."""

    kind: Literal["echo"] = "echo"
    score: float = Field(5.0, ge=0, le=10, title="Score given",
                         description="The score every criterion gets.")
    mode: Literal["fast", "slow"] = Field("fast", description="How it answers.")
    shout: bool = Field(False, description="Upper-case the rationale.")
    note: str = Field("", title="Rationale", description="Sent back with every answer.",
                      json_schema_extra={"widget": "textarea"})
    label: str | None = Field(None, description="A name for the record.")


class EchoScreener(Screener):
    """A kind defined in a test file: one class, nothing else edited."""

    kind = "echo"
    title = "Echo (a test adapter)"
    order = 90
    Options = EchoOptions

    def __init__(self, *, score: float, model: str, criteria: tuple[Criterion, ...] = (),
                 note: str = "") -> None:
        super().__init__(model=model, criteria=criteria)
        self.score, self.note = score, note

    @classmethod
    def from_options(cls, options: EchoOptions, context: BuildContext) -> EchoScreener:
        return cls(score=options.score, model=options.model_id(context, default="echo-1"),
                   criteria=context.criteria,
                   note=options.note.upper() if options.shout else options.note)

    async def call(self, client: Any, request: ScreenRequest) -> RawResult:
        import json
        return RawResult(payload=json.dumps({**{c.name: self.score for c in self.criteria},
                                             "rationale": self.note}), model=self.model)


def test_a_kind_defined_in_a_test_file_is_registered_and_builds_from_a_config():
    import asyncio
    assert SCREENERS["echo"] is EchoScreener
    cfg = parse_config(MINIMAL + '[screener]\nkind = "echo"\nscore = 7\nshout = true\n'
                       'note = "fine"\n')
    scr = cfg.build_screener()
    assert isinstance(scr, EchoScreener) and scr.note == "FINE"
    raw = asyncio.run(scr.call(None, ScreenRequest("r" * 32, "c1", 1, "text", 0)))
    assert scr.parse(raw).scores == {"skills": 7.0}
    with pytest.raises(InputError, match=r"\[screener\] score: input should be less than or "
                                         r"equal to 10 \(field 'score'\)"):
        parse_config(MINIMAL + '[screener]\nkind = "echo"\nscore = 11\n')
    with pytest.raises(InputError, match="did you mean 'shout'"):
        build_screener("echo", {"shuot": True}, criteria=RUBRIC)


# ---------------------------------------------------------------------------- typos
@pytest.mark.parametrize(("toml", "says"), [
    (MINIMAL + "[run]\nconcurency = 4\n",
     "[run] unknown key 'concurency': did you mean 'concurrency'?"),
    (MINIMAL.replace("side_effect_free", "side_efect_free"),
     "[harness] unknown key 'side_efect_free': did you mean 'side_effect_free'?"),
    (MINIMAL.replace('req_id = "ENG-1"', 'req_id = "ENG-1"\ncuttoff = 70'),
     "[audit] unknown key 'cuttoff': did you mean 'cutoff'?"),
    (MINIMAL.replace("max = 10", "maxx = 10"),
     "[criteria 'skills'] unknown key 'maxx': did you mean 'max'?"),
    (MINIMAL.replace("[harness]", "[harnes]"),
     "[config] unknown key 'harnes': did you mean 'harness'?"),
    (OPENAI + 'promt = "{application}"\n',
     "[screener] unknown key 'promt' for kind 'openai-chat': did you mean 'prompt'?"),
    (OPENAI + "max_tokns = 100\n",
     "[screener] unknown key 'max_tokns' for kind 'openai-chat': did you mean 'max_tokens'?"),
    (OPENAI.replace('"openai-chat"', '"opnai-chat"'),
     "[screener] kind must be one of simulated, openai-chat, anthropic, http-json, command, "
     "python"),
])
def test_a_typo_names_the_table_the_key_and_the_nearest_valid_key(toml, says):
    with pytest.raises(InputError) as e:
        parse_config(toml)
    msg = str(e.value)
    assert msg.startswith(says) and "\n" not in msg
    if "kind must be" in says:
        assert msg.endswith("did you mean 'openai-chat'?")


def test_a_wrong_type_or_bound_names_the_table_and_the_key():
    with pytest.raises(InputError) as e:
        parse_config(OPENAI + "max_tokens = 0\n")
    assert str(e.value) == ("[screener] max_tokens: input should be greater than or equal to "
                            "1 (field 'max_tokens')")
    with pytest.raises(InputError, match=r"^\[run\] runs: input should be a valid integer"):
        parse_config(MINIMAL + "[run]\nruns = \"15\"\n")


def test_a_typo_on_the_command_line_is_one_line_without_a_traceback(tmp_path):
    cfg = tmp_path / "audit.toml"
    cfg.write_text(OPENAI + "temprature = 0.2\n" + "[run]\nsample = \"s.csv\"\n")
    res = subprocess.run([sys.executable, "-m", "core", "run", "--config", str(cfg), "--db",
                          str(tmp_path / "a.duckdb"), "--estimate"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert lines == ["error: [screener] unknown key 'temprature' for kind 'openai-chat'; "
                     "valid keys: " + ", ".join(
                         k for k in SCREENERS["openai-chat"].Options.model_fields
                         if k != "kind")]
    assert not (tmp_path / "a.duckdb").exists()


# ---------------------------------------------------------------------------- the form
def _form_script(db: str, module: str) -> None:
    import importlib

    from core.demo import demo_freeze_sheet
    from core.store import Store
    from ui.screener_form import render_screener_form
    importlib.import_module(module)            # the test file that defines the echo kind
    store = Store(db)
    try:
        settings = store.get_audit("f1")["settings"]
        render_screener_form(store, "f1", settings, demo_freeze_sheet(), None)
    finally:
        store.close()


@pytest.fixture()
def form_db(tmp_path):
    from core.demo import demo_freeze_sheet
    from core.store import Store
    db = tmp_path / "f.duckdb"
    store = Store(db)
    sheet = demo_freeze_sheet()
    store.save_audit("f1", sheet.to_dict(), sheet.hash, {})
    store.close()
    return db


def _form(db: Path) -> AppTest:
    at = AppTest.from_function(_form_script, args=(str(db), __name__), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def _widgets(at: AppTest, prefix: str) -> dict[str, Any]:
    out = {}
    for group in (at.text_input, at.text_area, at.number_input, at.selectbox, at.checkbox):
        for w in group:
            if w.key and w.key.startswith(prefix) and "limit-" not in w.key \
                    and w.key[len(prefix):] not in ("on-invalid", "max-calls"):
                out[w.key[len(prefix):]] = w
    return out


def test_the_new_kinds_form_is_drawn_from_its_model_and_saves(form_db):
    at = _form(form_db)
    kind_box = at.selectbox(key="scr-f1-kind")
    assert EchoScreener.title in [kind_box.format_func(o) for o in kind_box.options] or \
        EchoScreener.title in kind_box.options
    kind_box.set_value("echo").run()
    assert not at.exception, at.exception
    w = _widgets(at, "scr-f1-echo-")
    assert set(w) == set(form_fields(EchoOptions))
    assert type(w["score"]).__name__ == "NumberInput"
    assert (w["score"].proto.min, w["score"].proto.max, w["score"].value) == (0, 10, 5.0)
    assert w["score"].label == "Score given" and w["score"].help == \
        "The score every criterion gets."
    assert type(w["mode"]).__name__ == "Selectbox" and w["mode"].options == ["fast", "slow"]
    assert type(w["shout"]).__name__ == "Checkbox" and w["shout"].label == "Shout"
    assert type(w["note"]).__name__ == "TextArea" and w["note"].label == "Rationale"
    assert type(w["label"]).__name__ == "TextInput"
    w["score"].set_value(8.0)
    w["mode"].set_value("slow")
    w["shout"].check()
    w["note"].set_value("ok")
    next(b for b in at.button if b.label == "Save the screener").click().run()
    assert not at.exception, at.exception
    assert any(s.value.startswith("Screener saved: Echo") for s in at.success)
    from core.store import Store
    store = Store(form_db)
    saved = store.get_audit("f1")["settings"]["screener"]
    store.close()
    assert saved == {"kind": "echo", "score": 8.0, "mode": "slow", "shout": True, "note": "ok",
                     "parse": "flat", "out_of_range": "error"}     # inherited, at defaults


@pytest.mark.parametrize("kind", ["simulated", "openai-chat", "anthropic", "http-json",
                                  "command", "python"])
def test_each_kinds_form_shows_exactly_its_models_fields(form_db, monkeypatch, kind):
    monkeypatch.setenv("AUDIT_ALLOW_CODE_SCREENERS", "1")
    at = _form(form_db)
    at.selectbox(key="scr-f1-kind").set_value(kind).run()
    assert not at.exception, at.exception
    shown = _widgets(at, f"scr-f1-{kind}-")
    model = SCREENERS[kind].Options
    assert set(shown) == set(form_fields(model))
    for name, widget in shown.items():
        field = model.model_fields[name]
        assert (widget.help or None) == field.description, name   # no description: no help
        assert widget.label == (field.title or name.replace("_", " ").capitalize()), name
    # what a form shows is a config key of that kind, and a config-only key is not shown
    hidden = set(model.model_fields) - set(shown) - {"kind"}
    assert all((model.model_fields[h].json_schema_extra or {}).get("form") is False
               for h in hidden)


def test_the_api_key_field_takes_a_variable_name_never_a_key(form_db):
    at = _form(form_db)
    at.selectbox(key="scr-f1-kind").set_value("openai-chat").run()
    at.text_input(key="scr-f1-openai-chat-base_url").set_value("http://127.0.0.1:9/v1")
    at.text_input(key="scr-f1-openai-chat-api_key_env").set_value("sk-live-abcdef0123456789")
    next(b for b in at.button if b.label == "Save the screener").click().run()
    errors = [e.value for e in at.error]
    assert any("takes the name of an environment variable" in e for e in errors), errors
    assert not any("sk-live-abcdef" in e for e in errors)


# ---------------------------------------------------------------------------- import cost
_SLIDER_PATH = textwrap.dedent("""
    import sys
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file("app.py", default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    for page in ("freeze", "sample", "criteria", "flip", "band", "drift", "compare"):
        at.switch_page(f"pages/{page}.py")
        at.run()
        assert not at.exception, (page, at.exception)
    import core.live, core.estimate, ui.run_forms  # noqa: E401,F401
    print("before run page:", "pydantic" in sys.modules)
    at.switch_page("pages/run.py")
    at.run()
    assert not at.exception, at.exception
    print("after run page:", "pydantic" in sys.modules)
""")


def test_pydantic_is_loaded_by_the_run_page_only(tmp_path):
    """The demo opened, every page but Run visited, and core.live imported: no pydantic (the
    slider path stays as fast to start as before); the Run page's form then loads it."""
    res = subprocess.run([sys.executable, "-c", _SLIDER_PATH], cwd=ROOT, capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT),
                              "AUDIT_DB": str(tmp_path / "audits.duckdb")})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "before run page: False" in res.stdout
    assert "after run page: True" in res.stdout


def test_every_module_of_the_package_is_imported_by_the_registry():
    """Adding a kind is one new file: the registry finds it without being edited."""
    import pkgutil

    import core.screeners as pkg
    for m in pkgutil.iter_modules(pkg.__path__):
        assert f"core.screeners.{m.name}" in sys.modules, m.name
    builtin = {c.kind: c.__module__ for c in SCREENERS.values() if c is not EchoScreener}
    assert builtin == {"simulated": "core.screeners.simulated",
                       "openai-chat": "core.screeners.openai_chat",
                       "anthropic": "core.screeners.anthropic",
                       "http-json": "core.screeners.http_json",
                       "command": "core.screeners.command",
                       "python": "core.screeners.python_fn"}
    assert importlib.import_module("core.screeners.registry").CODE_KINDS == {"command",
                                                                             "python"}


# ---------------------------------------------------------------------------- retry rules
@pytest.mark.parametrize(("status", "retried"), [(429, True), (503, True), (404, False),
                                                 (400, False)])
def test_an_adapters_retry_rule_classifies_a_real_servers_answers(status, retried):
    import asyncio

    from core.screeners.base import CallFailed
    from tests.fakeserver import FakeServer
    with FakeServer(status_override=status) as srv:
        for kind, opts in (("openai-chat", {"base_url": srv.url + "/v1"}),
                           ("anthropic", {"base_url": srv.url}),
                           ("http-json", {"url": srv.url + "/score"})):
            scr = build_screener(kind, {"model": "m-1", **opts}, criteria=RUBRIC)
            with pytest.raises(CallFailed) as e:
                asyncio.run(_call_with_client(scr))
            assert e.value.retryable is retried and scr.should_retry(e.value) is retried, kind
            assert e.value.finding is (not retried), kind
            assert e.value.status == status


async def _call_with_client(scr: Screener) -> RawResult:
    from core.run.clients import make_client
    from core.run.options import RunOptions
    async with make_client(RunOptions(concurrency=1, timeout_s=10.0)) as client:
        return await scr.call(client, ScreenRequest("r" * 32, "c1", 1, "text", 0))


def test_the_anthropic_adapter_also_retries_an_overloaded_body_the_others_do_not():
    overloaded = '{"type": "error", "error": {"type": "overloaded_error", "message": "x"}}'
    anthropic = build_screener("anthropic", {"model": "m-1"}, criteria=RUBRIC)
    openai = build_screener("openai-chat", {"model": "m-1",
                                            "base_url": "http://127.0.0.1:9/v1"},
                            criteria=RUBRIC)
    assert anthropic.retryable_http(400, overloaded) and not openai.retryable_http(400,
                                                                                  overloaded)
    assert not anthropic.retryable_http(400, '{"error": {"message": "temperature"}}')
    assert not anthropic.should_retry(ValueError("not a call failure"))


def test_the_proxy_comes_from_the_environment_only_and_loopback_is_never_proxied(monkeypatch):
    from core.screeners.http import proxy_for
    for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
              "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(k, raising=False)
    proxy_for.cache_clear()
    assert proxy_for("https://api.example.com/v1/chat/completions") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "internal.corp")
    proxy_for.cache_clear()
    assert proxy_for("https://api.example.com/v1") == "http://proxy.corp:3128"
    assert proxy_for("http://api.example.com/v1") is None          # no HTTP_PROXY set
    assert proxy_for("https://llm.internal.corp/v1") is None         # NO_PROXY
    assert proxy_for("https://127.0.0.1:8080/v1") is None            # loopback
    assert proxy_for("http://localhost:8080/v1") is None
    proxy_for.cache_clear()


def test_an_https_endpoint_with_an_untrusted_certificate_is_refused(tmp_path):
    """TLS is verified (certifi's roots): a self-signed server on 127.0.0.1 gets no request."""
    import shutil
    import ssl

    from core.run.clients import make_client
    from core.run.options import RunOptions
    from core.screeners.http import post_json

    openssl = shutil.which("openssl")
    assert openssl, "the openssl command makes the test's self-signed certificate"
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    served: list[bytes] = []

    async def handle(reader, writer):
        served.append(await reader.read(100))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async def scenario() -> CallFailed:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            async with make_client(RunOptions(concurrency=1, timeout_s=10.0)) as client:
                with pytest.raises(CallFailed) as e:
                    await post_json(client, f"https://127.0.0.1:{port}/score", {"a": 1}, {})
                return e.value
        finally:
            server.close()
    failure = asyncio.run(scenario())
    assert "certificate" in failure.message.lower() and failure.status is None
    assert served == []       # the request itself was never sent
