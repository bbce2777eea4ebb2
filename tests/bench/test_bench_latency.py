"""Latency tails of `vllm-hust-vspec-bench pair`: p50/p90/p99 of TTFT, TPOT and ITL per
repetition and pooled over repetitions, from either backend's per-request data, and the
--max-{ttft,tpot,itl}-p99-ratio gates with their exit status (fake timing data, no vLLM)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from vllm_hust_vspec.bench import pair as pair_mod
from vllm_hust_vspec.bench.report import pair_table, run_summary
from vllm_hust_vspec.bench.run import LoadConfig, Target, run_once
from vllm_hust_vspec.bench.stats import (
    RequestOutcome,
    compare_pair,
    latency_samples,
    percentile,
    pooled_latency,
    summarize_requests,
)
from vllm_hust_vspec.cli import bench as bench_cli

TOKENS = 11  # output tokens per fake request: 10 gaps after the first


def outcome(ttft_ms: float, tpot_ms: float, itl_ms: float | None = None) -> RequestOutcome:
    """A request with the given TTFT and TPOT whose 10 chunks arrive ``itl_ms`` apart."""
    gap = tpot_ms if itl_ms is None else itl_ms
    return RequestOutcome(ok=True, prompt_tokens=5, output_tokens=TOKENS, ttft_s=ttft_ms / 1e3,
                          latency_s=(ttft_ms + tpot_ms * (TOKENS - 1)) / 1e3,
                          itl_s=(gap / 1e3,) * (TOKENS - 1))


def builtin_run(outcomes: list[RequestOutcome], duration_s: float = 10.0) -> dict[str, Any]:
    """A run result as the built-in client writes it (figures plus ``requests``)."""
    result = summarize_requests(outcomes, duration_s, percentiles=(50, 90, 99))
    result["requests"] = json.loads(json.dumps([asdict(o) for o in outcomes]))
    return result


def vllm_run(outcomes: list[RequestOutcome], failed: int = 0) -> dict[str, Any]:
    """A run result as ``vllm bench serve --save-detailed`` writes it (parallel lists; a
    failed request has an error and 0 output tokens)."""
    result = summarize_requests(outcomes, 10.0, percentiles=(50, 90, 99))
    result.update({
        "ttfts": [o.ttft_s for o in outcomes] + [0.0] * failed,
        "latencies": [o.latency_s for o in outcomes] + [0.0] * failed,
        "output_lens": [o.output_tokens for o in outcomes] + [0] * failed,
        "itls": [list(o.itl_s) for o in outcomes] + [[]] * failed,
        "errors": [""] * len(outcomes) + ["boom"] * failed,
    })
    return result


def ramp(n: int, start: float, step: float) -> list[float]:
    return [start + step * i for i in range(n)]


# ---- percentiles ----------------------------------------------------------------------------
def test_per_run_p50_p90_p99_of_ttft_tpot_and_itl() -> None:
    ttfts = ramp(100, 1.0, 1.0)  # 1..100 ms
    run = builtin_run([outcome(t, 2.0, itl_ms=4.0) for t in ttfts])
    assert run["p50_ttft_ms"] == pytest.approx(50.5)
    assert run["p90_ttft_ms"] == pytest.approx(90.1)
    assert run["p99_ttft_ms"] == pytest.approx(99.01)
    assert run["p50_tpot_ms"] == pytest.approx(2.0) and run["p99_tpot_ms"] == pytest.approx(2.0)
    assert run["p90_itl_ms"] == pytest.approx(4.0)
    text = run_summary(run)
    assert "TTFT mean/p50/p90/p99  50.50 / 50.50 / 90.10 / 99.01 ms" in text
    assert "ITL mean/p50/p90/p99  4.00 / 4.00 / 4.00 / 4.00 ms" in text


def test_samples_from_either_backend_agree_and_skip_failed_requests() -> None:
    outs = [outcome(t, 1.0 + t / 100) for t in ramp(20, 5.0, 3.0)]
    failed = RequestOutcome(ok=False, error="boom")
    a = latency_samples(builtin_run([*outs, failed]))
    b = latency_samples(vllm_run(outs, failed=1))
    assert a is not None and b is not None
    for m in ("ttft", "tpot", "itl"):
        assert a[m] == pytest.approx(b[m])
    assert len(a["ttft"]) == 20 and len(a["itl"]) == 20 * (TOKENS - 1)
    assert a["tpot"][3] == pytest.approx(1.0 + 14.0 / 100)
    assert latency_samples({"output_throughput": 1.0}) is None  # no per-request data


def test_pooled_percentiles_come_from_every_request_not_a_median_of_tails() -> None:
    # Two repetitions of 50 requests: one with a slow tail, one without.
    slow = builtin_run([outcome(t, 2.0) for t in ramp(50, 1.0, 1.0)])  # TTFT 1..50
    fast = vllm_run([outcome(t, 2.0) for t in ramp(50, 0.5, 0.1)])  # TTFT 0.5..5.4
    pooled = pooled_latency([slow, fast])
    assert pooled is not None and pooled["requests"] == 100
    every = [*ramp(50, 1.0, 1.0), *ramp(50, 0.5, 0.1)]
    for q in (50, 90, 99):
        assert pooled[f"p{q}_ttft_ms"] == pytest.approx(percentile(every, q))
    assert pooled["p99_ttft_ms"] == pytest.approx(percentile(every, 99))
    assert pooled["p99_ttft_ms"] != pytest.approx((slow["p99_ttft_ms"] + fast["p99_ttft_ms"]) / 2)
    assert pooled_latency([slow, {"output_throughput": 1.0}]) is None


# ---- gates ----------------------------------------------------------------------------------
def arms(vspec_ttft_scale: float, vspec_tpot_ms: float, vspec_itl_ms: float
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two repetitions per arm; target-only TTFT 1..40 ms, TPOT 2 ms, ITL 2 ms."""
    base = [builtin_run([outcome(t, 2.0) for t in ramp(40, 1.0, 1.0)], 10.0) for _ in range(2)]
    new = [builtin_run([outcome(t * vspec_ttft_scale, vspec_tpot_ms, vspec_itl_ms)
                        for t in ramp(40, 1.0, 1.0)], 8.0) for _ in range(2)]
    return base, new


