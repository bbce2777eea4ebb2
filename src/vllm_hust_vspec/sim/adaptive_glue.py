"""Build vSpec's own controllers ('online', 'profile') via the adaptive package.

The 'profile' policy needs an offline profile. We make one the way a user would: "measure"
decode steps over a sweep of batch sizes, gammas and context lengths -- here by asking the
scenario's cost model, with a little seeded measurement noise -- and fit them with
``adaptive.fit_profile``. The profile carries the adaptive package's default acceptance: a
profiler measures hardware cost, acceptance is learned online.
"""

from __future__ import annotations

import atexit
import json
import math
import random
import shutil
import tempfile
from pathlib import Path

from ..adaptive import FitError, FitSample, build_controller, fit_profile
from ..adaptive._limits import bucket_batches, calibration_batches
from ..adaptive.cost_prior import CostPrior, CostSample
from ..adaptive.feedback import Controller
from .scenario import Scenario

_NOISE = 0.03  # relative std of the simulated step-time measurements
_profile_dir: Path | None = None
_profile_paths: dict[tuple[str, int, int], Path] = {}


def build_ours(name: str, scenario: Scenario, seed: int = 0, sampler_seed: int = 0
               ) -> Controller:
    """``online`` or ``profile`` for ``scenario``'s gamma range (``seed``: the run's, for the
    start-up profile's errors; ``sampler_seed``: the online controller's Thompson sampler)."""
    if name == "online":
        return build_online(scenario, host_prior(scenario, seed), sampler_seed)
    path = profile_path_for(scenario)
    return build_controller("profile", min_gamma=scenario.min_gamma,
                            max_gamma=scenario.max_gamma, profile_path=str(path))


def build_online(scenario: Scenario, prior: CostPrior | None, sampler_seed: int = 0
                 ) -> Controller:
    """The online controller as host/engine/controller_factory.py builds it for ``scenario``, from
    ``prior``: on a sticky host arm 0 skips the drafter. The host's sampler seed is 0."""
    return build_controller("online", min_gamma=scenario.min_gamma,
                            max_gamma=scenario.max_gamma, cost_prior=prior,
                            zero_skips_drafter=scenario.gamma0 == "sticky",
                            seed=sampler_seed)


def host_prior(scenario: Scenario, seed: int) -> CostPrior | None:
    """The cost prior the host gives a fresh controller in ``scenario``: the start-up
    calibration's real steps, else the dummy-batch profile, else none."""
    prior = (startup_prior(scenario, seed) if scenario.startup_profile is not None
             else None)
    if scenario.startup_calibration is not None:
        prior = calibration_prior(scenario, seed, prior)
    return prior


# The level of a dummy batch against a real step (the controller measures the level afresh).
_DUMMY_LEVEL = 0.5


def startup_prior(scenario: Scenario, seed: int) -> CostPrior:
    """What host/engine/cost_prior/dummy_batches.py gives a fresh controller: every power-of-two
    batch up to ``max_num_seqs`` and every gamma, the drafter skipped and sync zeros included,
    priced by the cost model over empty contexts (dummy batches have none), at half the real level,
    the drafter-skipping zero ``scenario.startup_zero_bias`` times dearer, and each off by up to
    ``scenario.startup_profile`` (uniform, seeded by run and shape); the target alone over every
    profiled token count as its verify times."""
    err = scenario.startup_profile or 0.0
    cost = scenario.cost
    shapes = [(0, False), (0, True)] + [(g, True) for g in range(1, scenario.max_gamma + 1)]
    batches = bucket_batches(scenario.max_num_seqs)
    samples: list[CostSample] = []
    for b in batches:
        for g, ran in shapes:
            t = cost.step_time(b, b * g, g, b, 0, 0, zero_pass=ran and g == 0)
            u = random.Random(f"vspec-startup/{scenario.name}/{seed}/{b}/{g}/{ran}").uniform(
                -err, err)
            bias = 1.0 if ran else scenario.startup_zero_bias
            samples.append(CostSample(b, g, t * _DUMMY_LEVEL * bias * (1.0 + u),
                                      drafter_ran=ran))
    tokens = sorted({b * (1 + g) for b in batches for g in range(scenario.max_gamma + 1)})
    verify = tuple((t, cost.step_time(t, 0, 0, 0, 0, 0) * _DUMMY_LEVEL) for t in tokens)
    return CostPrior("start-up profile (simulated)", tuple(samples), needs_anchor=True,
                     verify=verify)


# The calibration's requests: 64-token prompts, timed over their first ~40 decode steps.
_CALIBRATION_CONTEXT = 84
_CALIBRATION_PROMPT = 64


