"""The start-up cost profile's arithmetic (host/engine/cost_prior/dummy_batches.py) and how
controllers take a
prior of dummy batches (CostPrior.needs_anchor)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from vllm_hust_vspec.adaptive import OnlineConfig, OnlineController
from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample
from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.host.engine.cost_prior import dummy_batches as startup_costs
from vllm_hust_vspec.settings import Settings
from vllm_hust_vspec.sim.noise import TimingNoise

K = 4


def _target(tokens: int) -> float:
    return 1e-3 + 2e-5 * tokens


def _pass(tokens: int) -> float:
    return 3e-4 + 1e-5 * tokens


def _timings(batches: list[int], passes: int) -> tuple[dict[int, float], dict[int, float]]:
    step, draft = {}, {}
    for b in batches:
        for g in range(K + 1):
            t = b * (1 + g)
            draft[t] = passes * _pass(t)
            step[t] = _target(t) + draft[t]
    return step, draft


def test_profile_batches_are_the_powers_of_two_up_to_max_num_seqs() -> None:
    assert startup_costs.profile_batches(1) == [1]
    assert startup_costs.profile_batches(48) == [1, 2, 4, 8, 16, 32]
    assert startup_costs.profile_batches(256)[-1] == 256


def test_step_samples_model_a_step_as_target_plus_the_drafter_passes() -> None:
    batches = [1, 4, 16]
    step, draft = _timings(batches, passes=K)
    samples = startup_costs.step_samples(step, draft, K, batches, K)
    got = {(s.batch, s.gamma, s.drafter_ran): s.seconds for s in samples}
    assert len(got) == len(batches) * (K + 2)
    for b in batches:
        assert got[(b, 0, False)] == pytest.approx(_target(b))
        assert got[(b, 0, True)] == pytest.approx(_target(b) + _pass(b))  # sync zero
        for g in range(1, K + 1):
            t = b * (1 + g)
            # the first pass over the verified tokens, the others over one token per request
            want = _target(t) + _pass(t) + (g - 1) * _pass(b)
            assert got[(b, g, True)] == pytest.approx(want)


def test_verify_times_are_the_target_alone_at_every_timed_token_count() -> None:
    step, draft = _timings([1, 4, 16], passes=K)
    times = startup_costs.verify_times(step, draft)
    assert [t for t, _ in times] == sorted(step)
    for tokens, seconds in times:
        assert seconds == pytest.approx(_target(tokens))


def test_parallel_drafting_is_one_pass_per_step() -> None:
    step, draft = _timings([8], passes=1)
    samples = startup_costs.step_samples(step, draft, 1, [8], K, parallel=True)
    g4 = next(s for s in samples if s.gamma == K)
    assert g4.seconds == pytest.approx(_target(8 * (1 + K)) + _pass(8 * (1 + K)))


def test_untimed_shapes_are_left_out() -> None:
    step, draft = _timings([8], passes=K)
    for t in (8 * 4, 8 * 5):  # gamma 3 and 4 did not fit the token budget
        del step[t], draft[t]
    samples = startup_costs.step_samples(step, draft, K, [8, 64], K)
    assert {s.gamma for s in samples} == {0, 1, 2}
    assert {s.batch for s in samples} == {8}


def test_ranks_merge_to_the_slowest() -> None:
    W = startup_costs.WorkerTimes
    merged = startup_costs._slowest([W({8: 1.0, 16: 3.0}, {8: 0.5}, 4),
                                     W({8: 2.0, 16: 1.0}, {8: 0.25}, 4)])
    assert merged == W({8: 2.0, 16: 3.0}, {8: 0.5}, 4)


def _config(method: str = "draft_model", v2: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        speculative_config=SimpleNamespace(method=method, num_speculative_tokens=K),
        scheduler_config=SimpleNamespace(max_num_seqs=8, async_scheduling=False),
        parallel_config=SimpleNamespace(data_parallel_size=1),
        use_v2_model_runner=v2)


def test_only_adaptive_engines_with_a_drafter_on_the_v1_runner_are_profiled() -> None:
    on = Settings(method="draft")
    assert startup_costs.wanted(on, _config())
    assert not startup_costs.wanted(Settings(method="draft", adaptive_startup="calibration"),
                                    _config())
    assert not startup_costs.wanted(Settings(method="draft", adaptive_speculation=False),
                                    _config())
    assert not startup_costs.wanted(on, _config(method="ngram"))  # nothing to time
    assert not startup_costs.wanted(on, _config(v2=True))  # the runner table turns it off


class _Executor:
    def __init__(self, ranks: list[startup_costs.WorkerTimes]) -> None:
        self.ranks = ranks
        self.calls: list[tuple] = []

    def collective_rpc(self, fn: object, args: tuple = ()) -> list[startup_costs.WorkerTimes]:
        self.calls.append((fn, args))
        return self.ranks


def test_profile_engine_keeps_the_prior_for_this_engines_scheduler_once() -> None:
    step, draft = _timings([1, 2, 4, 8], passes=K)
    executor = _Executor([startup_costs.WorkerTimes(step, draft, K)])
    cfg = _config()
    prior = startup_costs.profile_engine(executor, cfg, Settings(method="draft"))
    assert prior is not None and prior.needs_anchor and prior.source == startup_costs.SOURCE
    fn, args = executor.calls[0]
    assert fn is startup_costs.time_worker and args == ([1, 2, 4, 8], K)
    assert startup_costs.take(cfg) is prior
    assert startup_costs.take(cfg) is None  # taken once


def test_a_failing_profile_never_fails_the_launch() -> None:
    class Broken:
        def collective_rpc(self, fn: object, args: tuple = ()) -> list:
            raise RuntimeError("no dummy runs here")

    cfg = _config()
    assert startup_costs.profile_engine(Broken(), cfg, Settings(method="draft")) is None
    assert startup_costs.take(cfg) is None


# -- CostPrior.predict / anchored -------------------------------------------------------------

def _prior(needs_anchor: bool = True) -> CostPrior:
    samples = [CostSample(b, g, 1e-3 * (1 + g) * (1 + b / 8)) for b in (1, 8) for g in range(K + 1)]
    samples += [CostSample(b, 0, 5e-4 * (1 + b / 8), drafter_ran=False) for b in (1, 8)]
    return CostPrior("start-up profile", tuple(samples), needs_anchor=needs_anchor)


# -- controllers ------------------------------------------------------------------------------

def _feedback(gamma: int, seconds: float, batch: int = 8, ran: bool = True) -> StepFeedback:
    return StepFeedback(batch_size=batch, gamma=gamma, drafted=(gamma,) * batch,
                        accepted=(0,) * batch, committed=batch, interval_s=seconds,
                        token_budget=4096, drafter_ran=ran)


def test_online_decides_from_a_dummy_prior_at_once() -> None:
    # drafting is dear in this prior: gamma 0 best under the default acceptance prior
    cold = OnlineController(OnlineConfig(max_gamma=K, zero_skips_drafter=True))
    warm = OnlineController(OnlineConfig(max_gamma=K, zero_skips_drafter=True),
                            cost_prior=_prior())
    assert cold.decide(8, 4096) == K and cold.snapshot()["phase"] == "warmup"  # holds
    first = warm.decide(8, 4096)
    assert first < K  # decides from the prior at the first step, during the warm-up
    assert warm.snapshot()["phase"] == "exploit"
    assert warm.snapshot()["cost_prior"] == "start-up profile"
    # a dummy prior is taken loosely: the same shape from real steps binds the posterior more
    real = OnlineController(OnlineConfig(max_gamma=K), cost_prior=_prior(needs_anchor=False))
    warm_sd = OnlineController(OnlineConfig(max_gamma=K), cost_prior=_prior())
    assert (real.cost_model.coefficient_sd(3, "a") / real.cost_model.tau
            < warm_sd.cost_model.coefficient_sd(3, "a") / warm_sd.cost_model.tau)


def test_a_controller_without_a_prior_still_holds_during_warm_up() -> None:
    ctrl = OnlineController(OnlineConfig(max_gamma=K, warmup_samples=3))
    decisions = []
    for _ in range(3):
        decisions.append(ctrl.decide(8, 4096))
        ctrl.observe(_feedback(decisions[-1], 2e-3))
    assert decisions == [K, K, K]


# -- the simulator's start-up profile ---------------------------------------------------------

def test_the_simulated_profile_prices_every_shape_by_the_cost_model() -> None:
    import dataclasses

    from vllm_hust_vspec.sim.adaptive_glue import build_ours, startup_prior
    from vllm_hust_vspec.sim.scenario import load_scenario

    sc = load_scenario("b8-cpu-sticky-medium")
    assert sc.startup_profile == 0.05 and sc.startup_zero_bias == 1.15
    exact = dataclasses.replace(sc, startup_profile=0.0, startup_zero_bias=1.0)
    prior = startup_prior(exact, seed=3)
    assert prior.needs_anchor
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= sc.max_num_seqs]
    assert {s.batch for s in prior.samples} == set(batches)
    for s in prior.samples:
        real = sc.cost.step_time(s.batch, s.batch * s.gamma, s.gamma, s.batch, 0, 0,
                                 zero_pass=s.drafter_ran and s.gamma == 0)
        assert s.seconds == pytest.approx(0.5 * real)
    biased = startup_prior(sc, seed=3)
    again = startup_prior(sc, seed=3)
    assert biased == again and biased != startup_prior(sc, seed=4)  # seeded per run
    for e, b in zip(prior.samples, biased.samples, strict=True):
        bias = 1.0 if e.drafter_ran else 1.15
        assert abs(b.seconds / (e.seconds * bias) - 1.0) <= 0.05 + 1e-12
    profiled = dataclasses.replace(sc, startup_calibration=None)
    assert build_ours("online", profiled, 3).snapshot()["cost_prior"].startswith("start-up profile")
    no_profile = dataclasses.replace(profiled, startup_profile=None)
    assert build_ours("online", no_profile, 3).snapshot()["cost_prior"] == "none"


def test_the_simulated_calibration_prices_real_steps_as_the_host_plays_them() -> None:
    import dataclasses

    from vllm_hust_vspec.sim.adaptive_glue import (
        build_ours,
        calibration_prior,
        startup_prior,
    )
    from vllm_hust_vspec.sim.scenario import load_scenario

    sc = dataclasses.replace(load_scenario("b8-cpu-sticky-medium"), startup_calibration=0.05,
                             timing_noise=TimingNoise())
    assert sc.gamma0 == "sticky"
    exact = dataclasses.replace(sc, startup_calibration=0.0)
    prior = calibration_prior(exact, 3, startup_prior(exact, 3))
    assert not prior.needs_anchor  # real steps
    shapes = {(s.batch, s.gamma, s.drafter_ran, s.prefill_tokens) for s in prior.samples}
    assert sc.max_num_seqs == 8
    batches = [1, 3, 6, 8]  # each bucket's middle, the last capped at max_num_seqs
    # the sticky host's settled zero skips the drafter; every other arm runs it; each arm
    # also times a step admitting one 64-token request
    arms = ({(b, 0, False) for b in batches}
            | {(b, g, True) for b in batches for g in range(1, sc.max_gamma + 1)})
    assert shapes == {(*arm, 0) for arm in arms} | {
        (b - 1, g, ran, 64) for b, g, ran in arms if b > 1}
    for s in prior.samples:
        real = sc.cost.step_time(s.batch, s.batch * s.gamma, s.gamma, s.batch, s.prefill_tokens,
                                 s.batch * 84)
        assert s.seconds == pytest.approx(real)  # no bias, no dummy level
    # the profile's target-alone times come along at the real level
    assert prior.verify and prior.verify[0][1] == pytest.approx(
        2.0 * startup_prior(exact, 3).verify[0][1])
    noisy = calibration_prior(sc, 3, None)
    for e, n in zip(prior.samples, noisy.samples, strict=True):
        assert abs(n.seconds / e.seconds - 1.0) <= 0.05 + 1e-12
    # with jitter, each arm is the median of three jittered steps: off, but by less than the
    # largest of three draws could be
    jittered = calibration_prior(
        dataclasses.replace(exact, timing_noise=TimingNoise(jitter_sigma=0.05)), 3, None)
    ratios = [j.seconds / e.seconds for e, j in zip(prior.samples, jittered.samples,
                                                    strict=True)]
    assert len(set(ratios)) == len(ratios)
    assert all(abs(math.log(r)) < 4 * 0.05 for r in ratios)
    assert build_ours("online", sc, 3).snapshot()["cost_prior"].startswith(
        "start-up calibration")
    sync = dataclasses.replace(exact, gamma0="sync")
    zero = [s for s in calibration_prior(sync, 3, None).samples if s.gamma == 0]
    assert zero and all(s.drafter_ran for s in zero)
