"""Serve the app (``streamlit run serve.py``): app.py behind one small fix of the page's HTML.

Why: when a page's own URL is the first one a browser opens (``/band?audit=…``, a bookmark or
a shared link), Streamlit's frontend cannot tell whether ``/band`` is a page of an app served
at ``/`` or an app served under the path ``/band``, so it asks ``/band/_stcore/health`` first
(a 404 in the browser's console) and only then ``/_stcore/health`` (Streamlit issue #7074;
``getPossibleBaseUris`` in the frontend). The server knows: a one-segment path is a page. So
the HTML sent for such a path sets ``window.__streamlit.BACKEND_BASE_URL`` — the frontend's
documented setting for hosts that embed it — to the folder above the page (``/`` here, the
proxy's prefix behind a proxy), and the frontend asks the right address first.

Everything else is ``st.App("app.py")`` as it is: same options (``--server.port`` …, and
``.streamlit/config.toml``), same routes. ``streamlit run app.py`` still works, with the 404.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
from starlette.middleware import Middleware

#: Set before Streamlit's bundle runs (it reads ``window.__streamlit`` once, at load).
SNIPPET = (b'<script>window.__streamlit = Object.assign(window.__streamlit || {}, '
           b'{BACKEND_BASE_URL: new URL(".", window.location.href).href});</script>')
_NOT_PAGES = ("_stcore", "static", "media", "component", "app", "favicon.png", "manifest.json",
              "auth", "oauth2callback")


def _is_page_path(path: str) -> bool:
    """``/band`` (a page below the app's root) — not ``/``, not an asset or an endpoint."""
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    rest = path.strip("/")
    if base:
        if not (rest == base or rest.startswith(base + "/")):
            return False
        rest = rest[len(base):].strip("/")
    return bool(rest) and "/" not in rest and "." not in rest and rest not in _NOT_PAGES


class PageBaseUrl:
    """ASGI middleware: put :data:`SNIPPET` into the ``<head>`` of the HTML sent for a page
    path (the response is held only for those GETs; compression is asked of nobody for them,
    so the HTML can be edited)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (scope.get("type") != "http" or scope.get("method") not in ("GET", "HEAD")
                or not _is_page_path(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        scope = dict(scope, headers=[(k, v) for k, v in scope.get("headers", [])
                                     if k.lower() != b"accept-encoding"])
        start: dict[str, Any] = {}
        body = bytearray()

        async def hold(message: dict) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            headers = [(k, v) for k, v in start.get("headers", [])]
            html_page = any(k.lower() == b"content-type" and v.startswith(b"text/html")
                            for k, v in headers)
            out = bytes(body)
            if html_page and start.get("status") == 200 and b"<head>" in out:
                out = out.replace(b"<head>", b"<head>" + SNIPPET, 1)
                headers = [(k, str(len(out)).encode() if k.lower() == b"content-length" else v)
                           for k, v in headers]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body",
                        "body": out if scope.get("method") == "GET" else b""})

        await self.app(scope, receive, hold)


app = st.App("app.py", middleware=[Middleware(PageBaseUrl)])
