"""Assemble benchmarks/RESULTS.md from the latest benchmarks/results/*.md (one per script)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["engine.md", "runner.md", "slider_browser.md"]


def main() -> None:
    parts = ["# Benchmark results\n",
             "Targets are SPEC §6. Each section is written by its script "
             "(`benchmarks/bench_*.py`) with the machine it ran on; "
             "`python benchmarks/collect.py` rebuilds this file.\n"]
    results = HERE / "results"
    names = ORDER + sorted(p.name for p in results.glob("*.md") if p.name not in ORDER)
    for name in names:
        path = results / name
        if path.exists():
            parts.append(path.read_text(encoding="utf-8").strip() + "\n")
    (HERE / "RESULTS.md").write_text("\n".join(parts), encoding="utf-8")
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
