"""Per-request verify lengths: the adaptive layer, the simulator's ragged verify, the
per-request oracle and vLLM's adaptive verification baseline."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from vllm_hust_vspec.adaptive import build_controller
from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample
from vllm_hust_vspec.adaptive.feedback import LengthPolicy, StepFeedback, VerifyQuery
from vllm_hust_vspec.adaptive.fixed import FixedController
from vllm_hust_vspec.adaptive.verify_lengths import (
    LengthsConfig,
    PerRequestController,
    PerRequestLengths,
)
from vllm_hust_vspec.sim.baselines.reference import FixedGamma
from vllm_hust_vspec.sim.engine import simulate
from vllm_hust_vspec.sim.per_request import PerRequestOracle, VllmAdaptiveVerification
from vllm_hust_vspec.sim.scenario import load_scenario

K = 5


def _accepted(rng: random.Random, rate: float, drafts: int) -> int:
    """Drafts accepted in a row, each with probability ``rate``."""
    a = 0
    while a < drafts and rng.random() < rate:
        a += 1
    return a


def feed(layer: PerRequestLengths, rates: dict[str, float], steps: int, *, seed: int = 0,
         c0: float = 0.007, c_v: float = 3.5e-5, jitter: bool = True, keep: float = 0.8) -> None:
    """Steps at depth K - 1 or K, each over a random part (``keep``) of the requests
    (continuous batching), verifying what the layer's lengths ask (its probes included: a
    trimmed step is what tells a verified token's cost from a drafter pass), each request
    accepting
    geometrically at its rate; step time ``c0 + c_v * verified`` plus 1% noise."""
    rng = random.Random(seed)
    everyone = tuple(rates)
    for i in range(steps):
        ids = tuple(r for r in everyone if rng.random() < keep) or everyone
        gamma = K if not jitter else rng.choice((K - 1, K))
        lengths = layer.lengths(VerifyQuery(ids, (gamma,) * len(ids), 4096))
        acc = [_accepted(rng, rates[rid], n) for rid, n in zip(ids, lengths, strict=True)]
        verified = len(ids) + sum(lengths)
        t = (c0 + c_v * verified) * (1.0 + 0.01 * rng.gauss(0.0, 1.0))
        layer.observe(StepFeedback(
            batch_size=len(ids), gamma=gamma, drafted=tuple(lengths),
            accepted=tuple(acc), committed=sum(acc) + len(ids), interval_s=t,
            token_budget=4096, next_gamma=gamma, request_ids=ids,
            lengths_trimmed=sum(lengths) < gamma * len(ids)))
        del i


def test_hard_requests_verify_fewer_drafts_than_easy_ones() -> None:
    layer = PerRequestLengths(K)
    rates = {f"easy{i}": 0.9 for i in range(16)} | {f"hard{i}": 0.3 for i in range(16)}
    # every request every step: a batch that varies inside its bucket is noise to the cost
    # model (its buckets price a step, not a request), which biases c_v low
    feed(layer, rates, 300, keep=1.0)
    assert layer.heterogeneous and layer.ready, layer.snapshot()
    query = VerifyQuery(tuple(rates), (K,) * len(rates), 4096)
    lengths = dict(zip(rates, layer.lengths(query), strict=True))
    easy = [lengths[r] for r in rates if r.startswith("easy")]
    hard = [lengths[r] for r in rates if r.startswith("hard")]
    assert min(easy) > max(hard), lengths
    assert all(0 <= n <= K for n in lengths.values())
    # the learned cost of a verified token is the one the steps were priced with
    assert layer.snapshot()["verify_token_cost_s"] == pytest.approx(3.5e-5, rel=0.2)


def test_identical_requests_are_left_alone() -> None:
    layer = PerRequestLengths(K)
    rates = {f"r{i}": 0.6 for i in range(32)}
    feed(layer, rates, 300)
    assert not layer.heterogeneous and layer.snapshot()["dispersion"] < 3.0
    query = VerifyQuery(tuple(rates), (K,) * 32, 4096)
    assert layer.lengths(query) == [K] * 32


def test_identical_requests_the_drafter_nearly_always_gets_right_are_left_alone() -> None:
    """At 0.95 the binomial noise per request is small, and the batch's pooled rate moves
    from step to step by about as much: a deviation every request shares is the batch's,
    so the dispersion test is centred and never flags them."""
    layer = PerRequestLengths(K)
    rates = {f"r{i}": 0.95 for i in range(32)}
    flagged = []
    for seed in range(20):  # one refresh of the dispersion test per 16 steps
        feed(layer, rates, 16, seed=seed)
        flagged.append(layer.heterogeneous)
    assert not any(flagged), layer.snapshot()


def test_a_shift_every_request_makes_together_is_not_a_mix_of_requests() -> None:
    """Code, then prose, for every request at once (long-lived requests carry the code
    phase in their histories): the batch is still one kind of request, and its rate follows
    the shift within a few tens of steps, not over the requests' own half-lives."""
    layer = PerRequestLengths(K)
    rates = {f"r{i}": 0.93 for i in range(32)}
    feed(layer, rates, 200)
    assert not layer.heterogeneous
    feed(layer, dict.fromkeys(rates, 0.35), 32, seed=1)
    assert layer.alpha("r0") == pytest.approx(0.35, abs=0.06)
    flagged = 0
    for seed in range(2, 12):  # every refresh of the dispersion test over the next 160 steps
        feed(layer, dict.fromkeys(rates, 0.35), 16, seed=seed)
        flagged += layer.heterogeneous
    assert flagged == 0, layer.snapshot()


