"""The scheduler hook's telemetry (EngineCore process): vspec_ metrics and the trace."""

from __future__ import annotations

from vllm_hust_vspec.adaptive.step_loop import GuardedController
from vllm_hust_vspec.adaptive.trace_record import TraceRecord
from vllm_hust_vspec.host.engine.metrics import VSpecMetrics
from vllm_hust_vspec.host.engine.trace import TraceWriter

# Push buffered step metrics and per-arm reward estimates every this many observed steps, and
# whenever the engine goes idle (an idle server's /metrics is exact); in the first this-many
# steps also every step until the controller has arm estimates to show.
METRICS_FLUSH_EVERY = 64


class Telemetry:
    """Metrics (buffered, flushed every ``METRICS_FLUSH_EVERY`` steps and when idle) and the
    trace (one :class:`TraceRecord` per completed step)."""

    __slots__ = ("metrics", "trace", "_observed", "_arms_published")

    def __init__(self, metrics: VSpecMetrics | None, trace: TraceWriter | None) -> None:
        self.metrics = metrics
        self.trace = trace
        self._observed = 0
        self._arms_published = False

    def decision(self, gamma: int) -> None:
        """One scheduled step's gamma."""
        if self.metrics is not None:
            self.metrics.observe_decision(gamma)

    def step(self, drafted: tuple[int, ...], accepted: tuple[int, ...], committed: int,
             idle: bool, controller: GuardedController) -> None:
        """One completed step's counts; flushes on the cadence and when the engine is idle."""
        metrics = self.metrics
        if metrics is None:
            return
        metrics.observe_step(drafted, accepted, committed)
        self._observed += 1
        n = self._observed
        if (idle or n % METRICS_FLUSH_EVERY == 1
                or (n <= METRICS_FLUSH_EVERY and not self._arms_published)):
            self.flush(controller)

    def record(self, record: TraceRecord, idle: bool) -> None:
        """One completed step's trace line (handed to the writer in batches, and when idle)."""
        if self.trace is None:
            return
        self.trace.write(record)  # encoded by the writer thread
        if idle:
            self.trace.push()

    def flush(self, controller: GuardedController) -> None:
        """Push buffered step metrics and the controller's per-arm estimates."""
        if self.metrics is None:
            return
        self.metrics.flush()
        report = controller.report()
        if report is not None and report.arm_goodput:
            # The report describes the last batch-size bucket, which may not be measured yet
            # (the tail of a run): the gauges then keep their last values.
            self.metrics.observe_arms(report.arm_goodput)
            self._arms_published = True

    def close(self, controller: GuardedController) -> None:
        """Final flush of both."""
        self.flush(controller)
        if self.trace is not None:
            self.trace.close()


__all__ = ["METRICS_FLUSH_EVERY", "Telemetry"]
