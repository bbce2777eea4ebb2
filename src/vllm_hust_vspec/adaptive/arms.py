"""Per-bucket, per-arm state: the filtered cost (see load.py) and a window for reports."""

from __future__ import annotations

from collections import deque

_RESUM_EVERY = 4096  # re-add window sums now and then so float drift cannot accumulate


class ArmWindow:
    """One gamma arm of one bucket.

    ``mu`` / ``var`` / ``seen`` are the arm's load-free log cost as kept by
    :class:`~vllm_hust_vspec.adaptive.load.TimeFilter` (what decisions use). The window of the
    last ``window`` steady samples (load-normalised interval, committed per request) only
    feeds reports: measured goodput and mean interval in ``snapshot()``.
    """

    __slots__ = ("commit_sum", "commits", "count_total", "interval_sum", "intervals", "mu",
                 "seeded", "seen", "var")

    def __init__(self, window: int) -> None:
        self.intervals: deque[float] = deque(maxlen=window)
        self.commits: deque[float] = deque(maxlen=window)
        self.interval_sum = 0.0
        self.commit_sum = 0.0
        self.count_total = 0
        self.mu = 0.0
        self.var = 0.0  # 0: never measured
        self.seen = 0
        self.seeded = False  # its cost came from a prior (a persisted state) before any sample

    def add(self, interval_s: float, committed_per_request: float) -> None:
        """Append one sample, evicting the oldest when the window is full (O(1))."""
        iv = self.intervals
        if len(iv) == iv.maxlen:
            self.interval_sum -= iv[0]
            self.commit_sum -= self.commits[0]
        iv.append(interval_s)
        self.commits.append(committed_per_request)
        self.interval_sum += interval_s
        self.commit_sum += committed_per_request
        self.count_total += 1
        if self.count_total % _RESUM_EVERY == 0:
            self.interval_sum = sum(iv)
            self.commit_sum = sum(self.commits)

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

    __slots__ = ("arms", "index", "measured", "observations", "sync_zero")

    def __init__(self, index: int, num_arms: int, window: int) -> None:
        self.index = index
        self.arms = [ArmWindow(window) for _ in range(num_arms)]
        # Gamma-0 steps in which the drafter still ran, when arm 0 means "drafter skipped"
        # (OnlineConfig.zero_skips_drafter): kept apart, only to put a prior on arm 0.
        self.sync_zero = ArmWindow(window)
        self.observations = 0  # steady samples ever recorded here (the UCB clock)
        self.measured = 0  # arms with at least one sample

    def add(self, arm: int, interval_s: float, committed_per_request: float) -> None:
        """Record one steady sample for ``arm`` in its report window."""
        self.observations += 1
        a = self.arms[arm]
        if not a.count_total and not a.seeded:
            self.measured += 1
        a.add(interval_s, committed_per_request)

    def seed(self, arm: int) -> None:
        """Count ``arm`` as measured: its filtered cost came from a prior, not a step here
        (the report window stays empty until a real sample)."""
        a = self.arms[arm]
        if not a.count_total and not a.seeded:
            self.measured += 1
        a.seeded = True
