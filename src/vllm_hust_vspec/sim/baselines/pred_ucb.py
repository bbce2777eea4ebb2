"""vllm-hust-vSpec 0.14.3's online controller ("Online-UCB"), as a baseline.

It is vSpec's own UCB1 online algorithm (:mod:`vllm_hust_vspec.adaptive.ucb`, tested decision
for decision against 0.14.3's code), configured as 0.14.3's measured Ascend runs
were: ``pred-ucb`` with its draft-model B128 knobs (control interval 2, hysteresis 0.05,
exploration 0.01, window 32, one warm-up sample, asynchronous scheduling: one in-flight frame,
graph-backed start at gamma 2, gammas from 1), ``pred-ucb-eagle`` with its EAGLE run's
(hysteresis 0.2, return to the anchor, no graph-backed start).

Left out, as the simulator cannot show them: the one-step lag of async feedback (its
feedback is never late) and the gamma-0 latch (these runs play gamma 1 and up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...adaptive.ucb import Ucb1Controller, batch_bucket
from ...adaptive.ucb_config import UcbConfig


@dataclass(frozen=True, slots=True)
class PredUcbKnobs:
    """vllm-hust-vSpec 0.14.3's online knobs (its defaults for the B128 GSM8K draft run)."""

    control_interval: int = 2
    hysteresis: float = 0.05
    exploration: float = 0.01
    window: int = 32
    warmup_samples: int = 1
    warmup_return: str = "best"
    initial_gamma: int | None = 2
    max_gamma_step: int = 1
    inflight_padding: int = 1

    def config(self, min_gamma: int, max_gamma: int) -> UcbConfig:
        """The UCB1 configuration over ``max(1, min_gamma)..max_gamma`` (the runs' range)."""
        lo = max(1, min_gamma)
        hi = max(lo, max_gamma)
        init = self.initial_gamma
        if init is not None and not lo <= init <= hi:
            init = None
        return UcbConfig(
            min_gamma=lo, max_gamma=hi, control_interval=self.control_interval,
            hysteresis=self.hysteresis, exploration=self.exploration, window=self.window,
            warmup_samples=self.warmup_samples, warmup_return=self.warmup_return,
            initial_gamma=init, max_gamma_step=self.max_gamma_step,
            inflight_padding=self.inflight_padding)


class V014Ucb(Ucb1Controller):
    """``pred-ucb``: the UCB1 online algorithm with 0.14.3's run knobs."""

    def __init__(self, min_gamma: int, max_gamma: int,
                 knobs: PredUcbKnobs | None = None) -> None:
        self.knobs = knobs or PredUcbKnobs()
        super().__init__(self.knobs.config(min_gamma, max_gamma))

    def snapshot(self) -> dict[str, Any]:
        """The UCB1 snapshot under the baseline's name."""
        return {**super().snapshot(), "policy": "pred-ucb"}


__all__ = ["PredUcbKnobs", "V014Ucb", "batch_bucket"]
