"""A tiny synthetic serving environment for controller unit tests (no simulator needed).

Step time = a + b * batch * (1 + g_verify) + c * g_draft (+ overhead when drafting), times
Gaussian noise; every request accepts each next draft position with probability ``alpha``
(geometric acceptance). As in vLLM, the gamma decided at step t is drafted after step t and
verified at step t + 1, so the feedback of a step carries the previous decision.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from vllm_hust_vspec.adaptive import Controller, ControllerSnapshot, StepFeedback


@dataclass
class SynthEnv:
    a: float = 0.010
    b: float = 2e-5
    c: float = 0.001
    overhead: float = 0.0
    alpha: float = 0.7
    batch: int = 32
    budget: int = 8192
    noise: float = 0.05
    seed: int = 0
    scale: float = 1.0  # multiplies every step time (reward magnitude)
    prev: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def mean_time(self, g_verify: int, g_draft: int) -> float:
        t = self.a + self.b * self.batch * (1 + g_verify) + self.c * g_draft
        if g_draft:
            t += self.overhead
        return t * self.scale

    def goodput(self, g: int) -> float:
        """Expected committed tokens / s when running gamma ``g`` steadily."""
        return self.batch * sum(self.alpha ** k for k in range(g + 1)) / self.mean_time(g, g)

    def best_gamma(self, max_gamma: int = 4) -> int:
        return max(range(max_gamma + 1), key=self.goodput)

    def step(self, decided: int) -> StepFeedback:
        gv = self.prev
        rnd = self.rng.random
        acc = []
        for _ in range(self.batch):
            a = 0
            while a < gv and rnd() < self.alpha:
                a += 1
            acc.append(a)
        t = self.mean_time(gv, decided) * max(0.2, 1.0 + self.noise * self.rng.gauss(0.0, 1.0))
        self.prev = decided
        return StepFeedback(
            batch_size=self.batch, gamma=gv, drafted=(gv,) * self.batch, accepted=tuple(acc),
            committed=sum(acc) + self.batch, interval_s=t, token_budget=self.budget,
        )


def run(
    ctrl: Controller,
    env: SynthEnv,
    steps: int,
    schedule: Callable[[SynthEnv, int], None] | None = None,
) -> tuple[float, list[int]]:
    """Drive ``ctrl`` for ``steps``; returns (goodput tokens/s, decisions)."""
    tokens = 0
    seconds = 0.0
    decisions = []
    for i in range(steps):
        if schedule is not None:
            schedule(env, i)
        g = ctrl.decide(env.batch, env.budget)
        fb = env.step(g)
        ctrl.observe(fb)
        tokens += fb.committed
        seconds += fb.interval_s
        decisions.append(g)
    return tokens / seconds, decisions


class Fixed:
    """Always ``gamma`` (reference for the best fixed arm)."""

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def decide(self, batch_size: int, token_budget: int) -> int:
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        pass

    def settled(self) -> bool:
        return True

    def report(self) -> ControllerSnapshot:
        return ControllerSnapshot("fixed", self.gamma)

    def snapshot(self) -> dict[str, object]:
        return {}
