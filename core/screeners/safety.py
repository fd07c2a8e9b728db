"""What a config or a form may make the app read and where it may send a key (issue 12).

* :func:`inside_folder` — a file named by a config or a sample stays inside its folder (no
  ``..``, no absolute path, no symlink out), so no other file of the machine reaches a screener;
* :func:`check_key_env_name` / :func:`resolve_api_key` — ``api_key_env`` names a variable that
  looks like a model API key; the key is read from Streamlit secrets or the environment, never
  from a config, and registered for scrubbing;
* :func:`check_base_url` — no credentials inside a URL, plain ``http://`` only to this machine;
* :func:`check_headers` — no credential written in a config's headers.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.screeners.base import register_secret

__all__ = ["KEY_ENV_ALLOW_VAR", "check_base_url", "check_headers", "check_key_env_name",
           "inside_folder", "is_loopback", "resolve_api_key"]

#: Environment variable holding extra allowed ``api_key_env`` names (comma-separated), for a
#: key whose variable name does not look like one (an operator's decision, never a config's).
KEY_ENV_ALLOW_VAR = "AUDIT_API_KEY_ENV_ALLOW"
_KEY_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_KEY")
#: Parts of a variable name that mark a credential for something other than a model API
#: (cloud accounts, databases, source hosting, signing keys): refused unless allow-listed.
_KEY_ENV_DENIED = ("SECRET", "PASSWORD", "PASSWD", "PRIVATE", "ACCESS_KEY", "AWS_", "AZURE_",
                   "GCP_", "GOOGLE_APPLICATION", "GITHUB", "GH_", "GITLAB", "SSH", "SESSION",
                   "DATABASE", "DB_", "PG", "MYSQL", "REDIS", "SIGNING", "ENCRYPTION", "NPM_",
                   "PYPI", "DOCKER", "SLACK", "STRIPE")



_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "proxy-authorization"}


def inside_folder(folder: str | Path, relative: str, field_name: str) -> Path:
    """``folder / relative`` resolved, refused when it leaves ``folder`` (``..``, an absolute
    path, a symlink pointing out): a config or a sample must not read other files of the
    machine and send them to a screener."""
    base = Path(folder).resolve()
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise InputError(f"'{relative}' must be a path inside {base.name or base}/ (no absolute "
                         f"path, no '..') (field '{field_name}')")
    path = (base / rel).resolve()
    if not path.is_relative_to(base):
        raise InputError(f"'{relative}' leads outside {base.name or base}/ (a symlink pointing "
                         f"elsewhere) (field '{field_name}')")
    return path


def check_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """Extra HTTP headers from a config, refused when one carries a credential."""
    out = {str(k): str(v) for k, v in headers.items()}
    bad = sorted(h for h in out if h.lower() in _SECRET_HEADERS)
    if bad:
        raise InputError(f"header(s) {', '.join(bad)} carry credentials: never put a key in "
                         "the config; name its environment variable in api_key_env")
    return out


def check_key_env_name(name: str, allow: Any = None) -> str:
    """``name`` when it may name an API key; :class:`InputError` otherwise.

    A key variable ends in ``_API_KEY``, ``_TOKEN`` or ``_KEY`` and names no credential of
    another kind (``AWS_SECRET_ACCESS_KEY``, ``GITHUB_TOKEN``, ``DATABASE_…``), unless it is
    listed in ``allow`` or in the environment variable ``AUDIT_API_KEY_ENV_ALLOW``
    (comma-separated) — the operator's allow-list. The check keeps a config from elsewhere from
    sending an unrelated secret to its ``base_url``.
    """
    allowed = {a.strip() for a in os.environ.get(KEY_ENV_ALLOW_VAR, "").split(",") if a.strip()}
    allowed |= {str(a) for a in (allow or ())}
    if name in allowed:
        return name
    up = name.upper()
    if not up.endswith(_KEY_ENV_SUFFIXES) or any(d in up for d in _KEY_ENV_DENIED):
        raise InputError(f"api_key_env '{name}' does not look like a model API key variable "
                         "(a name ending in _API_KEY, _TOKEN or _KEY, not a cloud, database or "
                         "source-hosting credential): rename the variable, or let the operator "
                         f"allow it in {KEY_ENV_ALLOW_VAR} (field 'api_key_env')")
    return name


def is_loopback(host: str | None) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if not host:
        return False
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


_CRED_PARAMS = {"key", "api-key", "api_key", "apikey", "access_token", "token", "auth",
                "password", "secret", "sig", "signature", "code"}


def check_base_url(url: str, field_name: str = "base_url") -> str:
    """A screener URL that is safe to send applications and a key to.

    Refused: no scheme/host; credentials in the URL (``user:pw@host``, ``?api-key=…``,
    ``?key=…``) — name a variable in ``api_key_env`` instead; plain ``http://`` to a host that
    is not loopback (the key and the applications would cross the network in clear text).
    """
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
        host = parts.hostname
    except ValueError:
        raise InputError(f"'{field_name}' is not a URL (field '{field_name}')") from None
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"'{field_name}' has a port outside 1–65535 (field '{field_name}')")
    if parts.scheme not in ("http", "https") or not host:
        raise InputError(f"'{field_name}' must be an http(s) URL with a host, e.g. "
                         f"http://127.0.0.1:8080/v1 (field '{field_name}')")
    query = {k.lower() for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)}
    if parts.username or parts.password or query & _CRED_PARAMS:
        raise InputError(f"'{field_name}' carries credentials (user:password@ or a key "
                         "parameter): remove them and name the environment variable that holds "
                         f"the key in api_key_env (field '{field_name}')")
    if parts.scheme == "http" and not is_loopback(host):
        raise InputError(f"'{field_name}' uses plain http:// to {host}, which is not this "
                         "machine: use https:// (plain http is allowed for 127.0.0.1 / "
                         f"localhost only) (field '{field_name}')")
    return str(url).strip()


def resolve_api_key(env_name: str | None, secrets: Mapping[str, Any] | None = None) -> str | None:
    """The API key named ``env_name``: from ``secrets`` (Streamlit secrets) first, else the env.

    Returns ``None`` when no name is configured (a local server without auth). The key's value
    is registered for scrubbing and never appears in a message.

    Raises
    ------
    InputError
        When a name is configured but neither source has it, or the name does not look like
        a model API key (:func:`check_key_env_name`).
    """
    if not env_name:
        return None
    value = None
    if secrets is not None and env_name in secrets:
        value = secrets[env_name]
    if value is None:
        value = os.environ.get(env_name)
    if not value:
        raise InputError(f"the API key variable '{env_name}' is not set: export it in the "
                         "environment (or add it to Streamlit secrets) before running "
                         "(field 'api_key_env')")
    check_key_env_name(env_name)
    register_secret(str(value))
    return str(value)