def test_each_gate_passes_and_fails_on_the_pooled_p99_ratio() -> None:
    base, new = arms(vspec_ttft_scale=1.3, vspec_tpot_ms=1.5, vspec_itl_ms=5.0)
    cmp = compare_pair(base, new, min_speedup=1.1,
                       max_p99_ratios={"ttft": 1.2, "tpot": 0.8, "itl": 2.6})
    assert cmp.throughput_passed  # 10 s vs 8 s for the same tokens: 1.25x
    gates = {g.metric: g for g in cmp.gates}
    assert gates["ttft"].value == pytest.approx(1.3) and not gates["ttft"].passed
    assert gates["tpot"].value == pytest.approx(0.75) and gates["tpot"].passed
    assert gates["itl"].value == pytest.approx(2.5) and gates["itl"].passed
    assert {g.source for g in cmp.gates} == {"pooled"}
    assert not cmp.passed  # one gate failed: the pair fails
    assert compare_pair(base, new, min_speedup=1.1, max_p99_ratios={"ttft": 1.3}).passed
    assert not compare_pair(base, new, min_speedup=1.1, max_p99_ratios={"tpot": 0.7}).passed
    assert not compare_pair(base, new, min_speedup=1.1, max_p99_ratios={"itl": 2.4}).passed
    assert not compare_pair(base, new, min_speedup=1.3, max_p99_ratios={"itl": 2.6}).passed
    assert compare_pair(base, new, min_speedup=1.1).passed  # no gate: throughput alone
    d = cmp.to_dict()
    assert d["passed"] is False and d["throughput_passed"] is True
    assert [g["metric"] for g in d["latency_gates"]] == ["ttft", "tpot", "itl"]
    assert d["pooled_latency"]["ratio"]["p99_ttft_ms"] == pytest.approx(1.3)
    assert d["pooled_latency"]["vspec"]["requests"] == 80
    # per repetition too: every run's own p50/p90/p99, medians [min-max] per arm
    a, b = cmp.figures["p90_ttft_ms"]
    assert a.values == pytest.approx((36.1, 36.1)) and b.median == pytest.approx(36.1 * 1.3)
    table = pair_table(cmp, {})
    assert "p99 TTFT ratio (vSpec / target-only, pooled): **1.300x**" in table
    assert "limit 1.20x: **FAIL**" in table and "limit 2.60x: **PASS**" in table
    assert "verdict (throughput and latency gates): **FAIL**" in table
    assert "| p99 TPOT (ms) | 2.00 | 1.50 | 0.750 |" in table  # pooled table


