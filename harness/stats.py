"""Summary statistics of timing samples: median, quartiles, spread (IQR, CV)."""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field


class TimingStats(BaseModel):
    """Summary of per-call times in milliseconds."""

    median_ms: float = Field(description="Median time per call, ms")
    p25_ms: float = Field(description="25th percentile, ms")
    p75_ms: float = Field(description="75th percentile, ms")
    min_ms: float = Field(description="Fastest call, ms")
    max_ms: float = Field(description="Slowest call, ms")
    mean_ms: float = Field(description="Mean, ms")
    cv: float = Field(description="Coefficient of variation: population standard deviation over the mean (0.01 = 1%)")
    samples: int = Field(description="Timed calls summarised")

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> TimingStats:
        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        mean = statistics.fmean(ordered)
        spread = statistics.pstdev(ordered) / mean if mean > 0 else 0.0
        return cls(
            median_ms=statistics.median(ordered),
            p25_ms=_quantile(ordered, 0.25),
            p75_ms=_quantile(ordered, 0.75),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            mean_ms=mean,
            cv=spread,
            samples=len(ordered),
        )

    def describe(self) -> str:
        return (f"{self.median_ms * 1000:.1f} us median (IQR {self.iqr_ms * 1000:.1f} us, "
                f"CV {self.cv * 100:.1f}%, n={self.samples})")


def _quantile(ordered: list[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
