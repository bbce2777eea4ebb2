"""The online controller's posteriors (adaptive/online.py): behaviour on synthetic hosts and the
simulator's sticky host, the cost prior, the snapshot, validation and the predecessor's
exploration / window / warm-up-return knobs."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from vllm_hust_vspec.adaptive import (
    Controller,
    CostPrior,
    CostSample,
    OnlineConfig,
    OnlineController,
    StepFeedback,
    build_controller,
)
from vllm_hust_vspec.adaptive.step_loop import StickyCohort
from vllm_hust_vspec.sim import load_scenario, make_controller, simulate

CostFn = Callable[[int, int, bool], float]  # (batch, gamma, drafter ran) -> seconds


def linear_cost(base: float, per_gamma: float, overhead: float) -> CostFn:
    """A target-only step ``base``; speculation adds ``overhead + per_gamma * g``."""

    def cost(batch: int, gamma: int, ran: bool) -> float:
        del batch
        return base + (overhead + per_gamma * gamma if ran and gamma > 0 else 0.0)

    return cost


def best_arm(cost: CostFn, alpha: float, max_gamma: int, batch: int = 8) -> int:
    """Gamma with the highest expected goodput under i.i.d. acceptance ``alpha``."""
    def goodput(g: int) -> float:
        return sum(alpha ** k for k in range(g + 1)) / cost(batch, g, True)
    return max(range(max_gamma + 1), key=goodput)


def drive(ctrl: OnlineController, cost: CostFn, alpha: Callable[[int], float], steps: int,
          *, batch: int = 8, sticky: bool = False, jitter: float = 0.02,
          seed: int = 1) -> list[int]:
    """A closed host loop: decide, verify last step's drafts, time, observe. On a ``sticky``
    host the requests turn over every step (each step its own cohort, so a pin never
    outlives it and every decision is asked): the host's sticky rule then skips the drafter
    after a settled zero. Returns the gamma decided at each step."""
    rng = random.Random(seed)
    g_prev = ctrl.gamma
    out: list[int] = []
    for t in range(steps):
        g = ctrl.decide(batch, 8192)
        skip = sticky and StickyCohort[int]().resolve(g, range(batch), ctrl.settled)[1]
        a = alpha(t)
        accepted = []
        for _ in range(batch):
            k = 0
            while k < g_prev and rng.random() < a:
                k += 1
            accepted.append(k)
        seconds = cost(batch, g, not skip) * (1.0 + jitter * rng.gauss(0.0, 1.0))
        ctrl.observe(StepFeedback(
            batch_size=batch, gamma=g_prev, drafted=(g_prev,) * batch,
            accepted=tuple(accepted), committed=sum(accepted) + batch, interval_s=seconds,
            token_budget=8192, drafter_ran=not skip, next_gamma=g))
        out.append(g)
        g_prev = g
    return out


def share(seq: list[int], value: int) -> float:
    return seq.count(value) / len(seq)


@pytest.mark.parametrize(("alpha", "expect"), [(0.9, 4), (0.5, 2), (0.3, 1), (0.1, 0)])
def test_converges_to_the_best_arm(alpha: float, expect: int) -> None:
    cost = linear_cost(0.010, 0.0015, 0.001)
    assert best_arm(cost, alpha, 4) == expect
    ctrl = OnlineController(OnlineConfig(max_gamma=4))
    gammas = drive(ctrl, cost, lambda t: alpha, 600)
    assert share(gammas[-200:], expect) > 0.8


def test_follows_an_acceptance_shift() -> None:
    cost = linear_cost(0.010, 0.0015, 0.001)
    assert best_arm(cost, 0.95, 4) == 4 and best_arm(cost, 0.3, 4) <= 1
    ctrl = OnlineController(OnlineConfig(max_gamma=4))
    gammas = drive(ctrl, cost, lambda t: 0.95 if t < 400 else 0.3, 800)
    assert share(gammas[300:400], 4) > 0.8
    # the discounted acceptance counts (half-life 32 steps at batch 8) need ~100 steps
    assert sum(g <= 1 for g in gammas[550:]) / 250 > 0.8


def test_speculation_comes_back_after_gamma_0() -> None:
    """At gamma 0 nothing is drafted, so nothing is measured: the acceptance posterior
    widens with time (_ACCEPTANCE_DRIFT) until a draw says drafting pays, and the drafter is
    tried again and kept once acceptance has come back."""
    cost = linear_cost(0.010, 0.0015, 0.001)
    ctrl = OnlineController(OnlineConfig(max_gamma=4))
    gammas = drive(ctrl, cost, lambda t: 0.05 if t < 600 else 0.95, 4000)
    assert share(gammas[400:600], 0) > 0.9
    assert share(gammas[-500:], 4) > 0.8


def test_scale_invariant() -> None:
    """Multiplying every step time leaves the decisions unchanged (priors are relative to
    the first step)."""
    cost = linear_cost(0.010, 0.0015, 0.001)

    def slow(b: int, g: int, r: bool) -> float:
        return 1000.0 * cost(b, g, r)

    a = drive(OnlineController(OnlineConfig(max_gamma=4)), cost, lambda t: 0.7, 300)
    b = drive(OnlineController(OnlineConfig(max_gamma=4)), slow, lambda t: 0.7, 300)
    assert a == b


def test_seeded_and_reproducible() -> None:
    cost = linear_cost(0.010, 0.0015, 0.001)
    runs = [drive(OnlineController(OnlineConfig(max_gamma=4, seed=s)), cost,
                  lambda t: 0.6, 200) for s in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize(("scenario", "zero_best"), [
    ("b8-cpu-sticky-medium", True), ("b8-cpu-sticky-agree", False)])
def test_sticky_zero_settles_only_where_it_is_best(scenario: str, zero_best: bool) -> None:
    """On the simulator's sticky host (a settled zero pins the cohort, the drafter is
    skipped), the drafter-skipping zero is found where it is best and never pinned where
    gamma 4 pays double."""
    sc = load_scenario(scenario)
    for seed in (3, 4):
        ctrl = make_controller("online", sc)
        assert isinstance(ctrl, OnlineController)
        run = simulate(sc, ctrl, seed, record=True)
        gammas = run.timeline["gamma"]
        zeros = sum(g == 0 for g in gammas) / len(gammas)
        if zero_best:
            assert zeros > 0.7, (seed, zeros)
        else:
            assert zeros < 0.05, (seed, zeros)


def test_unsettled_zero_is_never_played_on_a_sticky_host() -> None:
    """A zero that is not settled would be a sync zero (the drafter runs, nothing is learnt
    about skipping): the controller does not return one."""
    cost = linear_cost(0.002, 0.0006, 0.0006)
    ctrl = OnlineController(OnlineConfig(max_gamma=4, zero_skips_drafter=True))
    for _ in range(300):
        g = ctrl.decide(8, 8192)
        assert g != 0 or ctrl.settled()
        ctrl.observe(StepFeedback(batch_size=8, gamma=g, drafted=(g,) * 8, accepted=(g,) * 8,
                                  committed=8 * (g + 1), interval_s=cost(8, g, True),
                                  token_budget=8192, next_gamma=g))


def _startup_prior(cost: CostFn, batch: int = 8) -> CostPrior:
    samples = [CostSample(batch, 0, cost(batch, 0, False), drafter_ran=False)]
    samples += [CostSample(batch, g, cost(batch, g, True)) for g in range(1, 5)]
    return CostPrior("startup-dummy-steps", tuple(samples))


@pytest.mark.slow
def test_cost_prior_means_fewer_exploratory_steps() -> None:
    """A sticky host where skipping the drafter is best by far: with start-up timings of
    every arm (the skipping one included) the controller settles at once; without, it must
    first learn the speculative arms and infer the zero."""
    cost = linear_cost(0.00165, 0.00131, 0.0014)
    first_zero = []
    for prior in (None, _startup_prior(cost)):
        off_best = 0
        for seed in range(4):
            ctrl = OnlineController(OnlineConfig(max_gamma=4, zero_skips_drafter=True,
                                                         seed=seed), cost_prior=prior)
            gammas = drive(ctrl, cost, lambda t: 0.78, 120, sticky=True, seed=seed)
            off_best += sum(g != 0 for g in gammas)
        first_zero.append(off_best)
    without, with_prior = first_zero
    assert 3 * with_prior < without
    assert with_prior <= 4 * 15  # warm-up and a few looks back


def test_a_sure_prior_plays_its_arm_from_the_first_step() -> None:
    """Nothing has been played at the first decision: a prior sure that the skipping zero is
    best goes there at once (past ``max_gamma_step`` 2 from the initial gamma 4); where
    speculation pays and acceptance is still unknown, an unsure first draw walks instead."""
    # a draft costs a target step: gamma 0 wins even were every draft accepted
    zero_best = linear_cost(0.00165, 0.00165, 0.0014)
    # drafts at 0.3 of a target step: the prior gives gamma 1 over 4 about 0.8, not sure
    pays = linear_cost(0.00165, 0.0005, 0.0005)
    firsts: dict[str, list[int]] = {"zero": [], "pays": []}
    for name, cost in (("zero", zero_best), ("pays", pays)):
        for seed in range(16):
            ctrl = OnlineController(OnlineConfig(max_gamma=4, zero_skips_drafter=True,
                                                 seed=seed), cost_prior=_startup_prior(cost))
            firsts[name].append(ctrl.decide(8, 8192))
            if name == "zero":
                assert ctrl.settled()
    assert firsts["zero"] == [0] * 16
    # an unsure first draw walks: at most max_gamma_step (2) below the initial 4
    assert sum(g < 2 for g in firsts["pays"]) <= 1


def test_a_prior_sure_of_a_far_arm_goes_there_first() -> None:
    """A prior sure that gamma 1 beats the initial 4 (each draft costs 1.5 target steps,
    the drafter's pass half a step more: no acceptance makes a deeper draft pay) plays 1 at
    once, where the walk would stop at 2; later moves, through a swing (cheap drafts, high
    acceptance) that makes deeper drafts pay, stay within ``max_gamma_step``."""
    cost = linear_cost(0.00165, 0.0025, 0.0008)
    cheap = linear_cost(0.00165, 0.00005, 0.0)
    step = [0]  # the driver asks alpha(t) before pricing step t

    def priced(batch: int, gamma: int, ran: bool) -> float:
        return (cost if step[0] < 20 else cheap)(batch, gamma, ran)

    def alpha(t: int) -> float:
        step[0] = t
        return 0.6 if t < 20 else 0.95

    moved = 0
    for seed in range(8):
        ctrl = OnlineController(OnlineConfig(min_gamma=1, max_gamma=4, seed=seed),
                                cost_prior=_startup_prior(cost))
        gammas = drive(ctrl, priced, alpha, 400, seed=seed)
        assert gammas[0] == 1
        assert max(abs(a - b) for a, b in zip(gammas, gammas[1:], strict=False)) <= 2
        moved += gammas[-1] > 1
    assert moved >= 4  # the swing is followed, so the walk was put to the test


def test_cost_prior_does_not_pin_where_speculation_pays() -> None:
    cost = linear_cost(0.00165, 0.00061, 0.0006)
    ctrl = OnlineController(OnlineConfig(max_gamma=4, zero_skips_drafter=True),
                                cost_prior=_startup_prior(cost))
    gammas = drive(ctrl, cost, lambda t: 0.95, 300, sticky=True)
    assert gammas.count(0) == 0
    assert share(gammas[-100:], 4) > 0.8


def test_snapshot_names_the_prior_and_reports() -> None:
    cost = linear_cost(0.010, 0.0015, 0.001)
    plain = OnlineController(OnlineConfig(max_gamma=4))
    primed = OnlineController(OnlineConfig(max_gamma=4),
                                  cost_prior=_startup_prior(cost))
    for ctrl in (plain, primed):
        drive(ctrl, cost, lambda t: 0.7, 50)
        assert isinstance(ctrl, Controller)
    assert plain.snapshot()["cost_prior"] == "none"
    snap = primed.snapshot()
    assert snap["cost_prior"] == "startup-dummy-steps" and snap["cost_prior_samples"] == 5
    assert snap["policy"] == "online" and snap["observations"] == 50
    assert snap["skipped_warmup"] == 3 and len(snap["arms"]) == 5
    rep = primed.report()
    assert rep.policy == "online" and set(rep.arm_goodput) == {0, 1, 2, 3, 4}
    assert all(v > 0 for v in rep.arm_goodput.values())


def test_data_hygiene_keeps_polluted_steps_out_of_the_cost() -> None:
    ctrl = OnlineController(OnlineConfig(max_gamma=4, warmup_samples=2))

    def step(interval: float, *, steady: bool = True, nxt: int = 2) -> StepFeedback:
        return StepFeedback(batch_size=8, gamma=2, drafted=(2,) * 8, accepted=(1,) * 8,
                            committed=16, interval_s=interval, token_budget=8192,
                            steady=steady, next_gamma=nxt)

    for _ in range(2):
        ctrl.observe(step(0.01))  # warm-up
    ctrl.observe(step(0.5, steady=False))  # prefill mixed in
    ctrl.observe(step(0.5, nxt=3))  # transition: verified 2, drafted 3
    snap = ctrl.snapshot()
    assert snap["skipped_warmup"] == 2 and snap["skipped_nonsteady"] == 1
    assert snap["skipped_transition"] == 1
    assert snap["buckets"] == []  # nothing timed yet: no cost posterior exists
    ctrl.observe(step(0.01))
    assert ctrl.snapshot()["buckets"] == [8]


def test_budget_cap_and_step_limit() -> None:
    cost = linear_cost(0.010, 0.0001, 0.0)
    ctrl = OnlineController(OnlineConfig(max_gamma=6, max_gamma_step=1))
    gammas = drive(ctrl, cost, lambda t: 0.95, 300)
    assert share(gammas[-100:], 6) > 0.9 and ctrl.gamma == 6
    assert ctrl.decide(8, 8 * 3) == 2  # the budget cap overrides max_gamma_step
    prev = 2
    for _ in range(20):
        g = ctrl.decide(8, 8192)
        assert abs(g - prev) <= 1
        prev = g


def test_validation_names_the_knob() -> None:
    with pytest.raises(ValueError, match="initial_gamma"):
        OnlineController(OnlineConfig(max_gamma=3), initial_gamma=5)
    with pytest.raises(ValueError, match="initial_gamma"):
        OnlineController(OnlineConfig(min_gamma=1, max_gamma=3), initial_gamma=0)
    with pytest.raises(ValueError, match="acceptance_halflife_requests"):
        OnlineConfig(acceptance_halflife_requests=0.0)
    with pytest.raises(ValueError, match="zero_skips_drafter"):
        OnlineConfig(zero_skips_drafter=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hysteresis"):
        OnlineConfig(hysteresis=-0.1)


def test_factory_builds_online_with_a_prior() -> None:
    prior = _startup_prior(linear_cost(0.01, 0.001, 0.001))
    ctrl = build_controller("online", min_gamma=0, max_gamma=4, cost_prior=prior,
                            window=5, warmup_return="incumbent", hysteresis=None)
    assert isinstance(ctrl, OnlineController)
    assert ctrl.config.window == 5 and ctrl.config.hysteresis == 0.02
    assert ctrl.warmup_return == "incumbent"
    assert ctrl.snapshot()["cost_prior"] == "startup-dummy-steps"
    with pytest.raises(ValueError, match="windoww"):
        build_controller("online", min_gamma=0, max_gamma=4, windoww=3)
    with pytest.raises(ValueError, match="warmup_return"):
        build_controller("online", min_gamma=0, max_gamma=4, warmup_return="first")
    for private in ("settle_probability", "ewma_weight", "initial_gamma"):
        with pytest.raises(ValueError, match=private):
            build_controller("online", min_gamma=0, max_gamma=4, **{private: 1})
    with pytest.raises(ValueError, match="cost prior"):
        build_controller("fixed", min_gamma=0, max_gamma=4, cost_prior=prior)


def test_exploration_scales_the_thompson_draw() -> None:
    """``exploration`` (the predecessor's --adaptive-online-exploration) is the draw's width:
    0 plays the posterior mean (the same decisions whatever the seed), 1 samples the
    posterior (decisions differ by seed), and a wider draw visits losing arms more often."""
    cost = linear_cost(0.010, 0.0015, 0.001)
    assert best_arm(cost, 0.7, 4) == 3

    def run_with(width: float, seed: int) -> list[int]:
        return drive(OnlineController(OnlineConfig(max_gamma=4, exploration=width, seed=seed)),
                     cost, lambda t: 0.7, 400, seed=1)

    greedy = [run_with(0.0, s) for s in (0, 1)]
    assert greedy[0] == greedy[1]
    assert run_with(1.0, 0) != run_with(1.0, 1)
    away = {w: sum(sum(g != 3 for g in run_with(w, s)[100:]) for s in range(4))
            for w in (0.3, 3.0)}
    assert away[0.3] < away[3.0]


def test_window_bounds_the_measured_goodput_reported() -> None:
    ctrl = OnlineController(OnlineConfig(max_gamma=4, window=5, warmup_samples=0))
    ctrl.decide(8, 8192)
    for i in range(12):
        ctrl.observe(StepFeedback(batch_size=8, gamma=4, drafted=(4,) * 8, accepted=(2,) * 8,
                                  committed=24, interval_s=0.01 if i < 7 else 0.02,
                                  token_budget=8192, next_gamma=4))
    arm = {a["gamma"]: a for a in ctrl.snapshot()["arms"]}[4]
    assert arm["samples"] == 5  # only the last five steps, all of them 0.02 s
    assert arm["measured_goodput"] == pytest.approx(24 / 0.02)


def test_incumbent_is_kept_until_the_posterior_is_sure_it_is_not_best() -> None:
    """'incumbent' (the predecessor's --adaptive-online-warmup-return incumbent): a draw alone
    does not move the controller off its initial gamma; a clear loser is still left."""
    cost = linear_cost(0.010, 0.0015, 0.001)
    near = drive(OnlineController(OnlineConfig(max_gamma=4), initial_gamma=3), cost,
                 lambda t: 0.6, 60)  # gamma 2 and 3 within ~2% of each other
    kept = drive(OnlineController(OnlineConfig(max_gamma=4), initial_gamma=3,
                                  warmup_return="incumbent"),
                 cost, lambda t: 0.6, 60)
    assert kept.count(3) > near.count(3)
    assert kept.count(3) >= 55
    lost = drive(OnlineController(OnlineConfig(max_gamma=4), warmup_return="incumbent"), cost,
                 lambda t: 0.1, 300)
    assert share(lost[-100:], 0) > 0.8
    with pytest.raises(ValueError, match="warmup_return"):
        OnlineController(warmup_return="first")


def test_a_skipping_zero_is_never_estimated_dearer_than_a_speculative_arm() -> None:
    """Zero measured in a busy spell (30 ms a step), gamma 1 afterwards at 12 ms: a
    drafter-skipping step is the target's part of a speculative one, so the posterior never
    prices it dearer than gamma 1, however the load moved in between."""
    ctrl = OnlineController(OnlineConfig(zero_skips_drafter=True, warmup_samples=0))
    ctrl.decide(8, 8192)
    for gamma, ran, seconds in ((0, False, 0.030),) * 40 + ((1, True, 0.012),) * 40:
        ctrl.observe(StepFeedback(batch_size=8, gamma=gamma, drafted=(gamma,) * 8,
                                  accepted=(gamma,) * 8, committed=8 * (1 + gamma),
                                  interval_s=seconds, token_budget=8192, drafter_ran=ran,
                                  next_gamma=gamma))
    ctrl.decide(8, 8192)
    snap = ctrl.snapshot()
    est = {a["gamma"]: a["estimated_goodput"] for a in snap["arms"]}
    expected_1 = 1.0 + snap["acceptance"][0]  # tokens per request and step at gamma 1
    assert est[0] >= est[1] / expected_1 * (1 - 1e-9), (est, snap["acceptance"])


def test_draws_are_machines_that_could_exist() -> None:
    """A persisted state that measured only gamma 4 (the target's constant and the per-token
    cost not told apart) and a drafter whose every draft is accepted. Thompson draws may
    still try a shallower arm while a machine whose cost is mostly per-token fits the data,
    but gamma 0 or 1 only rarely: beating gamma 4 there needs a target-only step (and a
    drafter pass) under a fifth of the measured step. Untruncated draws left gamma 4 about
    twice as often (12 % of the decisions)."""
    cost = linear_cost(0.010, 0.002, 0.001)
    prior = CostPrior("persisted state", tuple(
        CostSample(8, 4, cost(8, 4, True), count=20) for _ in range(3)))
    off_max = low = decisions = 0
    for seed in range(16):
        ctrl = OnlineController(OnlineConfig(max_gamma=4, seed=seed), cost_prior=prior)
        gammas = drive(ctrl, cost, lambda t: 1.0, 60, seed=seed)[5:]  # acceptance known
        off_max += sum(g != 4 for g in gammas)
        low += sum(g < 2 for g in gammas)
        decisions += len(gammas)
    assert low <= 0.015 * decisions
    assert off_max <= 0.08 * decisions
