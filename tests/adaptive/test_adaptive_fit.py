"""NNLS fitting of the profile latency model, and the fit-profile CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from vllm_hust_vspec.adaptive import (
    FitError,
    FitSample,
    Profile,
    fit_profile,
    load_profile,
    parse_samples,
)
from vllm_hust_vspec.adaptive.nnls import dependent_columns, lstsq, nnls
from vllm_hust_vspec.cli.fit_profile import main

TRUE = {
    "tc": 0.008, "tb": 3e-5, "tx": 2e-9,
    "dc": 0.0007, "db": 4e-6, "dx": 5e-10,
    "ov": 0.0002,
}


def _samples(noise: float = 0.0, seed: int = 0, split: bool = False) -> list[FitSample]:
    rng = random.Random(seed)
    out = []
    for batch in (1, 4, 16, 64, 128):
        for gamma in range(5):
            for ctx_per_req in (256, 2048):
                ctx = batch * ctx_per_req
                nbt = batch * (1 + gamma)
                target = TRUE["tc"] + TRUE["tb"] * nbt + TRUE["tx"] * ctx
                draft = gamma * (TRUE["dc"] + TRUE["db"] * batch + TRUE["dx"] * ctx)
                over = gamma * TRUE["ov"]
                jitter = 1.0 + noise * rng.gauss(0.0, 1.0)
                out.append(FitSample(
                    batch_size=batch, gamma=gamma, num_batched_tokens=nbt, context_tokens=ctx,
                    step_s=(target + draft + over) * jitter,
                    draft_s=draft * jitter if split else None,
                    target_s=target * jitter if split else None,
                ))
    return out


def test_joint_fit_recovers_coefficients() -> None:
    res = fit_profile(_samples())
    p = res.profile
    assert p.target.constant_s == pytest.approx(TRUE["tc"], rel=1e-6)
    assert p.target.per_batched_token_s == pytest.approx(TRUE["tb"], rel=1e-6)
    assert p.target.per_context_token_s == pytest.approx(TRUE["tx"], rel=1e-5)
    # step times alone cannot separate draft constant from per-gamma overhead: folded
    assert p.draft.constant_s == pytest.approx(TRUE["dc"] + TRUE["ov"], rel=1e-6)
    assert p.draft.per_batched_token_s == pytest.approx(TRUE["db"], rel=1e-6)
    assert p.draft.per_context_token_s == pytest.approx(TRUE["dx"], rel=1e-5)
    assert p.per_gamma_overhead_s == 0.0
    assert res.residual < 1e-9
    assert res.num_samples == 50
    assert p.fit is not None and p.fit.num_samples == 50


def test_split_fit_recovers_overhead() -> None:
    res = fit_profile(_samples(split=True))
    assert res.profile.per_gamma_overhead_s == pytest.approx(TRUE["ov"], rel=1e-6)
    assert res.profile.draft.constant_s == pytest.approx(TRUE["dc"], rel=1e-6)
    assert res.mode.startswith("split")


def test_noisy_fit_reports_residual_and_non_negative_coefficients() -> None:
    res = fit_profile(_samples(noise=0.05, seed=3))
    assert 0.01 < res.relative_residual < 0.1
    d = res.profile.to_dict()
    assert all(v >= 0 for part in ("target", "draft") for v in d[part].values())
    assert res.profile.target.per_batched_token_s == pytest.approx(TRUE["tb"], rel=0.2)


def test_too_few_samples() -> None:
    with pytest.raises(FitError, match="need at least 7 samples"):
        fit_profile(_samples()[:5])


def test_single_gamma_is_degenerate() -> None:
    only = [s for s in _samples() if s.gamma == 2]
    with pytest.raises(FitError, match=r"draft\.constant_s"):
        fit_profile(only)


def test_constant_context_is_degenerate_unless_context_terms_off() -> None:
    fixed_ctx = [s for s in _samples() if s.context_tokens / s.batch_size == 256]
    fixed_ctx = [FitSample(s.batch_size, s.gamma, s.num_batched_tokens, 1000.0, s.step_s)
                 for s in fixed_ctx]
    with pytest.raises(FitError, match=r"per_context_token_s.*--no-context-terms"):
        fit_profile(fixed_ctx)
    res = fit_profile(fixed_ctx, context_terms=False)
    assert res.profile.target.per_context_token_s == 0.0


def test_partial_draft_times_rejected() -> None:
    s = _samples(split=True)
    s[3] = FitSample(s[3].batch_size, s[3].gamma, s[3].num_batched_tokens, s[3].context_tokens,
                     s[3].step_s)
    with pytest.raises(FitError, match=r"draft_s .*samples\[3\]"):
        fit_profile(s)


def test_parse_samples_errors_name_key() -> None:
    with pytest.raises(FitError, match=r"samples\[1\]\.stepp_s"):
        parse_samples([{"batch_size": 1, "gamma": 0, "step_s": 0.01},
                       {"batch_size": 1, "gamma": 0, "stepp_s": 0.01}])
    with pytest.raises(FitError, match=r"samples\[0\]\.step_s"):
        parse_samples({"samples": [{"batch_size": 1, "gamma": 0}]})
    with pytest.raises(FitError, match=r"samples\[0\]\.gamma"):
        parse_samples([{"batch_size": 1, "gamma": -1, "step_s": 0.01}])
    got = parse_samples([{"batch_size": 4, "gamma": 2, "step_s": 0.01}])
    assert got[0].num_batched_tokens == 12 and got[0].context_tokens == 0.0


def test_nnls_matches_kkt_conditions() -> None:
    rng = random.Random(1)
    m = 30
    cols = [[rng.uniform(0, 1) for _ in range(m)] for _ in range(4)]
    truth = [1.0, -2.0, 0.5, 3.0]
    b = [sum(cols[j][i] * truth[j] for j in range(4)) for i in range(m)]
    x = nnls(cols, b)
    assert all(v >= 0 for v in x)
    resid = [b[i] - sum(cols[j][i] * x[j] for j in range(4)) for i in range(m)]
    grad = [sum(c[i] * resid[i] for i in range(m)) for c in cols]
    for xj, gj in zip(x, grad, strict=True):
        assert gj <= 1e-9  # no descent direction into the feasible set
        if xj > 0:
            assert abs(gj) < 1e-9
    assert x[1] == 0.0
    # unconstrained solve recovers the exact truth
    assert lstsq(cols, b) == pytest.approx(truth, rel=1e-9)
    assert dependent_columns([cols[0], cols[1], [a + c for a, c in zip(cols[0], cols[1],
                                                                        strict=True)]]) == [2]


def _sample_dicts() -> list[dict[str, float]]:
    return [{"batch_size": s.batch_size, "gamma": s.gamma,
             "num_batched_tokens": s.num_batched_tokens, "context_tokens": s.context_tokens,
             "step_s": s.step_s} for s in _samples(noise=0.01, seed=5)]


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "samples.json"
    samples.write_text(json.dumps({"samples": _sample_dicts()}))
    out = tmp_path / "profile.json"
    out.write_text("old")
    rc = main([str(samples), str(out), "--name", "t", "--method", "mtp",
               "--default-acceptance", "0.8,0.6"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "residual: rmse" in printed and "relative" in printed
    prof = load_profile(out)
    assert isinstance(prof, Profile)
    assert prof.name == "t" and prof.default_acceptance == (0.8, 0.6)
    assert prof.fit is not None and prof.fit.num_samples == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json", "samples.json"]


def test_cli_reports_bad_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "samples.json"
    samples.write_text(json.dumps([{"batch_size": 1, "gamma": 0, "step": 0.1}]))
    out = tmp_path / "profile.json"
    assert main([str(samples), str(out)]) == 1
    err = capsys.readouterr().err
    assert "samples.json" in err and "samples[0].step" in err
    assert not out.exists()


def test_cli_help_and_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["--help"])
    assert ex.value.code == 0
    assert "samples.json" in capsys.readouterr().out
    with pytest.raises(SystemExit) as ex:
        main(["a.json", "b.json", "--default-acceptance", "1.5"])
    assert ex.value.code == 2
