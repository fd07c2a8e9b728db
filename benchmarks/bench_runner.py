"""Runner overhead (SPEC §6): 2,000 calls at concurrency 64 against a local endpoint with fixed
latency L; wall time against the ideal ⌈calls/c⌉·L and against raw httpx on the same endpoint,
and a sequential loop as the naive baseline.

    .venv/bin/python benchmarks/bench_runner.py [--calls 2000] [--concurrency 64]
        [--latency-ms 50 200 500] [--repeat 3]

The endpoint is tests/fakeserver.py (asyncio streams, HTTP/1.1 keep-alive) in its own process,
so the server does not share the runner's interpreter. The run goes through the whole engine:
the http-json adapter, parsing, retries machinery, the batching writer into a DuckDB file.
Runner, raw httpx (SPEC's baseline) and raw aiohttp (the runner's own client, no engine) are
measured ``--repeat`` times, interleaved (runner, httpx, aiohttp, aiohttp, httpx, runner, …)
so that a change in the machine's load hits all three; each figure is the median, with the CPU
seconds of this process (engine, client and writer threads) and of the server process beside
the wall time, and the load average. Writes a Markdown table to benchmarks/results/runner.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.freeze import Criterion, FreezeSheet  # noqa: E402
from core.run.clients import make_client  # noqa: E402
from core.run.engine import Runner  # noqa: E402
from core.run.options import RunOptions  # noqa: E402
from core.screeners.http_json import HttpJsonScreener  # noqa: E402
from core.store import Store  # noqa: E402

RUBRIC = (Criterion("technical_skills", 30.0), Criterion("experience", 25.0),
          Criterion("projects", 25.0), Criterion("communication", 20.0))


def start_server(latency_ms: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakeserver", "--latency-ms",
                             str(latency_ms)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    port = int(proc.stdout.readline().strip())
    return proc, f"http://127.0.0.1:{port}"


def process_cpu_s() -> float:
    """CPU seconds (user + system) of this process so far, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def server_cpu_s(proc: subprocess.Popen) -> float:
    """CPU seconds of the server process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(proc: subprocess.Popen, fn, *args) -> tuple[float, float, float]:
    """``fn(*args)`` (which returns its wall time) with the CPU seconds of this process and of
    the server spent meanwhile."""
    c0, s0 = process_cpu_s(), server_cpu_s(proc)
    wall = fn(*args)
    return wall, process_cpu_s() - c0, server_cpu_s(proc) - s0


def make_audit(store: Store, audit_id: str, k: int) -> None:
    sheet = FreezeSheet(req_id="BENCH", model="fake-model-1", side_effect_free=True,
                        result_cache_off=True, criteria=RUBRIC)
    store.save_audit(audit_id, sheet.to_dict(), sheet.hash, {})
    store.upsert_candidates(audit_id, pd.DataFrame({
        "candidate_id": [f"c{i:04d}" for i in range(k)], "stratum": "band",
        "first_pass_score": 70.0, "application": [f"application {i}" for i in range(k)]}))


def bench_engine(url: str, calls: int, concurrency: int, db: Path) -> float:
    runs = 10
    k = math.ceil(calls / runs)
    store = Store(db)
    make_audit(store, "bench", k)
    screener = HttpJsonScreener(url=url + "/score", model="fake-model-1", criteria=RUBRIC,
                                model_path="model")
    opts = RunOptions(runs=runs, concurrency=concurrency, preflight=False, timeout_s=30)
    t0 = time.perf_counter()
    st = asyncio.run(Runner(store, "bench", screener, opts).run())
    wall = time.perf_counter() - t0
    if st.done != k * runs or st.errors:
        raise SystemExit(f"benchmark run incomplete: {st}")
    store.close()
    return wall


def httpx_clients(concurrency: int) -> list[httpx.AsyncClient]:
    """httpx clients holding ``concurrency`` connections in all, in pools of 8 (httpcore assigns
    requests to connections in O(requests × connections): one pool of 64 costs ~4 ms a call)."""
    n = max(1, math.ceil(concurrency / 8))
    sizes = [concurrency // n + (1 if i < concurrency % n else 0) for i in range(n)]
    return [httpx.AsyncClient(limits=httpx.Limits(max_connections=k, max_keepalive_connections=k),
                              timeout=httpx.Timeout(30.0)) for k in sizes]


def bench_raw_httpx(url: str, calls: int, concurrency: int) -> float:
    """SPEC's floor: httpx at the same concurrency, no engine (no parsing, no store)."""
    async def go() -> float:
        clients = httpx_clients(concurrency)
        it = iter(range(calls))

        async def worker(client: httpx.AsyncClient) -> None:
            for i in it:
                r = await client.post(url + "/score", json={"candidate_id": f"c{i}",
                                                            "application": "x"})
                r.json()
        t0 = time.perf_counter()
        await asyncio.gather(*[worker(clients[i % len(clients)]) for i in range(concurrency)])
        wall = time.perf_counter() - t0
        for c in clients:
            await c.aclose()
        return wall
    return asyncio.run(go())


def bench_raw_client(url: str, calls: int, concurrency: int) -> float:
    """The floor of the client the runner uses (its aiohttp session), no engine."""
    async def go() -> float:
        session = make_client(RunOptions(concurrency=concurrency, timeout_s=30))
        it = iter(range(calls))

        async def worker() -> None:
            for i in it:
                async with session.post(url + "/score", json={"candidate_id": f"c{i}",
                                                              "application": "x"}) as r:
                    json.loads(await r.read())
        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        wall = time.perf_counter() - t0
        await session.close()
        return wall
    return asyncio.run(go())


