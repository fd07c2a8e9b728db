"""Import benchmark (issue 12, SPEC §6): the CLI import of a 1,050,000-row long CSV side by side
with DuckDB's bare ``read_csv`` of the same file, and memory on hostile files.

Rows, each measured as a separate process (wall time from spawn to exit, peak RSS as the
child's own ``VmHWM`` written at exit):

1. bare DuckDB: ``CREATE TABLE t AS SELECT * FROM read_csv(file)`` into a new DuckDB file;
2. ``python -m core import file --db new.duckdb --audit bench``, split in-process into
   validation (read + every check + normalized frames) and the write into the audit database;
3. the same split in-process, and Python's start with the CLI's imports alone;
4. a Parquet bomb (a few hundred KB holding 100,000,000 rows): refused from its metadata;
5. a CSV whose second line is a 300 MB id: refused at the line-length cap.

Usage: python benchmarks/bench_import.py [--repeats 3] [--out benchmarks/results/import.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from _data import long_draws  # noqa: E402

_WRAP = """
import atexit, runpy, sys
out, args = sys.argv[1], sys.argv[2:]
def _peak():
    with open('/proc/self/status') as fh:
        hwm = next(line for line in fh if line.startswith('VmHWM'))
    with open(out, 'w') as fh:
        fh.write(hwm.split()[1])
atexit.register(_peak)
if args[0] == '-m':
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name='__main__', alter_sys=True)
else:
    sys.argv = ['-c', *args[2:]]
    exec(compile(args[1], '<bench>', 'exec'), {'__name__': '__main__'})
"""


def run_measured(cmd: list[str]) -> tuple[float, float, int, str, float]:
    """Run ``python ARGS`` (``cmd[0]`` is the interpreter); (wall seconds, peak RSS in MB from
    the child's own VmHWM, exit code, last line of stderr, CPU seconds of the child: user +
    system over all its threads, which a busy machine inflates far less than wall time)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.NamedTemporaryFile("r", suffix=".hwm") as hwm, \
            tempfile.TemporaryFile() as err_file:
        t0 = time.perf_counter()
        proc = subprocess.Popen([cmd[0], "-c", _WRAP, hwm.name, *cmd[1:]], cwd=str(ROOT),
                                env=env, stdout=subprocess.DEVNULL, stderr=err_file)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        peak_kb = float(open(hwm.name).read().strip() or 0)
        err_file.seek(0)
        err = err_file.read().decode("utf-8", "replace").strip()
    last = err.splitlines()[-1] if err else ""
    return (wall, peak_kb / 1024, os.waitstatus_to_exitcode(status), last,
            usage.ru_utime + usage.ru_stime)


def bare_cmd(csv: str, db: str) -> list[str]:
    code = ("import duckdb, sys; con = duckdb.connect(sys.argv[2]); "
            "con.execute(\"CREATE TABLE t AS SELECT * FROM read_csv('\" + sys.argv[1] + \"')\")")
    return [sys.executable, "-c", code, csv, db]


def bare_in_process(csv: str, db: str) -> float:
    import duckdb

    con = duckdb.connect(db)
    t0 = time.perf_counter()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{csv}')")
    dt = time.perf_counter() - t0
    con.close()
    return dt


def split_in_process(csv: str, db: str) -> tuple[float, float]:
    from core.ingest import commit_draws, validate_draws
    from core.store import Store

    t0 = time.perf_counter()
    imp = validate_draws(csv)
    t1 = time.perf_counter()
    store = Store(db)
    commit_draws(store, "bench", imp)
    t2 = time.perf_counter()
    store.close()
    return t1 - t0, t2 - t1


