"""Who may reach the app: loopback by default, a team only behind a login.

The app holds candidates' applications and the runner holds API keys, so it listens on
``127.0.0.1`` (``.streamlit/config.toml``). Serving it on another address is an explicit choice
that needs one of:

* Streamlit's built-in OIDC login (``st.login``): an ``[auth]`` section in
  ``.streamlit/secrets.toml`` **and** ``[access] allowed_email_domains = ["example.com", …]``;
  only signed-in users whose e-mail is in one of those domains see the app;
* a reverse proxy that authenticates every request, acknowledged with
  ``AUDIT_AUTH_PROXY=acknowledged`` in the environment (or ``[access] auth_proxy =
  "acknowledged"`` in the secrets) and the app bound to loopback or to the proxy's network.

:func:`check` says whether a configuration may start; ``python -m core.serving [streamlit
options…]`` runs it before ``start.sh`` starts the server (exit status 2 and one paragraph on
stderr when it may not), and ``app.py`` runs it again on every session (a message in the page and
in the server log), so ``streamlit run app.py --server.address 0.0.0.0`` typed by hand is refused
too. No streamlit import here.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Access", "PROXY_ACK", "PROXY_ENV", "is_loopback", "access_from", "check",
           "email_allowed", "address_from_args", "main"]

PROXY_ENV = "AUDIT_AUTH_PROXY"
PROXY_ACK = "acknowledged"
_ROOT = Path(__file__).resolve().parent.parent


def is_loopback(address: str | None) -> bool:
    """True for ``127.0.0.0/8``, ``::1`` and ``localhost``; an empty address means *every
    interface* (Streamlit's default) and is not loopback."""
    if not address:
        return False
    a = address.strip().strip("[]").lower()
    if a == "localhost":
        return True
    try:
        return ipaddress.ip_address(a).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """The access settings the check needs (from secrets and the environment)."""

    oidc_configured: bool = False
    allowed_domains: tuple[str, ...] = ()
    proxy_acknowledged: bool = False


def access_from(secrets: Mapping[str, Any] | None, environ: Mapping[str, str]) -> Access:
    """Read :class:`Access` from a secrets mapping (``st.secrets`` or a parsed secrets.toml)."""
    secrets = secrets or {}
    auth = secrets.get("auth") or {}
    access = secrets.get("access") or {}
    oidc = bool(auth.get("client_id") or any(isinstance(v, Mapping) and v.get("client_id")
                                             for v in auth.values()))
    domains = tuple(str(d).strip().lower().lstrip("@")
                    for d in (access.get("allowed_email_domains") or []) if str(d).strip())
    ack = (environ.get(PROXY_ENV, "").strip().lower() == PROXY_ACK
           or str(access.get("auth_proxy", "")).strip().lower() == PROXY_ACK)
    return Access(oidc_configured=oidc, allowed_domains=domains, proxy_acknowledged=ack)


def check(address: str | None, access: Access) -> str | None:
    """``None`` when the app may serve on ``address``; otherwise why not and how to fix it."""
    if is_loopback(address):
        return None
    if access.proxy_acknowledged:
        return None
    if access.oidc_configured and access.allowed_domains:
        return None
    where = f"'{address}'" if address else "every network interface"
    missing = ("an allow-list of e-mail domains ([access] allowed_email_domains in "
               ".streamlit/secrets.toml)" if access.oidc_configured
               else "a login")
    return (f"Refusing to serve the audit app on {where} without {missing}: anyone who can "
            "reach this address could read candidates' applications and run the screener "
            "with your API keys. Keep the default (server.address = 127.0.0.1), or set up "
            "Streamlit's login ([auth] plus [access] allowed_email_domains in "
            f".streamlit/secrets.toml), or put an authenticating reverse proxy in front and set "
            f"{PROXY_ENV}={PROXY_ACK}. See SECURITY.md.")


def email_allowed(email: str | None, domains: Sequence[str]) -> bool:
    """True when ``email``'s domain is one of ``domains`` (exact, case-insensitive)."""
    if not email or "@" not in email:
        return False
    domain = email.rsplit("@", 1)[1].strip().lower()
    return domain in {d.lower() for d in domains}


def address_from_args(args: Sequence[str], config_toml: Path | None = None,
                      environ: Mapping[str, str] | None = None) -> str:
    """The address Streamlit will bind: ``--server.address`` on the command line, else
    ``STREAMLIT_SERVER_ADDRESS``, else ``server.address`` in the config file, else ``""``
    (every interface)."""
    environ = os.environ if environ is None else environ
    for i, arg in enumerate(args):
        if arg == "--server.address" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--server.address="):
            return arg.split("=", 1)[1]
    if environ.get("STREAMLIT_SERVER_ADDRESS") is not None:
        return environ["STREAMLIT_SERVER_ADDRESS"]
    path = config_toml or _ROOT / ".streamlit" / "config.toml"
    try:
        conf = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return ""
    return str((conf.get("server") or {}).get("address", ""))


def _secrets(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m core.serving [streamlit options…]``: exit 2 with the reason when refused."""
    args = list(sys.argv[1:] if argv is None else argv)
    address = address_from_args(args)
    access = access_from(_secrets(_ROOT / ".streamlit" / "secrets.toml"), os.environ)
    problem = check(address, access)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
