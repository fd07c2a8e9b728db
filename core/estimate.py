"""What a run will cost before it starts: calls, tokens, money and wall time.

One result type for the two places that estimate: the Sample step (before a screener is
configured: tokens per call are assumptions) and the runner (tokens from each rendered prompt,
latency from the pre-flight).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Estimate", "wall_time", "human_seconds"]


def wall_time(calls: int, concurrency: int, latency_s: float | None,
              rpm: float | None = None) -> float | None:
    """``⌈calls / c⌉ · latency``, and no faster than a requests-per-minute ceiling allows."""
    if latency_s is None:
        return None
    wall = math.ceil(calls / max(1, int(concurrency))) * float(latency_s)
    if rpm:
        wall = max(wall, calls / float(rpm) * 60.0)
    return wall


def human_seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


@dataclass(frozen=True)
class Estimate:
    """Calls, tokens (estimates, ~4 characters a token), cost (None without a price) and wall
    time (None without a latency)."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    wall_time_s: float | None
    latency_s: float | None = None
    concurrency: int = 8
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        cost = f"${self.cost:,.2f}" if self.cost is not None else "cost unknown (no price)"
        wall = (f"~{human_seconds(self.wall_time_s)}" if self.wall_time_s is not None
                else "time unknown (no latency measured yet)")
        return (f"{self.calls:,} calls, ~{self.input_tokens:,} input and ~{self.output_tokens:,} "
                f"output tokens, {cost}, {wall}")