def parquet_bomb(path: str, rows: int = 100_000_000, group: int = 1_000_000) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    chunk = pa.table({"candidate_id": pa.array(np.full(group, "cand-00001", dtype=object)),
                      "run": pa.array(np.ones(group, dtype=np.int64)),
                      "criterion": pa.array(np.full(group, "skills", dtype=object)),
                      "score": pa.array(np.ones(group))})
    with pq.ParquetWriter(path, chunk.schema, compression="zstd") as w:
        for _ in range(rows // group):
            w.write_table(chunk, row_group_size=group)
    return os.path.getsize(path)


def long_id_csv(path: str, mb: int = 300) -> int:
    with open(path, "w") as fh:
        fh.write("candidate_id,run,criterion,score\n")
        block = "x" * (1 << 20)
        for _ in range(mb):
            fh.write(block)
        fh.write(",1,skills,3\n")
    return os.path.getsize(path)


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.platform()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/import.md")
    a = ap.parse_args()
    # a user's Python caches the project's bytecode after its first start; this machine sets
    # PYTHONDONTWRITEBYTECODE, which would recompile every module of the CLI at each start
    # (~40 ms) while duckdb's are compiled at install: compile ours once, as a first start would
    import compileall
    compileall.compile_dir(str(ROOT / "core"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        csv = os.path.join(tmp, "draws.csv")
        long_draws().to_csv(csv, index=False)
        rows = sum(1 for _ in open(csv)) - 1
        size_mb = os.path.getsize(csv) / 1e6
        bare, cli, bare_ip, val_ip, write_ip = [], [], [], [], []
        for i in range(a.repeats):
            bare.append(run_measured(bare_cmd(csv, os.path.join(tmp, f"bare{i}.duckdb"))))
            cli.append(run_measured([sys.executable, "-m", "core", "import", csv, "--db",
                                     os.path.join(tmp, f"cli{i}.duckdb"), "--audit", "bench"]))
            if cli[-1][2] != 0:
                raise SystemExit(f"the CLI import failed: {cli[-1][3]}")
            bare_ip.append(bare_in_process(csv, os.path.join(tmp, f"bip{i}.duckdb")))
            v, w = split_in_process(csv, os.path.join(tmp, f"ip{i}.duckdb"))
            val_ip.append(v)
            write_ip.append(w)
        bomb = os.path.join(tmp, "bomb.parquet")
        bomb_size = parquet_bomb(bomb)
        bomb_run = run_measured([sys.executable, "-m", "core", "import", bomb, "--db",
                                 os.path.join(tmp, "bomb.duckdb"), "--audit", "bomb"])
        long_csv = os.path.join(tmp, "long_id.csv")
        long_size = long_id_csv(long_csv)
        long_run = run_measured([sys.executable, "-m", "core", "import", long_csv, "--db",
                                 os.path.join(tmp, "long.duckdb"), "--audit", "long"])
        floor = min((run_measured([sys.executable, "-c", "import core.cli, core.ingest"])
                     for _ in range(a.repeats)), key=lambda r: r[0])
        duck = min((run_measured([sys.executable, "-c", "import duckdb"])
                    for _ in range(a.repeats)), key=lambda r: r[0])
    load = os.getloadavg()
    med = lambda xs: float(min(xs))  # noqa: E731 - best of the repeats
    bare_wall, cli_wall = med([r[0] for r in bare]), med([r[0] for r in cli])
    bare_cpu, cli_cpu = med([r[4] for r in bare]), med([r[4] for r in cli])
    text = f"""### Import (`python benchmarks/bench_import.py`) — {time.strftime('%Y-%m-%d')}

Machine: {machine()}. File: {rows:,}-row long CSV ({size_mb:.0f} MB), best of {a.repeats}
(each row's repeats interleaved with the others'). Load average at the end (1, 5, 15 min):
{load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} — on a busy machine compare the ratios, and the CPU
column (user + system seconds of the process over all its threads) more than wall time.
The project's bytecode is compiled first (as after a first start; this machine sets
PYTHONDONTWRITEBYTECODE).

| what | wall (s) | CPU (s) | peak RSS (MB) |
|---|---|---|---|
| bare DuckDB `read_csv` into a new DuckDB file (a process) | {bare_wall:.2f} | {bare_cpu:.2f} | {med([r[1] for r in bare]):.0f} |
| `python -m core import` into a new DuckDB file (a process) | {cli_wall:.2f} | {cli_cpu:.2f} | {med([r[1] for r in cli]):.0f} |
| **ratio CLI / bare (target ≤ 2×)** | **{cli_wall / bare_wall:.1f}×** | **{cli_cpu / bare_cpu:.1f}×** | |
| Python + `import duckdb` alone (in the bare row) | {duck[0]:.2f} | {duck[4]:.2f} | {duck[1]:.0f} |
| Python + the CLI's imports alone (`import core.cli, core.ingest`) | {floor[0]:.2f} | {floor[4]:.2f} | {floor[1]:.0f} |
| in-process: bare `read_csv` | {med(bare_ip):.2f} | | |
| in-process: validation (read, every check, staged result) | {med(val_ip):.2f} | | |
| in-process: the write into the audit database (`commit_draws`) | {med(write_ip):.2f} | | |
| validation / bare `read_csv` | {med(val_ip) / med(bare_ip):.1f}× | | |
| Parquet bomb, {bomb_size / 1e6:.2f} MB file, 100,000,000 rows: refused (exit {bomb_run[2]}) | {bomb_run[0]:.2f} | {bomb_run[4]:.2f} | {bomb_run[1]:.0f} |
| CSV with a {long_size / 1e6:.0f} MB id line: refused (exit {long_run[2]}) | {long_run[0]:.2f} | {long_run[4]:.2f} | {long_run[1]:.0f} |

Refusals: `{bomb_run[3]}` / `{long_run[3]}`
"""
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
