"""Per-bucket, per-arm step-time statistics with a sliding window per arm."""

from __future__ import annotations

from collections import deque

_RESUM_EVERY = 4096  # re-add window sums now and then so float drift cannot accumulate


class ArmWindow:
    """The last ``window`` steady samples of one arm: step interval and committed/request."""

    __slots__ = (
        "batch_sq_sum", "batch_sum", "batch_time_sum", "batches", "commit_sum", "commits",
        "count_total", "interval_sum", "intervals", "last_seen",
    )

    def __init__(self, window: int) -> None:
        self.intervals: deque[float] = deque(maxlen=window)
        self.commits: deque[float] = deque(maxlen=window)
        self.batches: deque[int] = deque(maxlen=window)
        self.interval_sum = 0.0
        self.commit_sum = 0.0
        # Batch sums let the bucket regress step time on batch size inside the window.
        self.batch_sum = 0.0
        self.batch_sq_sum = 0.0
        self.batch_time_sum = 0.0
        self.count_total = 0
        self.last_seen = 0

    def add(self, interval_s: float, committed_per_request: float, batch: int,
            when: int) -> None:
        """Append one sample, evicting the oldest when the window is full (O(1))."""
        iv = self.intervals
        if len(iv) == iv.maxlen:
            old_t = iv[0]
            old_b = self.batches[0]
            self.interval_sum -= old_t
            self.commit_sum -= self.commits[0]
            self.batch_sum -= old_b
            self.batch_sq_sum -= old_b * old_b
            self.batch_time_sum -= old_b * old_t
        iv.append(interval_s)
        self.commits.append(committed_per_request)
        self.batches.append(batch)
        self.interval_sum += interval_s
        self.commit_sum += committed_per_request
        self.batch_sum += batch
        self.batch_sq_sum += batch * batch
        self.batch_time_sum += batch * interval_s
        self.count_total += 1
        self.last_seen = when
        if self.count_total % _RESUM_EVERY == 0:
            self.interval_sum = sum(iv)
            self.commit_sum = sum(self.commits)
            self.batch_sum = float(sum(self.batches))
            self.batch_sq_sum = float(sum(b * b for b in self.batches))
            self.batch_time_sum = sum(b * t for b, t in zip(self.batches, iv, strict=True))

    @property
    def count(self) -> int:
        """Samples currently in the window."""
        return len(self.intervals)

    def mean_interval(self) -> float:
        """Mean step interval over the window (callers check ``count`` first)."""
        return self.interval_sum / len(self.intervals)

    def measured_goodput(self) -> float:
        """Committed tokens per request per second over the window (ratio of sums)."""
        return self.commit_sum / self.interval_sum if self.interval_sum > 0 else 0.0


class BucketStats:
    """Arms of one power-of-two batch-size bucket."""

    __slots__ = ("arms", "index", "measured", "observations")

    def __init__(self, index: int, num_arms: int, window: int) -> None:
        self.index = index
        self.arms = [ArmWindow(window) for _ in range(num_arms)]
        self.observations = 0  # steady samples ever recorded here (the UCB clock)
        self.measured = 0  # arms with at least one sample in their window

    def add(self, arm: int, interval_s: float, committed_per_request: float, batch: int) -> None:
        """Record one steady sample for ``arm``."""
        self.observations += 1
        a = self.arms[arm]
        if not a.intervals:
            self.measured += 1
        a.add(interval_s, committed_per_request, batch, self.observations)

    def own_times(
        self, batch: int = 0, gamma0: int = 0, slope: float = 0.0
    ) -> list[float | None]:
        """Step time per arm from this bucket's own windows, None when unmeasured. With
        ``batch`` and ``slope`` (seconds per verified token) each window mean is moved from
        its own mean batch to ``batch``: arms measured at different batch sizes become
        comparable."""
        if batch <= 0:
            slope = 0.0
        out: list[float | None] = []
        for i, a in enumerate(self.arms):
            n = len(a.intervals)
            if not n:
                out.append(None)
                continue
            t = a.interval_sum / n
            if slope:
                t += slope * (gamma0 + i + 1) * (batch - a.batch_sum / n)
                t = max(t, 0.1 * a.interval_sum / n)
            out.append(t)
        return out