def bench_sequential(url: str, n: int) -> float:
    """The naive loop: one call at a time, one row written per call."""
    import duckdb

    with tempfile.TemporaryDirectory() as tmp:
        con = duckdb.connect(str(Path(tmp) / "seq.duckdb"))
        con.execute("CREATE TABLE calls (request_id VARCHAR, candidate_id VARCHAR, "
                    "payload VARCHAR)")
        with httpx.Client(timeout=30) as client:
            t0 = time.perf_counter()
            for i in range(n):
                r = client.post(url + "/score", json={"candidate_id": f"c{i}",
                                                      "application": "x"})
                r.raise_for_status()
                con.execute("INSERT INTO calls VALUES (?, ?, ?)", [str(i), f"c{i}", r.text])
            wall = time.perf_counter() - t0
        con.close()
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, nargs="+", default=[50.0, 200.0, 500.0])
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the runner and of raw httpx per latency, interleaved")
    ap.add_argument("--sequential-calls", type=int, default=60)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "runner.md"))
    args = ap.parse_args()

    rows = []
    header = ("| calls | c | L (ms) | ideal ⌈calls/c⌉·L (s) | runner wall (s) | vs ideal | "
              "raw httpx wall (s) | runner vs raw httpx | raw aiohttp wall (s) | "
              "CPU s client: runner / httpx / aiohttp | CPU s server: runner / httpx | "
              "load (1 min) | sequential loop (s, extrapolated from n) |")
    sep = "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    print(header)
    print(sep)
    for lat in args.latency_ms:
        proc, url = start_server(lat)
        arms: dict[str, list[tuple[float, float, float]]] = {"runner": [], "httpx": [],
                                                             "aiohttp": []}
        loads: list[float] = []
        try:
            with tempfile.TemporaryDirectory() as tmp:
                bench_engine(url, 256, args.concurrency, Path(tmp) / "warm.duckdb")  # warm-up
                bench_raw_httpx(url, 256, args.concurrency)
                bench_raw_client(url, 256, args.concurrency)
                for i in range(args.repeat):
                    order = list(arms) if i % 2 == 0 else list(reversed(arms))
                    for arm in order:
                        loads.append(os.getloadavg()[0])
                        if arm == "runner":
                            got = measured(proc, bench_engine, url, args.calls,
                                           args.concurrency, Path(tmp) / f"b{i}.duckdb")
                        elif arm == "httpx":
                            got = measured(proc, bench_raw_httpx, url, args.calls,
                                           args.concurrency)
                        else:
                            got = measured(proc, bench_raw_client, url, args.calls,
                                           args.concurrency)
                        arms[arm].append(got)
            seq = bench_sequential(url, args.sequential_calls)
        finally:
            proc.terminate()
            proc.wait(5)
        ideal = math.ceil(args.calls / args.concurrency) * lat / 1000.0
        seq_total = seq / args.sequential_calls * args.calls

        def med(arm: str, k: int, arms=arms) -> float:
            return statistics.median(x[k] for x in arms[arm])
        wall, raw_wall, aio_wall = med("runner", 0), med("httpx", 0), med("aiohttp", 0)
        row = (f"| {args.calls} | {args.concurrency} | {lat:g} | {ideal:.2f} | {wall:.2f} | "
               f"{100 * (wall / ideal - 1):+.1f}% | {raw_wall:.2f} "
               f"({100 * (raw_wall / ideal - 1):+.0f}% vs ideal) | "
               f"{100 * (wall / raw_wall - 1):+.1f}% | {aio_wall:.2f} "
               f"({100 * (aio_wall / ideal - 1):+.0f}% vs ideal) | "
               f"{med('runner', 1):.2f} / {med('httpx', 1):.2f} / {med('aiohttp', 1):.2f} | "
               f"{med('runner', 2):.2f} / {med('httpx', 2):.2f} | "
               f"{min(loads):.1f}–{max(loads):.1f} | "
               f"{seq_total:.1f} (n={args.sequential_calls}) |")
        rows.append(row)
        print(row, flush=True)

    machine = (f"{platform.platform()}, Python {platform.python_version()}, "
               f"{os.cpu_count()} CPU(s), httpx {httpx.__version__}, "
               f"aiohttp {aiohttp.__version__}")
    text = "\n".join([
        "## Runner overhead (benchmarks/bench_runner.py)",
        "",
        f"Machine: {machine}. Endpoint: tests/fakeserver.py in its own process (asyncio, "
        "HTTP/1.1 keep-alive) with fixed latency L. The runner path is the whole engine "
        "(http-json adapter over its aiohttp session, parsing, batching writer into a DuckDB "
        "file); raw httpx is httpx at the same concurrency with no engine (SPEC's baseline), "
        "raw aiohttp the runner's own client with no engine. Each wall and CPU figure is the "
        f"median of {args.repeat} runs, the three interleaved; CPU seconds are user + system of "
        "the client process (all its threads) and of the server process. Target (SPEC §6): "
        "within 10% of the ideal and within 10% of raw httpx.",
        "",
        header, sep, *rows, ""])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