def test_without_per_request_data_the_gate_uses_the_median_of_repetition_tails() -> None:
    base = [{"output_throughput": 10.0, "p99_ttft_ms": p} for p in (100.0, 120.0, 110.0)]
    new = [{"output_throughput": 12.0, "p99_ttft_ms": p} for p in (130.0, 125.0, 400.0)]
    cmp = compare_pair(base, new, min_speedup=1.0, max_p99_ratios={"ttft": 1.2, "itl": 2.0})
    ttft, itl = cmp.gates
    assert ttft.source == "median of repetitions" and ttft.value == pytest.approx(130 / 110)
    assert ttft.passed
    exact = compare_pair(base, [{**r, "p99_ttft_ms": r["p99_ttft_ms"] * 1.2} for r in base],
                         min_speedup=1.0, max_p99_ratios={"ttft": 1.2})
    assert exact.gates[0].value == 1.2 and exact.passed  # the limit is inclusive
    # never measured: the gate fails rather than pass unseen
    assert itl.source == "not measured" and itl.value is None and not itl.passed
    assert not cmp.passed and cmp.pooled == {"baseline": None, "vspec": None}


def test_an_unknown_gate_metric_is_refused() -> None:
    base, new = arms(1.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="e2el"):
        compare_pair(base, new, min_speedup=1.0, max_p99_ratios={"e2el": 1.0})


# ---- the CLI: flags, plan, exit status ------------------------------------------------------
@pytest.fixture
def fake_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("target", "draft"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text("{}")
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path / "models"))
    for key in ("HUST_VSPEC_ENABLED", "VSPEC_CONFIG", "VLLM_PLUGINS"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path / "models"


def test_gate_flags_reach_the_plan(fake_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run", "--json",
                         "--backend", "builtin", "--max-ttft-p99-ratio", "1.2",
                         "--max-itl-p99-ratio", "3"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["max_p99_ratios"] == {"ttft": 1.2, "itl": 3.0}
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run",
                         "--max-tpot-p99-ratio", "1.05"])
    assert "p99 TPOT vSpec/target-only <= 1.05" in capsys.readouterr().out
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(SystemExit) as exc:
            bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run",
                            "--max-ttft-p99-ratio", bad])
        assert exc.value.code == 2
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run", "--dataset",
                         "speed-bench", "--dataset-path", str(fake_models / "none.jsonl"),
                         "--max-ttft-p99-ratio", "1.2"])
    assert rc == 2


@pytest.mark.parametrize(("flags", "status"), [
    ([], 0),
    (["--max-ttft-p99-ratio", "1.35"], 0),
    (["--max-ttft-p99-ratio", "1.25"], 1),
    (["--max-tpot-p99-ratio", "0.76", "--max-itl-p99-ratio", "2.51"], 0),
    (["--max-tpot-p99-ratio", "0.74"], 1),
    (["--max-itl-p99-ratio", "2.49"], 1),
    (["--max-ttft-p99-ratio", "1.35", "--min-speedup", "1.3"], 1),
])
def test_pair_exit_status_follows_every_gate(
    flags: list[str], status: int, fake_models: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    base, new = arms(vspec_ttft_scale=1.3, vspec_tpot_ms=1.5, vspec_itl_ms=5.0)

    def fake_run_pair(plan: pair_mod.PairPlan, progress: Any = None) -> pair_mod.PairResult:
        out = pair_mod.PairResult(plan=plan, runs={"baseline": base, "vspec": new})
        out.comparison = compare_pair(base, new, min_speedup=plan.min_speedup,
                                      max_p99_ratios=plan.max_p99_ratios)
        summary = out.to_dict()
        assert "requests" not in summary["runs"]["vspec"][0]  # per-request data stays per run
        assert summary["runs"]["vspec"][0]["p99_tpot_ms"] == pytest.approx(1.5)
        return out

    monkeypatch.setattr(pair_mod, "run_pair", fake_run_pair)
    if "--min-speedup" not in flags:
        flags = [*flags, "--min-speedup", "1.1"]
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--backend", "builtin", "--quiet",
                         "--result-dir", str(tmp_path / "r"), *flags])
    out = capsys.readouterr().out
    assert rc == status, out
    assert "| p99 TTFT (ms) |" in out and "Latency over every request" in out


# ---- the built-in client against the fake streaming server (tests/support/_fake_openai.py) ---
def test_a_builtin_run_reports_the_percentiles_and_pools(
    fake_server: str, tmp_path: Path
) -> None:
    load = LoadConfig(num_prompts=6, output_len=8, input_len=4, warmup_prompts=0)
    runs = [run_once(Target(fake_server, "m", None), load, backend="builtin", workdir=tmp_path,
                     name=f"r{i}").result for i in range(2)]
    for run in runs:
        for m in ("ttft", "tpot", "itl"):
            assert run[f"p50_{m}_ms"] <= run[f"p90_{m}_ms"] <= run[f"p99_{m}_ms"]
    pooled = pooled_latency(runs)
    assert pooled is not None and pooled["requests"] == 12
    samples = [latency_samples(r) for r in runs]
    assert all(s is not None and len(s["itl"]) == 6 * 3 for s in samples)  # 2 tokens a chunk
