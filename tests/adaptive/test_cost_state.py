"""Persisted step costs (adaptive_state_path): what is kept, when it is used, how it fails."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample
from vllm_hust_vspec.adaptive.cost_state_file import SCHEMA, CostStateError, read_state
from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.cli.launch import main
from vllm_hust_vspec.host.engine.cost_prior.persisted import CostState

FP = {"model": "/m/target", "device": "cpu", "max_num_seqs": "8"}


def step(batch: int, gamma: int, seconds: float, *, steady: bool = True,
         ran: bool = True, next_gamma: int | None = None) -> StepFeedback:
    return StepFeedback(batch_size=batch, gamma=gamma, drafted=(gamma,) * batch,
                        accepted=(0,) * batch, committed=batch, interval_s=seconds,
                        token_budget=1024, steady=steady, drafter_ran=ran,
                        next_gamma=gamma if next_gamma is None else next_gamma)


def test_means_per_arm_round_trip_and_only_clean_steps_count(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = CostState(str(path), FP)
    assert state.load() is None  # nothing yet
    for _ in range(10):
        state.observe(step(4, 2, 0.010))
        state.observe(step(4, 0, 0.004, ran=False))
    state.observe(step(4, 2, 9.0, steady=False))  # a prefill shared the step
    state.observe(step(4, 2, 9.0, next_gamma=1))  # mixes two arms' costs
    state.save()
    assert not [p for p in tmp_path.iterdir() if p.name != "state.json"]  # no temp left
    fp, prior = read_state(path)  # type: ignore[misc]
    assert fp == FP and prior.source.startswith("persisted state")
    by_key = {(s.batch, s.gamma, s.drafter_ran): s for s in prior.samples}
    assert set(by_key) == {(4, 2, True), (4, 0, False)}
    assert by_key[(4, 2, True)].seconds == pytest.approx(0.010)
    assert by_key[(4, 2, True)].count == round((1 - (63 / 64) ** 10) * 64)  # discounted
    assert by_key[(4, 0, False)].seconds == pytest.approx(0.004)

    again = CostState(str(path), FP)
    loaded = again.load()
    assert loaded is not None and set(loaded.samples) == set(prior.samples)
    # the old means carry on at their weight: one new sample moves them by 1/(count+1)
    again.observe(step(4, 2, 0.021))
    new = {(s.batch, s.gamma): s for s in again.samples()}[(4, 2)]
    assert 0.010 < new.seconds < 0.0115


def test_another_engine_configuration_is_not_used_and_the_log_names_the_fields(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.json"
    first = CostState(str(path), FP)
    first.observe(step(2, 1, 0.005))
    first.save()
    other = CostState(str(path), {**FP, "max_num_seqs": "16"})
    with caplog.at_level(logging.WARNING, logger="vllm_hust_vspec.host"):
        assert other.load() is None
    assert "max_num_seqs '8' -> '16'" in caplog.text
    other.observe(step(2, 1, 0.007))
    other.save()  # replaced by this engine's state
    fp, prior = read_state(path)  # type: ignore[misc]
    assert fp["max_num_seqs"] == "16" and prior.samples[0].seconds == pytest.approx(0.007)


@pytest.mark.parametrize(("content", "key"), [
    ("{not json", "not readable JSON"),
    (json.dumps({"schema": "other"}), "key 'schema'"),
    (json.dumps({"schema": SCHEMA, "fingerprint": {}, "samples": {}}), "key 'samples'"),
    (json.dumps({"schema": SCHEMA, "fingerprint": {}, "samples": [{"batch": 1}]}),
     "samples[0]"),
    (json.dumps({"schema": SCHEMA, "fingerprint": {}, "samples": [
        {"batch": 1, "gamma": 0, "drafter_ran": True, "seconds": -1, "count": 1}]}),
     "samples[0]"),
])
def test_a_bad_state_file_names_the_file_and_key(tmp_path: Path, content: str, key: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(CostStateError) as err:
        read_state(path)
    assert str(path) in str(err.value) and key in str(err.value)


def test_the_launcher_refuses_a_bad_state_file_before_any_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "models"
    for name in ("target", "draft"):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    bad = tmp_path / "state.json"
    bad.write_text(json.dumps({"schema": "nope"}))
    assert main(["--protocol", "cpu-tiny", "--dry-run", "--adaptive-state-path", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "flag --adaptive-state-path" in err and "key 'schema'" in err
    fresh = tmp_path / "new" / "state.json"  # absent, parent creatable: fine
    assert main(["--protocol", "cpu-tiny", "--dry-run", "--adaptive-state-path",
                 str(fresh)]) == 0


def test_cost_samples_validate() -> None:
    with pytest.raises(ValueError, match="seconds"):
        CostSample(batch=1, gamma=0, seconds=0.0)
    with pytest.raises(ValueError, match="count"):
        CostSample(batch=1, gamma=0, seconds=1.0, count=0)
    with pytest.raises(ValueError, match="source"):
        CostPrior(source="", samples=())


def test_a_restarted_online_controller_starts_from_the_persisted_costs(tmp_path: Path) -> None:
    from _adaptive_env import SynthEnv, run

    from vllm_hust_vspec.adaptive import OnlineConfig, OnlineController

    # speculation pays a little: best gamma 1 (a cold controller has to find that out)
    env = SynthEnv(a=0.010, b=2e-5, c=0.004, alpha=0.55, batch=16, noise=0.02, seed=3)
    best = env.best_gamma()
    assert best not in (0, 4)
    state = CostState(str(tmp_path / "s.json"), FP)
    first = OnlineController(OnlineConfig())
    # The first run: feedback also goes to the state, as the hook does. Its exploration
    # need not visit every arm, so the run starts with a pass over each (a first run at
    # other fixed gammas would record the same), and the prior covers every arm.
    played = [g for g in range(5) for _ in range(20)] + [None] * 300
    for g in played:
        fb = env.step(first.decide(env.batch, env.budget) if g is None else g)
        first.observe(fb)
        state.observe(fb)
    state.save()
    prior = CostState(str(tmp_path / "s.json"), FP).load()
    assert prior is not None and set(prior.gammas()) == {0, 1, 2, 3, 4}

    def first_decisions(ctrl: OnlineController, seed: int) -> list[int]:
        _, decisions = run(ctrl, SynthEnv(a=0.010, b=2e-5, c=0.004, alpha=0.55, batch=16,
                                          noise=0.02, seed=seed), 40)
        return decisions

    # Several restarts, as single runs of 40 decisions are noisy.
    cold_off = warm_off = 0
    for seed in range(4, 12):
        cold = OnlineController(OnlineConfig())
        warm = OnlineController(OnlineConfig(), cost_prior=prior)
        cold_d, warm_d = first_decisions(cold, seed), first_decisions(warm, seed)
        assert cold.snapshot()["cost_prior"] == "none"
        assert warm.snapshot()["cost_prior"].startswith("persisted state")
        # the warm controller only learns acceptance, then settles
        assert warm_d[-20:].count(best) >= 15, (seed, warm_d)
        assert sum(d != best for d in warm_d) < sum(d != best for d in cold_d), seed
        cold_off += sum(d != best for d in cold_d)
        warm_off += sum(d != best for d in warm_d)
    assert warm_off <= 0.5 * cold_off, (warm_off, cold_off)


def test_the_state_path_needs_the_online_policy(tmp_path: Path) -> None:
    from vllm_hust_vspec.adaptive import build_controller
    from vllm_hust_vspec.settings import SettingsError, resolve_settings

    with pytest.raises(SettingsError, match="adaptive_state_path.*'profile'"):
        resolve_settings(cli={"adaptive_state_path": str(tmp_path / "s.json"),
                              "adaptive_policy": "profile",
                              "adaptive_profile": str(tmp_path / "p.json")}, env={})
    with pytest.raises(SettingsError, match="adaptive_speculation is off"):
        resolve_settings(cli={"adaptive_state_path": str(tmp_path / "s.json"),
                              "adaptive_speculation": False}, env={})
    prior = CostPrior("test", (CostSample(batch=1, gamma=0, seconds=0.01),))
    with pytest.raises(ValueError, match="takes no cost prior"):
        build_controller("fixed", min_gamma=0, max_gamma=4, cost_prior=prior)


def test_the_retired_structured_policy_name_is_refused_naming_the_choices() -> None:
    from vllm_hust_vspec.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="(?i)adaptive_policy.*online, ucb1, profile"):
        load_settings({"HUST_VSPEC_ADAPTIVE_POLICY": "structured"})