def calibration_prior(scenario: Scenario, seed: int, profile: CostPrior | None) -> CostPrior:
    """What host/engine/cost_prior/calibration.py gives a fresh controller: real steps at the middle
    of every batch bucket up to ``max_num_seqs`` (``calibration_batches``), every gamma from 1
    up, and gamma 0 as the host plays a settled zero (reported as drafter-skipping on a
    sticky host; its first pass run on a sync one), priced by the cost model at the
    calibration's contexts, each the median of three steps with the scenario's jitter (the
    host keeps the median over its rounds, each relative to its round's level, so the slow
    load and a lone stall drop out) and off by up to ``scenario.startup_calibration`` more
    (uniform; both seeded by run and shape); per arm also one step admitting a 64-token
    request in place of one of the cohort's (one step's jitter); the profile's target-alone
    times come along scaled onto the real level, as the host scales them."""
    err = scenario.startup_calibration or 0.0
    jitter = scenario.timing_noise.jitter_sigma
    cost = scenario.cost
    skipped = scenario.gamma0 == "sticky"  # how the host reports a settled zero
    zero_pass = scenario.gamma0 == "sync"
    samples: list[CostSample] = []
    for b in calibration_batches(scenario.max_num_seqs):
        for g in range(scenario.min_gamma, scenario.max_gamma + 1):
            ran = g > 0 or not skipped
            t = cost.step_time(b, b * g, g, b, 0, b * _CALIBRATION_CONTEXT,
                               zero_pass=g == 0 and zero_pass)
            rng = random.Random(f"vspec-calibration/{scenario.name}/{seed}/{b}/{g}")
            u = rng.uniform(-err, err)
            steps = sorted(math.exp(jitter * rng.gauss(0.0, 1.0)) for _ in range(3))
            samples.append(CostSample(b, g, t * (1.0 + u) * steps[1], drafter_ran=ran,
                                      count=3))
            if b > 1:
                # the step admitting a fresh request in place of one of the cohort's (one step)
                d = b - 1
                t = cost.step_time(d, d * g, g, d, _CALIBRATION_PROMPT, d * _CALIBRATION_CONTEXT,
                                   zero_pass=g == 0 and zero_pass)
                u = rng.uniform(-err, err)
                samples.append(CostSample(d, g, t * (1.0 + u) * math.exp(
                    jitter * rng.gauss(0.0, 1.0)), drafter_ran=ran,
                    prefill_tokens=_CALIBRATION_PROMPT))
    verify = (tuple((t, sec / _DUMMY_LEVEL) for t, sec in profile.verify)
              if profile is not None else ())
    return CostPrior("start-up calibration (simulated)", tuple(samples), verify=verify)


def profile_samples(scenario: Scenario, repeats: int = 2) -> list[FitSample]:
    """Steady decode steps priced by the scenario's cost model, as a profiler would record."""
    rng = random.Random(f"vspec-profile/{scenario.name}")
    w = scenario.workload
    typical_ctx = w.prompt_len.mean_hint + 0.5 * w.output_len.mean_hint
    # A profiler sweeps a few batch sizes even for a batch-1 deployment: the draft cost per
    # request cannot be told from the fixed draft cost at a single batch size.
    top = max(scenario.max_num_seqs, 4)
    batches = [b for b in bucket_batches(top) if b < top] + [top]
    out: list[FitSample] = []
    for batch in batches:
        for gamma in range(scenario.min_gamma, scenario.max_gamma + 1):
            for ctx_scale in (0.5, 1.5):
                ctx = batch * typical_ctx * ctx_scale
                for _ in range(repeats):
                    t = scenario.cost.steady_time(batch, gamma, int(ctx))
                    t *= max(0.5, 1.0 + rng.gauss(0.0, _NOISE))
                    out.append(FitSample(batch_size=batch, gamma=gamma,
                                         num_batched_tokens=batch * (1 + gamma),
                                         context_tokens=ctx, step_s=t))
    return out


def profile_path_for(scenario: Scenario) -> Path:
    """Fit (once per process) and write the scenario's profile; returns the JSON path."""
    global _profile_dir
    key = (scenario.name, scenario.min_gamma, scenario.max_gamma)
    if key in _profile_paths:
        return _profile_paths[key]
    samples = profile_samples(scenario)
    try:
        result = fit_profile(samples, name=f"sim-{scenario.name}", method="sim")
    except FitError:
        # context cost may be absent from the cost model (measured tables): drop its terms
        result = fit_profile(samples, context_terms=False, name=f"sim-{scenario.name}",
                             method="sim")
    if _profile_dir is None:
        _profile_dir = Path(tempfile.mkdtemp(prefix="vspec-sim-profiles-"))
        atexit.register(shutil.rmtree, _profile_dir, True)
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in scenario.name)
    path = _profile_dir / f"{safe}-{scenario.min_gamma}-{scenario.max_gamma}.json"
    path.write_text(json.dumps(result.profile.to_dict(), indent=2), encoding="utf-8")
    _profile_paths[key] = path
    return path
