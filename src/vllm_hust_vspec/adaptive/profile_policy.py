"""Profile policy: an offline latency model plus online acceptance and latency calibration.

For each eligible gamma it predicts ``goodput(g) = batch * E[g] / (step_s(batch, g) * k[g])``
with ``E[g] = 1 + sum_{k<g} p[k]`` from per-position acceptance learned online (discounted
counts seeded with the profile's default acceptance) and ``k[g]`` an EWMA of observed /
predicted step time per arm (arms never observed use the EWMA over all arms), clamped so a
few odd steps cannot wreck the model. It explores nothing: the profile is trusted for the
shape of the cost curve, the online part only corrects its level and the acceptance.

The profile's ``batch_gamma_table`` (fixed gamma per batch-size range) decides during the
first ``table_steps`` steady steps. Afterwards its ``batch_gamma_table_mode`` says what it is
worth: ``warmup`` (default) hands over to the model; ``preferred`` keeps the table's gamma as
the target at every decision and leaves it only for the model's best arm when that is
predicted to beat the table's arm by the hysteresis margin (the vllm-hust-vspec 0.14
``batch_gamma_policy``). The policy starts at the profile's ``initial_gamma`` (clamped to
the range) when it sets one, else at ``max_gamma``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._limits import ZeroProbe, budget_cap, should_switch, step_toward
from ._validate import require_float, require_int
from .acceptance import AcceptanceModel, halflife_from_ewma_weight
from .cadence import CadencedPolicy
from .feedback import ControllerSnapshot, StepFeedback
from .policy_config import PolicyConfig
from .profile import Profile


@dataclass(frozen=True, slots=True)
class ProfileConfig(PolicyConfig):
    """Knobs of :class:`ProfilePolicy`: the shared ones (:class:`PolicyConfig`) and these."""

    # The acceptance half-life in steps (acceptance_halflife_requests / batch) is clamped to
    # this range.
    acceptance_min_halflife_steps: float = 4.0
    acceptance_max_halflife_steps: float = 64.0
    # 0.14.3's knob: the steady samples an arm needs before its own calibration
    # factor replaces the all-arms one (None: 1).
    min_observations: int | None = None
    # 0.14.3's knob: weight of the newest request in the acceptance estimate;
    # replaces acceptance_halflife_requests by ln(0.5) / ln(1 - ewma_weight) (still clamped).
    ewma_weight: float | None = None
    # How many request-observations the profile's default acceptance is worth.
    acceptance_prior_weight: float = 64.0
    # EWMA rate of observed/predicted step time, and the clamp of the resulting factor.
    calibration_rate: float = 0.05
    calibration_min: float = 0.5
    calibration_max: float = 2.0
    # The profile's batch_gamma_table (if any) decides until this many steady steps were seen
    # (afterwards too, unless the model beats it, when the profile's table mode is preferred).
    table_steps: int = 32
    # While at gamma 0 no acceptance is observed: every ``probe_interval`` decisions draft one
    # token once to re-measure it; the interval doubles (up to ``max_probe_interval``) each
    # time the probe does not turn speculation back on. 0 disables probing.
    probe_interval: int = 16
    max_probe_interval: int = 512
    # 0.14.3's knob. latency_calibration False: the profile's step times are used as
    # they are (no calibration above).
    latency_calibration: bool = True

    def __post_init__(self) -> None:
        self.validate_shared()
        require_float(self, "acceptance_min_halflife_steps", 1e-9, math.inf)
        require_float(self, "acceptance_max_halflife_steps", self.acceptance_min_halflife_steps,
                      math.inf)
        if self.min_observations is not None:
            require_int(self, "min_observations", 1)
        if self.ewma_weight is not None:
            require_float(self, "ewma_weight", 1e-9, 1.0)
        require_int(self, "table_steps", 0)
        require_int(self, "probe_interval", 0)
        require_int(self, "max_probe_interval", self.probe_interval)
        require_float(self, "acceptance_prior_weight", 0.0, math.inf)
        require_float(self, "calibration_rate", 0.0, 1.0)
        require_float(self, "calibration_min", 1e-6, 1.0)
        require_float(self, "calibration_max", 1.0, 1e6)
        if not isinstance(self.latency_calibration, bool):
            raise ValueError(f"ProfileConfig.latency_calibration must be a bool, got "
                             f"{self.latency_calibration!r}")

    @property
    def halflife_requests(self) -> float:
        """Acceptance discount half-life in requests actually used."""
        if self.ewma_weight is None:
            return self.acceptance_halflife_requests
        return halflife_from_ewma_weight(self.ewma_weight)


class ProfilePolicy(CadencedPolicy):
    """Gamma from a fitted profile, corrected online. Implements ``Controller``."""

    def __init__(self, profile: Profile, config: ProfileConfig | None = None) -> None:
        cfg = config or ProfileConfig()
        start = cfg.max_gamma
        if profile.initial_gamma is not None:
            start = min(max(profile.initial_gamma, cfg.min_gamma), cfg.max_gamma)
        super().__init__(cfg.min_gamma, cfg.max_gamma, cfg.control_interval, start,
                         cfg.gamma_stride)
        self.config = cfg
        self.profile = profile
        self._num_arms = cfg.max_gamma - cfg.min_gamma + 1
        self._acc = AcceptanceModel(
            cfg.max_gamma,
            prior=profile.acceptance(max(cfg.max_gamma, 1)),
            halflife_requests=cfg.halflife_requests,
            min_halflife_steps=cfg.acceptance_min_halflife_steps,
            max_halflife_steps=cfg.acceptance_max_halflife_steps,
        )
        self._acc.seed(cfg.acceptance_prior_weight)
        self._calib = 1.0
        self._arm_calib: list[float | None] = [None] * self._num_arms
        self._arm_samples = [0] * self._num_arms
        self._arm_min = 1 if cfg.min_observations is None else cfg.min_observations
        self._steady = 0
        self._probe = ZeroProbe(cfg.probe_interval, cfg.max_probe_interval)
        self._last_batch = 0
        self._last_cap = cfg.max_gamma
        self._last_pred: list[float] = []
        self._last_source = "model"
        # Predicted step times depend only on the batch size: cache them per batch.
        self._time_cache: dict[int, list[float]] = {}

    def observe(self, feedback: StepFeedback) -> None:
        """Update acceptance (every step) and latency calibration (steady steps only)."""
        g = feedback.gamma
        self._acc.observe(feedback)
        batch = feedback.batch_size
        if (not feedback.steady or feedback.interval_s <= 0.0 or batch <= 0
                or g < self._lo or g > self.config.max_gamma
                or self._is_transition(feedback)):
            return
        self._steady += 1
        cfg = self.config
        if not cfg.latency_calibration:
            return
        predicted = self._times(batch)[g - self._lo]
        if predicted <= 0.0:
            return
        ratio = min(max(feedback.interval_s / predicted, cfg.calibration_min),
                    cfg.calibration_max)
        rate = cfg.calibration_rate
        self._calib = _clamp(self._calib + rate * (ratio - self._calib), cfg)
        arm = self._arm_calib[g - self._lo]
        base = self._calib if arm is None else arm
        self._arm_calib[g - self._lo] = _clamp(base + rate * (ratio - base), cfg)
        self._arm_samples[g - self._lo] += 1

    def settled(self) -> bool:
        """Always: costs come from the profile, so every decision is a considered one."""
        return True

    def report(self) -> ControllerSnapshot:
        """Per-arm goodput predicted at the last decision."""
        goodput = {self._lo + i: p * self._last_batch
                   for i, p in enumerate(self._last_pred[: self._num_arms])}
        return ControllerSnapshot("profile", self._gamma, goodput)

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state for metrics and traces."""
        arms = []
        for i in range(self._num_arms):
            pred = self._last_pred[i] if i < len(self._last_pred) else None
            arms.append({
                "gamma": self._lo + i,
                "eligible": self._lo + i <= self._last_cap,
                "predicted_goodput": pred * self._last_batch if pred is not None else None,
                "calibration": self._arm_calib[i],
            })
        out: dict[str, Any] = {
            "policy": "profile",
            "profile": self.profile.name,
            "gamma": self._gamma,
            "batch_size": self._last_batch,
            "decisions": self._calls,
            "steady_observations": self._steady,
            "switches": self._switches,
            "source": self._last_source,
            "calibration": self._calib,
            "acceptance_probes": self._probe.probes,
            "arms": arms,
        }
        out.update(self._acc.snapshot())
        return out

    @property
    def gamma(self) -> int:
        """The last decision."""
        return self._gamma

    def predicted_goodput(self, batch_size: int, token_budget: int = 0) -> list[float]:
        """Predicted tokens/s for each eligible gamma from min_gamma up (no side effects)."""
        cap = budget_cap(batch_size, token_budget, self._lo, self.config.max_gamma)
        return [batch_size * e for e in self._estimates(batch_size, cap)]

    def _times(self, batch: int) -> list[float]:
        times = self._time_cache.get(batch)
        if times is None:
            times = [self.profile.step_time(batch, self._lo + i) for i in range(self._num_arms)]
            if len(self._time_cache) < 4096:
                self._time_cache[batch] = times
        return times

    def _estimates(self, batch: int, cap: int) -> list[float]:
        times = self._times(max(batch, 1))
        expected = self._acc.expected_committed()
        calib = self._calib
        out = []
        arm_min = self._arm_min
        samples = self._arm_samples
        for i in range(cap - self._lo + 1):
            k = self._arm_calib[i]
            # An arm's own factor is trusted only after min_observations of its steps.
            t = times[i] * (calib if k is None or samples[i] < arm_min else k)
            out.append(expected[self._lo + i] / t if t > 0 else math.inf)
        return out

    def _choose(self, batch: int, cap: int, cur: int) -> int:
        cfg = self.config
        self._last_batch = batch
        self._last_cap = cap
        est = self._estimates(batch, cap)
        self._last_pred = est
        if self._stride > 1:
            est = list(est)
            self._off_grid(est)
        warmup = self._steady < cfg.table_steps
        if warmup or self._prefers_table:
            table = self.profile.table_gamma(batch)
            if table is not None:
                target = min(max(table, self._lo), cap)
                if warmup:
                    self._last_source = "table"
                    return step_toward(cur, target, cfg.max_gamma_step)
                return self._prefer(est, cur, cap, target)
        self._last_source = "model"
        best = max(range(len(est)), key=est.__getitem__)
        cur_i = cur - self._lo
        if best != cur_i and should_switch(est[best], est[cur_i], cfg.hysteresis):
            if cur == 0:
                self._probe.left_zero()
            return step_toward(cur, best + self._lo, cfg.max_gamma_step)
        if cur == 0 and cap >= 1 and self._probe.due():
            return 1
        return cur

    @property
    def _prefers_table(self) -> bool:
        return self.profile.batch_gamma_table_mode == "preferred"

    def _prefer(self, est: list[float], cur: int, cap: int, table: int) -> int:
        """Preferred table mode: head for the table's gamma unless the model's best arm beats
        it by the hysteresis margin (ties go to the smaller gamma)."""
        cfg = self.config
        best = max(range(len(est)), key=est.__getitem__)
        target = table
        self._last_source = "table"
        if best != table - self._lo and should_switch(est[best], est[table - self._lo],
                                                      cfg.hysteresis):
            target = best + self._lo
            self._last_source = "model"
        if cur == 0 and target > 0:
            self._probe.left_zero()
        elif cur == 0 and target == 0 and cap >= 1 and self._probe.due():
            return 1
        return step_toward(cur, target, cfg.max_gamma_step)


def _clamp(value: float, cfg: ProfileConfig) -> float:
    return min(max(value, cfg.calibration_min), cfg.calibration_max)
