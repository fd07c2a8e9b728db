"""Who may reach the app: loopback by default, another address only behind a login.

The policy is core/serving.py; the real-socket tests start the app the way start.sh does and
look at what it listens on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core.serving import (
    PROXY_ACK,
    PROXY_ENV,
    Access,
    access_from,
    address_from_args,
    check,
    email_allowed,
    is_loopback,
)

ROOT = Path(__file__).resolve().parents[1]


def test_loopback_addresses():
    for a in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(a), a
    for a in ("", "0.0.0.0", "::", "192.0.2.2", "example.com", None):
        assert not is_loopback(a), a


def test_a_non_loopback_address_needs_a_login_with_an_allow_list_or_an_acknowledged_proxy():
    assert check("127.0.0.1", Access()) is None
    msg = check("0.0.0.0", Access())
    assert msg is not None and "'0.0.0.0'" in msg and "SECURITY.md" in msg
    assert "every network interface" in check("", Access())
    # a login without an allow-list of e-mail domains is not enough
    only_login = check("0.0.0.0", Access(oidc_configured=True))
    assert only_login is not None and "allow-list" in only_login
    assert check("0.0.0.0", Access(oidc_configured=True, allowed_domains=("acme.com",))) is None
    assert check("0.0.0.0", Access(proxy_acknowledged=True)) is None


def test_access_is_read_from_secrets_and_the_environment():
    secrets = {"auth": {"client_id": "x", "client_secret": "y"},
               "access": {"allowed_email_domains": ["@Acme.com", " "]}}
    a = access_from(secrets, {})
    assert a.oidc_configured and a.allowed_domains == ("acme.com",)
    assert access_from({}, {PROXY_ENV: PROXY_ACK}).proxy_acknowledged
    assert not access_from({}, {PROXY_ENV: "yes"}).proxy_acknowledged
    # a named provider ([auth.google]) counts as configured
    assert access_from({"auth": {"google": {"client_id": "x"}}}, {}).oidc_configured


def test_email_allow_list_matches_the_whole_domain():
    assert email_allowed("ana@acme.com", ["acme.com"])
    assert email_allowed("Ana@ACME.com", ["acme.com"])
    assert not email_allowed("ana@notacme.com", ["acme.com"])
    assert not email_allowed("ana@acme.com.evil.io", ["acme.com"])
    assert not email_allowed(None, ["acme.com"])


def test_the_address_comes_from_the_flag_then_the_environment_then_the_config(tmp_path):
    conf = tmp_path / "config.toml"
    conf.write_text('[server]\naddress = "127.0.0.1"\n')
    assert address_from_args([], conf, {}) == "127.0.0.1"
    assert address_from_args(["--server.address", "0.0.0.0"], conf, {}) == "0.0.0.0"
    assert address_from_args(["--server.address=10.0.0.5"], conf, {}) == "10.0.0.5"
    assert address_from_args([], conf, {"STREAMLIT_SERVER_ADDRESS": ""}) == ""
    assert address_from_args([], tmp_path / "missing.toml", {}) == ""


def test_the_shipped_config_binds_loopback_and_hides_tracebacks():
    import tomllib
    conf = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert conf["server"]["address"] == "127.0.0.1"
    assert conf["client"]["showErrorDetails"] == "none"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _non_loopback_ip() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only picks the outgoing interface
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.pop(PROXY_ENV, None)
    return {**env, "AUDIT_DB": str(tmp_path / "audits.duckdb"), "PYTHONUNBUFFERED": "1"}


def test_the_app_listens_on_loopback_only(tmp_path):
    """Started like start.sh (no address flag): 127.0.0.1 answers, the machine's network
    address refuses the connection."""
    ip = _non_loopback_ip()
    assert ip is not None, "this test needs a machine with a non-loopback IPv4 address"
    port = _free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        healthy = False
        while time.monotonic() < deadline and not healthy:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as r:
                    healthy = r.read().decode().strip() == "ok"
            except OSError:
                time.sleep(0.25)
        assert healthy, (tmp_path / "server.log").read_text()[-2000:]
        with pytest.raises(OSError):
            socket.create_connection((ip, port), timeout=3).close()
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                                   text=True).stdout
        local = {line.split()[3] for line in listening.splitlines() if line.strip()}
        assert local == {f"127.0.0.1:{port}"}, listening
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


def test_start_sh_refuses_a_network_address_without_a_login(tmp_path):
    """./start.sh --server.address 0.0.0.0 with no login and no proxy: exit status 2, the
    reason on stderr, and nothing listening."""
    port = _free_port()
    env = {**_env(tmp_path), "PORT": str(port), "VENV": str(Path(sys.executable).parents[1])}
    out = subprocess.run(["./start.sh", "--server.address", "0.0.0.0"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Refusing to serve" in out.stderr and "SECURITY.md" in out.stderr
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_page_refuses_a_network_address_typed_by_hand(tmp_path, monkeypatch, capsys):
    """`streamlit run app.py --server.address 0.0.0.0` (bypassing start.sh): the page shows the
    refusal instead of any audit, and the terminal says why."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    from ui.state import _log_refusal
    monkeypatch.setenv("AUDIT_DB", str(tmp_path / "audits.duckdb"))
    monkeypatch.delenv(PROXY_ENV, raising=False)
    _log_refusal.clear()
    old = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")  # what the command-line flag sets
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    finally:
        config.set_option("server.address", old)
    assert not at.exception
    assert len(at.error) == 1
    assert "Refusing to serve the audit app on '0.0.0.0'" in at.error[0].value
    assert not at.sidebar.selectbox  # no audit is shown
    assert "Refusing to serve the audit app on '0.0.0.0'" in capsys.readouterr().out


def _app_with_login(tmp_path, monkeypatch, user: dict):
    from streamlit.testing.v1 import AppTest
    monkeypatch.setenv("AUDIT_DB", str(tmp_path / "audits.duckdb"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.secrets["auth"] = {"client_id": "id", "client_secret": "s", "cookie_secret": "c",
                          "redirect_uri": "http://localhost:8501/oauth2callback",
                          "server_metadata_url": "https://idp.example/.well-known/x"}
    at.secrets["access"] = {"allowed_email_domains": ["acme.com"]}
    at.user = user
    return at.run()


def test_with_a_login_configured_a_visitor_signs_in_before_seeing_any_audit(tmp_path,
                                                                            monkeypatch):
    at = _app_with_login(tmp_path, monkeypatch, {"is_logged_in": False})
    assert not at.exception
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.sidebar.selectbox


def test_a_signed_in_account_outside_the_allowed_domains_sees_no_audit(tmp_path, monkeypatch):
    at = _app_with_login(tmp_path, monkeypatch,
                         {"is_logged_in": True, "email": "eve@notacme.com"})
    assert not at.exception
    assert any("not allowed" in e.value for e in at.error)
    assert not at.sidebar.selectbox


def test_a_signed_in_account_of_an_allowed_domain_sees_the_audits(tmp_path, monkeypatch):
    at = _app_with_login(tmp_path, monkeypatch, {"is_logged_in": True, "email": "ana@acme.com"})
    assert not at.exception and not at.error
    assert at.sidebar.selectbox(key="active_audit").value == "demo-ENG-2291"
