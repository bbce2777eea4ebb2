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
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("vllm_hust_vspec.metrics")

PREFIX = "vspec_"


@dataclass
class VSpecMetrics:
    """The metric objects (created once per process by :func:`get_metrics`)."""

    gamma_steps: Any
    gamma: Any
    arm_reward: Any
    fallbacks: Any
    draft_per_pos: Any
    accepted_per_pos: Any
    committed: Any
    refill_holds: Any

    def observe_decision(self, gamma: int) -> None:
        """One scheduler step chose ``gamma``."""
        self.gamma_steps.labels(gamma=str(gamma)).inc()
        self.gamma.set(gamma)

    def observe_step(
        self, drafted: tuple[int, ...], accepted: tuple[int, ...], committed: int
    ) -> None:
        """Per-position drafted/accepted counts of one verified step (correct for any K)."""
        if committed:
            self.committed.inc(committed)
        if not drafted:
            return
        width = max(drafted)
        if width <= 0:
            return
        d = [0] * width
        a = [0] * width
        for n_d, n_a in zip(drafted, accepted, strict=True):
            for i in range(n_d):
                d[i] += 1
            for i in range(min(n_a, n_d)):
                a[i] += 1
        for pos in range(width):
            if d[pos]:
                self.draft_per_pos.labels(position=str(pos)).inc(d[pos])
            if a[pos]:
                self.accepted_per_pos.labels(position=str(pos)).inc(a[pos])

    def observe_arms(self, rewards: Mapping[int, float]) -> None:
        """Publish the controller's per-arm reward estimates."""
        for gamma, value in rewards.items():
            self.arm_reward.labels(gamma=str(gamma)).set(float(value))


_METRICS: VSpecMetrics | None = None
_REWARD_KEYS = ("reward", "estimated_goodput", "measured_goodput", "mean_reward", "estimate")


def get_metrics() -> VSpecMetrics:
    """Create (once per process) and return the vspec_ metrics."""
    global _METRICS
    if _METRICS is not None:
        return _METRICS
    from prometheus_client import Counter, Gauge

    _METRICS = VSpecMetrics(
        gamma_steps=Counter(
            PREFIX + "gamma_steps", "Engine steps by the gamma the controller chose.", ["gamma"]
        ),
        gamma=Gauge(
            PREFIX + "gamma", "Gamma chosen at the latest engine step.",
            multiprocess_mode="mostrecent",
        ),
        arm_reward=Gauge(
            PREFIX + "arm_reward_tokens_per_second",
            "Controller's goodput estimate per gamma arm (committed tokens/s).",
            ["gamma"],
            multiprocess_mode="mostrecent",
        ),
        fallbacks=Counter(
            PREFIX + "controller_fallbacks",
            "Controller failures that switched vSpec to the fixed upper-bound gamma.",
        ),
        draft_per_pos=Counter(
            PREFIX + "draft_tokens_per_pos",
            "Draft tokens verified per draft position (with variable gamma).",
            ["position"],
        ),
        accepted_per_pos=Counter(
            PREFIX + "accepted_tokens_per_pos",
            "Accepted draft tokens per draft position.",
            ["position"],
        ),
        committed=Counter(PREFIX + "committed_tokens", "Tokens committed by decode steps."),
        refill_holds=Counter(
            PREFIX + "refill_holds",
            "Steps where cohort refill admission held waiting requests back.",
        ),
    )
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0" and not os.environ.get(
        "PROMETHEUS_MULTIPROC_DIR"
    ):
        logger.info(
            "vSpec: PROMETHEUS_MULTIPROC_DIR is not set; the vspec_ metrics live in the "
            "EngineCore process and will not appear on the API server's /metrics. Export "
            "PROMETHEUS_MULTIPROC_DIR=<empty dir> before 'vllm serve' (the launcher does)."
        )
    return _METRICS


def arm_rewards(snapshot: Mapping[str, Any]) -> dict[int, float]:
    """Per-arm reward estimates from a controller snapshot, whatever its exact shape.

    Understands the online controller's ``{"arms": [{"gamma": g, "estimated_goodput": x,
    "measured_goodput": y}, ...]}`` as well as ``{"arms": {gamma: {"reward": x}}}`` and
    ``{"rewards": {gamma: x}}``. Arms without an estimate yet are left out.
    """
    out: dict[int, float] = {}
    arms = snapshot.get("arms", snapshot.get("rewards"))
    items: list[tuple[Any, Any]] = []
    if isinstance(arms, Mapping):
        items = list(arms.items())
    elif isinstance(arms, list):
        items = [(a.get("gamma"), a) for a in arms if isinstance(a, Mapping)]
    for key, value in items:
        if isinstance(value, Mapping):
            value = next(
                (
                    value[k]
                    for k in _REWARD_KEYS
                    if value.get(k) is not None
                ),
                None,
            )
        try:
            if value is not None:
                out[int(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


__all__ = ["PREFIX", "VSpecMetrics", "arm_rewards", "get_metrics"]
