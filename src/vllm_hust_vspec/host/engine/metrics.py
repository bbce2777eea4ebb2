"""vspec_ Prometheus metrics, recorded in the EngineCore process where the controller runs.

Where they show up:

* In-process engine (``LLM`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the default
  ``prometheus_client.REGISTRY`` of the one process.
* ``vllm serve`` (EngineCore is a separate process): vLLM's ``/metrics`` is served by the API
  server from ``vllm.v1.metrics.prometheus.get_prometheus_registry()``, which switches to a
  ``MultiProcessCollector`` whenever ``PROMETHEUS_MULTIPROC_DIR`` is set. When that variable
  is exported (to an empty directory) before ``vllm serve`` starts, prometheus_client in every
  process, EngineCore included, writes its samples to files there and the API server's
  ``/metrics`` aggregates them: the vspec_ metrics appear next to vLLM's own. The launcher
  sets it; with a plain ``vllm serve`` the user sets it (vLLM itself only does so for
  ``--api-server-count > 1``). Gauges use ``multiprocess_mode="mostrecent"``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("vllm_hust_vspec.metrics")

PREFIX = "vspec_"


@dataclass
class VSpecMetrics:
    """The metric objects (created once per process by :func:`get_metrics`).

    Per-step figures are summed in plain Python and pushed to Prometheus by :meth:`flush`
    (the hook flushes every few steps and whenever the engine goes idle): a labelled
    Prometheus update costs microseconds, which on a small model's millisecond step was a
    few percent of the step.
    """

    gamma_steps: Any
    gamma: Any
    arm_reward: Any
    fallbacks: Any
    draft_per_pos: Any
    accepted_per_pos: Any
    committed: Any
    refill_holds: Any
    verify_lengths: Any
    _gamma_counts: dict[int, int] = field(default_factory=dict)
    _last_gamma: int | None = None
    _drafted: list[int] = field(default_factory=list)
    _accepted: list[int] = field(default_factory=list)
    _committed: int = 0
    _lengths: dict[int, int] = field(default_factory=dict)
    _children: dict[tuple[int, str], Any] = field(default_factory=dict)

    def observe_decision(self, gamma: int) -> None:
        """One scheduler step chose ``gamma``."""
        counts = self._gamma_counts
        counts[gamma] = counts.get(gamma, 0) + 1
        self._last_gamma = gamma

    def observe_step(
        self, drafted: tuple[int, ...], accepted: tuple[int, ...], committed: int
    ) -> None:
        """Per-position drafted/accepted counts of one verified step (correct for any K)."""
        self._committed += committed
        if not drafted:
            return
        lengths = self._lengths
        for n in set(drafted):
            lengths[n] = lengths.get(n, 0) + drafted.count(n)
        width = max(drafted)
        if width <= 0:
            return
        d, a = self._drafted, self._accepted
        if len(d) < width:
            d.extend([0] * (width - len(d)))
            a.extend([0] * (width - len(a)))
        for n_d, n_a in zip(drafted, accepted, strict=True):
            for i in range(n_d):
                d[i] += 1
            for i in range(min(n_a, n_d)):
                a[i] += 1

    def flush(self) -> None:
        """Push the sums gathered since the last flush to Prometheus."""
        for gamma, n in self._gamma_counts.items():
            self._child(self.gamma_steps, "gamma", gamma).inc(n)
        self._gamma_counts.clear()
        if self._last_gamma is not None:
            self.gamma.set(self._last_gamma)
        if self._committed:
            self.committed.inc(self._committed)
            self._committed = 0
        for pos, (n_d, n_a) in enumerate(zip(self._drafted, self._accepted, strict=True)):
            if n_d:
                self._child(self.draft_per_pos, "position", pos).inc(n_d)
            if n_a:
                self._child(self.accepted_per_pos, "position", pos).inc(n_a)
        self._drafted.clear()
        self._accepted.clear()
        for n, count in self._lengths.items():
            self._child(self.verify_lengths, "length", n).inc(count)
        self._lengths.clear()

    def observe_arms(self, rewards: Mapping[int, float]) -> None:
        """Publish the controller's per-arm reward estimates."""
        for gamma, value in rewards.items():
            self._child(self.arm_reward, "gamma", gamma).set(float(value))

    def _child(self, metric: Any, label: str, value: int) -> Any:
        key = (id(metric), str(value))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(**{label: str(value)})
        return child


_METRICS: VSpecMetrics | None = None


def get_metrics() -> VSpecMetrics:
    """Create (once per process) and return the vspec_ metrics."""
    global _METRICS
    if _METRICS is None:
        _METRICS = make_metrics()
    return _METRICS


def make_metrics(registry: Any = None) -> VSpecMetrics:
    """Create the vspec_ metric objects in ``registry`` (None: prometheus_client's default
    registry, which is what vLLM's /metrics reads). In multiprocess mode prometheus_client
    opens its sample files in ``PROMETHEUS_MULTIPROC_DIR`` as the metrics are created; a
    folder that cannot take them raises an OSError naming it."""
    from vllm_hust_vspec.host import startup_faults

    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    try:
        startup_faults.inject("metrics")
        metrics = _create(registry)
    except OSError as exc:
        raise OSError(f"vSpec metrics: cannot create the vspec_ metrics (their sample files "
                      f"go to PROMETHEUS_MULTIPROC_DIR={folder!r}): {exc}") from exc
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0" and not folder:
        logger.info(
            "vSpec: PROMETHEUS_MULTIPROC_DIR is not set; the vspec_ metrics live in the "
            "EngineCore process and will not appear on the API server's /metrics. Export "
            "PROMETHEUS_MULTIPROC_DIR=<empty dir> before 'vllm serve' (the launcher does)."
        )
    return metrics


def _create(registry: Any) -> VSpecMetrics:
    from prometheus_client import REGISTRY, Counter, Gauge

    reg = REGISTRY if registry is None else registry

    return VSpecMetrics(
        gamma_steps=Counter(
            PREFIX + "gamma_steps", "Engine steps by the gamma the controller chose.", ["gamma"],
            registry=reg,
        ),
        gamma=Gauge(
            PREFIX + "gamma", "Gamma chosen at the latest engine step.",
            multiprocess_mode="mostrecent", registry=reg,
        ),
        arm_reward=Gauge(
            PREFIX + "arm_reward_tokens_per_second",
            "Controller's goodput estimate per gamma arm (committed tokens/s).",
            ["gamma"],
            multiprocess_mode="mostrecent", registry=reg,
        ),
        fallbacks=Counter(
            PREFIX + "controller_fallbacks",
            "Controller failures that switched vSpec to the fixed upper-bound gamma.",
            registry=reg,
        ),
        draft_per_pos=Counter(
            PREFIX + "draft_tokens_per_pos",
            "Draft tokens verified per draft position (with variable gamma).",
            ["position"], registry=reg,
        ),
        accepted_per_pos=Counter(
            PREFIX + "accepted_tokens_per_pos",
            "Accepted draft tokens per draft position.",
            ["position"], registry=reg,
        ),
        committed=Counter(PREFIX + "committed_tokens", "Tokens committed by decode steps.",
                          registry=reg),
        refill_holds=Counter(
            PREFIX + "refill_holds",
            "Steps where cohort refill admission held waiting requests back.",
            registry=reg,
        ),
        verify_lengths=Counter(
            PREFIX + "verify_length_requests",
            "Decoding request-steps by the number of drafts verified (the verify-length "
            "histogram; per-request lengths spread it).",
            ["length"], registry=reg,
        ),
    )


__all__ = ["PREFIX", "VSpecMetrics", "get_metrics", "make_metrics"]
