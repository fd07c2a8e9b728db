"""The run's HTTP clients and request ids.

``concurrency`` connections in total, split over clients of :data:`POOL_SHARD` connections
each, so no request ever waits for a pool slot (PITFALLS: httpx 0.28 leaks a slot when such a
wait is cancelled); one verified TLS context shared by all of them.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import ssl
import sys

import httpx

from core.run.options import RunOptions

__all__ = ["POOL_SHARD", "make_clients", "new_request_id"]


#: Connections per client. httpcore's pool assigns requests to connections in O(requests ×
#: connections) on every request; at 64 connections in one pool that costs more CPU than the
#: calls themselves (measured: ~4 ms per call), so large concurrency is split over clients.
POOL_SHARD = 8


def _avoid_repeated_failed_import() -> None:
    """httpcore runs ``import sniffio`` on every request; when sniffio is not installed, each
    failed import scans ``sys.path`` again (~0.2 ms a request). Record its absence once."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def make_clients(options: RunOptions) -> list[httpx.AsyncClient]:
    """Clients whose pools together hold exactly ``concurrency`` connections."""
    _avoid_repeated_failed_import()
    c = int(options.concurrency)
    n = max(1, math.ceil(c / POOL_SHARD))
    sizes = [c // n + (1 if i < c % n else 0) for i in range(n)]
    timeout = httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s,
                            pool=options.timeout_s)
    tls = _ssl_context()  # one verified TLS context shared by the shards (each costs ~25 ms)
    return [httpx.AsyncClient(limits=httpx.Limits(max_connections=size,
                                                  max_keepalive_connections=size),
                              timeout=timeout, follow_redirects=False, verify=tls)
            for size in sizes]


_TLS: list[ssl.SSLContext] = []


def _ssl_context() -> ssl.SSLContext:
    """A default, certificate-verifying context (certifi's roots, as httpx uses), made once."""
    if not _TLS:
        try:
            import certifi
            _TLS.append(ssl.create_default_context(cafile=certifi.where()))
        except ImportError:  # pragma: no cover - certifi ships with httpx
            _TLS.append(ssl.create_default_context())
    return _TLS[0]


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