def test_requests_that_start_to_differ_are_grouped_from_the_first_ready_step() -> None:
    # Identical requests keep no groups (observe skips the log); when some turn easy, the
    # step that finds them different groups every tracked request (and the last verify's),
    # so the first depth and the first verify the layer answers already tell them apart.
    layer = PerRequestLengths(K)
    ids = [f"r{i}" for i in range(32)]
    feed(layer, dict.fromkeys(ids, 0.5), 200)
    assert not layer.heterogeneous and layer.ready is False
    rates = {rid: 0.95 if i % 2 else 0.2 for i, rid in enumerate(ids)}
    query = VerifyQuery(tuple(ids), (K,) * 32, 4096)
    for seed in range(1, 400):
        layer.lengths(query)  # the host asks before the step is observed
        feed(layer, rates, 1, seed=seed)
        if layer.ready:
            break
    assert layer.ready, layer.snapshot()
    # the depth is rated for the last verify's requests by their groups as of now
    layer.lengths(query)
    rated = layer.depth_steps(32, 1, K)
    out = dict(zip(ids, layer.lengths(query), strict=True))
    assert layer.depth_steps(32, 1, K) == rated
    easy = [out[r] for i, r in enumerate(ids) if i % 2]
    hard = [out[r] for i, r in enumerate(ids) if not i % 2]
    assert min(easy) > max(hard), out


def test_lengths_never_exceed_the_drafts() -> None:
    layer = PerRequestLengths(K, LengthsConfig(margin=0.0))
    rates = {f"easy{i}": 0.95 for i in range(8)} | {f"hard{i}": 0.2 for i in range(8)}
    feed(layer, rates, 300)
    drafted = tuple(i % (K + 1) for i in range(16))
    out = layer.lengths(VerifyQuery(tuple(rates), drafted, 4096))
    assert all(0 <= n <= d for n, d in zip(out, drafted, strict=True))


def test_config_errors_name_the_knob() -> None:
    with pytest.raises(ValueError, match="margin"):
        LengthsConfig(margin=-1.0)
    with pytest.raises(ValueError, match="request_halflife"):
        LengthsConfig(request_halflife=0.0)


SCENARIOS = Path(__file__).resolve().parents[2] / "src" / "vllm_hust_vspec" / "sim" / "scenarios"


def small(name: str, requests: int) -> object:
    """A shipped scenario, shortened for a unit test."""
    import dataclasses

    sc = load_scenario(name)
    return dataclasses.replace(sc, workload=dataclasses.replace(sc.workload,
                                                                 num_requests=requests))


class _TrimAtFixedDepth(PerRequestOracle):
    def __init__(self, k: int, hi: int) -> None:
        super().__init__(0, hi)
        self.k = k

    def decide(self, batch_size: int, token_budget: int) -> int:
        return self.k


