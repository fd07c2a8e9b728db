"""The run's HTTP client and request ids.

One ``aiohttp.ClientSession`` per run whose connector holds exactly ``concurrency``
connections, so no request ever waits for a connection slot; one verified TLS context
(certifi's roots, made at the first https request: ~50 ms an http:// endpoint never pays,
:func:`core.screeners.http.tls`); no cookie jar (a draw must not depend on what an earlier
answer set); proxies from the environment (``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY``:
:func:`core.screeners.http.proxy_for`, applied by :func:`core.screeners.http.post_json`), and
nothing else read from it (aiohttp's ``trust_env`` would also read ``~/.netrc``).

Why aiohttp rather than httpx: at a fixed latency its CPU per request is about a sixth of
httpx's (0.43 against 2.4–2.7 ms on the 2-core benchmark machine; benchmarks/RESULTS.md), and
with 64 calls in flight on one core that CPU, not the endpoint, set the run's pace.
"""

from __future__ import annotations

import os
import random

import aiohttp

from core.run.options import RunOptions

__all__ = ["make_client", "new_request_id"]


def make_client(options: RunOptions) -> aiohttp.ClientSession:
    """The run's client: a session whose connector holds exactly ``concurrency`` connections.
    Call it inside the run's event loop."""
    c = int(options.concurrency)
    timeout = aiohttp.ClientTimeout(total=None, connect=options.connect_timeout_s,
                                    sock_connect=options.connect_timeout_s,
                                    sock_read=options.timeout_s)
    # TLS: each https request carries certifi's verified context (core.screeners.http.tls)
    connector = aiohttp.TCPConnector(limit=c, limit_per_host=0, keepalive_timeout=30.0)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False,
                                 cookie_jar=aiohttp.DummyCookieJar())


_IDS = random.Random(int.from_bytes(os.urandom(16), "little"))


#: ``uuid.UUID(int=x, version=4)``'s bits: clear the variant and version fields, then set the
#: RFC 4122 variant and version 4 (what the UUID constructor does, without building one).
_UUID4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)


def new_request_id() -> str:
    """A random 128-bit request id (uuid4 form, 32 hex digits) without a system call per id.

    The same string as ``uuid.UUID(int=bits, version=4).hex`` (a test holds it), at a quarter
    of its cost: one is made per call.
    """
    return "%032x" % (_IDS.getrandbits(128) & _UUID4_CLEAR | _UUID4_SET)