def test_the_simulator_verifies_what_a_length_policy_returns() -> None:
    sc = small("b64-bimodal-parallel", 128)
    seen: list[StepFeedback] = []

    class Halve(FixedGamma):
        def verify_lengths(self, query: VerifyQuery) -> list[int]:
            return [d // 2 for d in query.drafted]

        def observe(self, feedback: StepFeedback) -> None:
            seen.append(feedback)

    assert isinstance(Halve(4), LengthPolicy)
    simulate(sc, Halve(4), 1)  # type: ignore[arg-type]
    decode = [fb for fb in seen if fb.gamma == 4 and fb.steady]
    assert decode and all(set(fb.drafted) <= {2} for fb in decode)
    assert all(fb.request_ids is not None and len(fb.request_ids) == fb.batch_size
               for fb in seen)


@pytest.mark.slow
def test_per_request_oracle_beats_verifying_every_draft_on_a_bimodal_batch() -> None:
    sc = small("b64-bimodal-parallel", 192)
    plain = simulate(sc, FixedGamma(5), 1).goodput  # type: ignore[arg-type]
    trimmed = simulate(sc, _TrimAtFixedDepth(5, 7), 1).goodput  # type: ignore[arg-type]
    assert trimmed > 1.15 * plain


@pytest.mark.slow
def test_vllm_adaptive_verification_drafts_k_and_trims_with_stale_confidence() -> None:
    sc = small("b64-bimodal-parallel", 128)
    policy = VllmAdaptiveVerification(sc)  # type: ignore[arg-type]
    assert policy.decide(64, 4096) == sc.max_gamma  # type: ignore[attr-defined]
    # a request's first verify uses confidence 1.0 (no stale copy): nothing is trimmed
    # when the profiled costs make verification cheap enough
    q1 = VerifyQuery(("a", "b"), (7, 7), 4096, ((0.1,) * 7, (0.99,) * 7))
    first = policy.verify_lengths(q1)
    assert first == [7, 7]
    # next step the stale copy says "a" is hopeless: its drafts go, "b" keeps its own
    q2 = VerifyQuery(("a", "b"), (7, 7), 4096, ((0.1,) * 7, (0.99,) * 7))
    second = policy.verify_lengths(q2)
    assert second[0] < second[1] and second[1] >= 5
    assert simulate(sc, VllmAdaptiveVerification(sc), 1).goodput > 0  # type: ignore[arg-type]


def test_per_request_controller_is_the_batch_controller_on_identical_requests() -> None:
    sc = small("b16-eagle3-h100", 96)
    online = build_controller("online", min_gamma=sc.min_gamma,  # type: ignore[attr-defined]
                              max_gamma=sc.max_gamma)  # type: ignore[attr-defined]
    wrapped = PerRequestController(
        build_controller("online", min_gamma=sc.min_gamma,  # type: ignore[attr-defined]
                         max_gamma=sc.max_gamma),  # type: ignore[attr-defined]
        sc.min_gamma, sc.max_gamma)  # type: ignore[attr-defined]
    a = simulate(sc, online, 1)  # type: ignore[arg-type]
    b = simulate(sc, wrapped, 1)  # type: ignore[arg-type]
    assert b.committed_tokens == a.committed_tokens and b.steps == a.steps
    assert b.busy_seconds == pytest.approx(a.busy_seconds)
    assert wrapped.snapshot()["per_request"]["verified_share"] == 1.0


@pytest.mark.slow
def test_per_request_controller_gains_on_a_bimodal_batch() -> None:
    sc = load_scenario("b64-bimodal-parallel")  # whole: the layer needs its first ~100 steps
    hi = sc.max_gamma  # type: ignore[attr-defined]
    online = simulate(sc, build_controller("online", min_gamma=0, max_gamma=hi), 1)  # type: ignore[arg-type]
    wrapped = PerRequestController(build_controller("online", min_gamma=0, max_gamma=hi), 0, hi)
    seen: list[StepFeedback] = []
    observe = wrapped.observe

    def recording(fb: StepFeedback) -> None:
        seen.append(fb)
        observe(fb)

    wrapped.observe = recording  # type: ignore[method-assign]
    per_req = simulate(sc, wrapped, 1)  # type: ignore[arg-type]
    assert per_req.goodput > 1.02 * online.goodput
    snap = wrapped.snapshot()["per_request"]
    assert snap["verified_share"] < 0.9
    # the simulator marks the steps whose lengths were trimmed (and only those)
    trimmed = [fb for fb in seen if fb.lengths_trimmed]
    assert trimmed and all(min(fb.drafted) < fb.gamma for fb in trimmed)
    assert not any(fb.lengths_trimmed for fb in seen if fb.gamma == 0)


def test_the_batch_controller_leaves_trimmed_steps_out_of_its_acceptance_counts() -> None:
    # per-request lengths cut hard requests short: deep positions are then tried by easy
    # requests only, a sample that would make the batch look easier than it is
    def step(trimmed: bool) -> StepFeedback:
        return StepFeedback(batch_size=4, gamma=4, drafted=(4, 4, 1, 1), accepted=(4, 4, 0, 0),
                            committed=12, interval_s=0.01, token_budget=8192,
                            lengths_trimmed=trimmed)

    ctrl = build_controller("online", min_gamma=0, max_gamma=4)
    before = ctrl.snapshot()["acceptance"]  # type: ignore[attr-defined]
    ctrl.observe(step(True))
    assert ctrl.snapshot()["acceptance"] == before  # type: ignore[attr-defined]
    assert ctrl.snapshot()["observations"] == 1  # type: ignore[attr-defined]
    ctrl.observe(step(False))
    assert ctrl.snapshot()["acceptance"] != before  # type: ignore[attr-defined]


def test_the_simulator_knows_the_per_request_policies_by_name() -> None:
    from vllm_hust_vspec.sim.policies import PER_REQUEST, known_policy_help, make_controller

    sc = load_scenario("b16-bimodal-h100v")
    built = {name: make_controller(name, sc) for name in PER_REQUEST}
    assert isinstance(built["online-per-request"], PerRequestController)
    assert isinstance(built["per-request-oracle"], PerRequestOracle)
    assert isinstance(built["vllm-adaptive-verification"], VllmAdaptiveVerification)
    assert all(isinstance(c, LengthPolicy) for c in built.values())
    assert all(name in known_policy_help() for name in PER_REQUEST)


def _fixed_batch_feed(layer: PerRequestLengths, rates: dict[str, float], steps: int) -> None:
    """Every request every step, always at depth K: verified tokens and batch x depth move
    together, so the steps alone cannot tell a verified token's cost from a drafted one's.
    Step time ``c0 + c_v V + c_d D`` with 1% noise."""
    rng = random.Random(1)
    ids = tuple(rates)
    for _ in range(steps):
        acc = [_accepted(rng, rates[rid], K) for rid in ids]
        t = 0.004 + 4e-5 * len(ids) * (1 + K) + 3e-4 * K
        layer.observe(StepFeedback(
            batch_size=len(ids), gamma=K, drafted=(K,) * len(ids), accepted=tuple(acc),
            committed=sum(acc) + len(ids), interval_s=t * (1.0 + 0.01 * rng.gauss(0.0, 1.0)),
            token_budget=4096, next_gamma=K, request_ids=ids))


def _dummy_profile(verify: bool) -> CostPrior:
    """Dummy batches at half the real level, with the target alone over T if ``verify``."""
    def target(tokens: int) -> float:
        return 0.5 * (0.004 + 4e-5 * tokens)

    samples = tuple(CostSample(b, g, target(b * (1 + g)) + 0.5 * 3e-4 * g)
                    for b in (1, 2, 4, 8, 16, 32) for g in range(1, K + 1))
    times = tuple((t, target(t)) for t in sorted({s.batch * (1 + s.gamma) for s in samples}))
    return CostPrior("test profile", samples, needs_anchor=True, verify=times if verify else ())


def test_a_profile_with_verify_times_identifies_a_verified_tokens_cost_on_a_fixed_batch() -> None:
    rates = {f"easy{i}": 0.9 for i in range(8)} | {f"hard{i}": 0.2 for i in range(8)}
    blind = PerRequestLengths(K)
    _fixed_batch_feed(blind, rates, 200)
    assert blind.heterogeneous and not blind.ready  # the real steps cannot separate the costs
    seeded = PerRequestLengths(K, cost_prior=_dummy_profile(verify=True))
    _fixed_batch_feed(seeded, rates, 200)
    assert seeded.ready, seeded.snapshot()
    # the prior's shape at the real steps' level (twice the dummy one; the model reads part
    # of the difference as host work per step, which the dummy batches also lack)
    assert seeded.snapshot()["verify_token_cost_s"] == pytest.approx(4e-5, rel=0.25)
    query = VerifyQuery(tuple(rates), (K,) * len(rates), 4096)
    lengths = dict(zip(rates, seeded.lengths(query), strict=True))
    assert max(lengths[f"hard{i}"] for i in range(8)) < min(lengths[f"easy{i}"] for i in range(8))


def test_host_work_of_real_steps_does_not_scale_the_profile_slope() -> None:
    """Real steps carry 7 ms of host work the profile's batches lack: the model takes it as
    the steps' constant, not as a load that scales every term (that reading doubled the
    verified-token slope to ~6e-5 s until trimmed steps corrected it), and trimmed steps,
    which vary verified tokens apart from drafting, keep the true 4e-5 s."""
    def dummy(tokens: int) -> float:
        return 0.001 + 4e-5 * tokens

    samples = tuple(CostSample(b, g, dummy(b * (1 + g)) + 3e-4 * g)
                    for b in (1, 2, 4, 8, 16) for g in range(1, K + 1))
    times = tuple((t, dummy(t)) for t in sorted({x.batch * (1 + x.gamma) for x in samples}))
    layer = PerRequestLengths(K, cost_prior=CostPrior("test", samples, verify=times))
    rng = random.Random(2)
    ids = tuple(f"r{i}" for i in range(16))
    first = None
    for step in range(400):
        drafted = tuple(rng.randint(0, K) for _ in ids)  # what the trimmed step verified
        acc = tuple(_accepted(rng, 0.7, d) for d in drafted)
        verified = len(ids) + sum(drafted)
        t = (0.008 + 4e-5 * verified + 3e-4 * K) * (1.0 + 0.01 * rng.gauss(0.0, 1.0))
        layer.observe(StepFeedback(
            batch_size=len(ids), gamma=K, drafted=drafted, accepted=acc,
            committed=sum(acc) + len(ids), interval_s=t, token_budget=4096, next_gamma=K,
            request_ids=ids))
        if step == 16:
            first = layer.snapshot()["verify_token_cost_s"]
    assert first == pytest.approx(4e-5, rel=0.25)  # the scaled reading gave 1.5x
    assert layer.snapshot()["cost_identified"]
    assert layer.snapshot()["verify_token_cost_s"] == pytest.approx(4e-5, rel=0.15)


def test_step_samples_alone_do_not_identify_what_verify_times_do() -> None:
    """The profile's speculative steps grow verified tokens and drafting together."""
    rates = {f"easy{i}": 0.9 for i in range(8)} | {f"hard{i}": 0.2 for i in range(8)}
    steps_only = PerRequestLengths(K, cost_prior=_dummy_profile(verify=False))
    _fixed_batch_feed(steps_only, rates, 200)
    with_verify = PerRequestLengths(K, cost_prior=_dummy_profile(verify=True))
    _fixed_batch_feed(with_verify, rates, 200)
    # same data but the verify times: only they pin c_v near the truth
    err_steps = abs(steps_only.snapshot()["verify_token_cost_s"] - 4e-5)
    err_verify = abs(with_verify.snapshot()["verify_token_cost_s"] - 4e-5)
    assert err_verify < 0.25 * 4e-5 and err_verify < 0.5 * err_steps


def test_the_layer_never_overrides_a_settled_gamma_zero() -> None:
    rates = {f"easy{i}": 0.95 for i in range(8)} | {f"hard{i}": 0.2 for i in range(8)}
    for inner_gamma, may_change in ((0, False), (1, True)):
        ctrl = PerRequestController(FixedController(inner_gamma, inner_gamma), 0, K,
                                    cost_prior=_dummy_profile(verify=True))
        _fixed_batch_feed(ctrl.lengths, rates, 200)
        assert ctrl.lengths.ready
        chosen = ctrl.decide(16, 4096)
        if may_change:
            assert chosen > inner_gamma  # easy requests at 0.95: deeper pays, the layer says so
        else:
            assert chosen == 0


class _NeverSettled(FixedController):
    """A batch controller that never reports ``settled()`` (the posterior controller does so
    only for a confident gamma 0)."""

    def settled(self) -> bool:
        return False


def test_the_depth_is_re_ranked_whatever_the_batch_controller_reports() -> None:
    rates = {f"easy{i}": 0.95 for i in range(8)} | {f"hard{i}": 0.2 for i in range(8)}
    ctrl = PerRequestController(_NeverSettled(1, 1), 0, K, cost_prior=_dummy_profile(verify=True))
    _fixed_batch_feed(ctrl.lengths, rates, 200)
    assert ctrl.lengths.ready
    assert ctrl.decide(16, 4096) > 1 and ctrl.depth_decisions == 1


def test_cost_prior_verify_times_are_validated() -> None:
    with pytest.raises(ValueError, match="verify times"):
        CostPrior("x", (), verify=((0, 1e-3),))
    with pytest.raises(ValueError, match="verify times"):
        CostPrior("x", (), verify=((4, float("nan")),))
    assert CostPrior("x", (CostSample(1, 1, 1e-3),), verify=((4, 2e-3),)).verify == ((4, 2e-3),)
