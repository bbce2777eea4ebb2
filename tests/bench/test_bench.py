"""vllm-hust-vspec-bench pure logic: datasets, summary math, metrics parsing, pair commands,
dry runs, and the built-in client against a local fake SSE server (no vLLM)."""

from __future__ import annotations

import json
import math
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from _fake_openai import FakeOpenAI

from vllm_hust_vspec.bench import metrics
from vllm_hust_vspec.bench import server as server_mod
from vllm_hust_vspec.bench.client import LoadSpec, run_load
from vllm_hust_vspec.bench.datasets import (
    BenchRequest,
    DatasetError,
    load_requests,
    write_custom_jsonl,
)
from vllm_hust_vspec.bench.pair import aggregate_acceptance
from vllm_hust_vspec.bench.server import (
    ServerProcess,
    ServerStartError,
    base_url_of,
    baseline_command,
    with_flag,
)
from vllm_hust_vspec.bench.stats import (
    RequestOutcome,
    Spread,
    compare_pair,
    median,
    percentile,
    summarize_requests,
)
from vllm_hust_vspec.bench.vllm_cli import VllmBenchArgs, bench_argv
from vllm_hust_vspec.cli import bench as bench_cli
from vllm_hust_vspec.launch.command import ServeCommand


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ---- datasets ---------------------------------------------------------------------------
def test_gsm8k_prompts_cycle_to_the_requested_count(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "gsm8k.jsonl", [{"question": "1+1?", "answer": "2"},
                                          {"question": "2+2?", "answer": "4"}])
    reqs = load_requests("gsm8k", f, num_prompts=5, output_tokens=7)
    assert [r.prompt for r in reqs[:2]] == ["Question: 1+1?\nAnswer:", "Question: 2+2?\nAnswer:"]
    assert reqs[2] == reqs[0] and len(reqs) == 5
    assert all(r.output_tokens == 7 for r in reqs)


def test_arc_easy_both_shapes(tmp_path: Path) -> None:
    hf = {"question": "Sky colour?", "choices": {"text": ["blue", "red"], "label": ["A", "B"]}}
    orig = {"question": {"stem": "Sky colour?", "choices": [{"label": "A", "text": "blue"},
                                                           {"label": "B", "text": "red"}]}}
    f = _jsonl(tmp_path / "arc.jsonl", [hf, orig])
    a, b = load_requests("arc-easy", f, num_prompts=2, output_tokens=4)
    assert a.prompt == b.prompt == "Question: Sky colour?\nA. blue\nB. red\nAnswer:"


def test_spec_bench_and_custom(tmp_path: Path) -> None:
    sb = _jsonl(tmp_path / "q.jsonl", [{"question_id": 1, "turns": ["Write a poem.", "More."]}])
    assert load_requests("spec_bench", sb, num_prompts=1, output_tokens=3)[0].prompt == (
        "Write a poem.")
    cu = _jsonl(tmp_path / "c.jsonl", [{"prompt": "hi", "output_tokens": 9}, {"prompt": "yo"}])
    reqs = load_requests("custom", cu, num_prompts=2, output_tokens=3)
    assert [(r.prompt, r.output_tokens) for r in reqs] == [("hi", 9), ("yo", 3)]


def test_custom_round_trip(tmp_path: Path) -> None:
    reqs = [BenchRequest("a b", 3), BenchRequest("c", 5)]
    write_custom_jsonl(reqs, tmp_path / "x.jsonl")
    assert load_requests("custom", tmp_path / "x.jsonl", num_prompts=2, output_tokens=1) == reqs


@pytest.mark.parametrize(
    ("dataset", "rows", "needle"),
    [
        ("gsm8k", [{"question": "ok"}, "{not json"], "g.jsonl:2: not valid JSON"),
        ("gsm8k", [{"question": "ok"}, {"answer": "x"}], "g.jsonl:2: missing key 'question'"),
        ("gsm8k", ["[1, 2]"], "g.jsonl:1: expected a JSON object"),
        ("arc-easy", [{"question": "q", "choices": ["a"]}], "g.jsonl:1: key 'choices'"),
        ("spec_bench", [{"turns": []}], "g.jsonl:1: key 'turns'"),
        ("custom", [{"prompt": "p", "output_tokens": 0}], "g.jsonl:1: key 'output_tokens'"),
        ("custom", [{"text": "p"}], "g.jsonl:1: missing key 'prompt'"),
        ("custom", ["", "  "], "no prompts"),
    ],
)
def test_dataset_errors_name_file_line_and_key(
    tmp_path: Path, dataset: str, rows: list[Any], needle: str
) -> None:
    f = _jsonl(tmp_path / "g.jsonl", rows)
    with pytest.raises(DatasetError, match=".*") as err:
        load_requests(dataset, f, num_prompts=2, output_tokens=4)
    assert needle in str(err.value)


def test_dataset_option_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="needs --dataset-path"):
        load_requests("gsm8k", None, num_prompts=1, output_tokens=1)
    with pytest.raises(DatasetError, match="cannot read dataset"):
        load_requests("gsm8k", tmp_path / "missing.jsonl", num_prompts=1, output_tokens=1)
    with pytest.raises(DatasetError, match="unknown dataset 'sharegpt'"):
        load_requests("sharegpt", None, num_prompts=1, output_tokens=1)


def test_random_prompts_are_seeded() -> None:
    a = load_requests("random", None, num_prompts=3, output_tokens=5, input_len=10, seed=1)
    b = load_requests("random", None, num_prompts=3, output_tokens=5, input_len=10, seed=1)
    c = load_requests("random", None, num_prompts=3, output_tokens=5, input_len=10, seed=2)
    assert a == b and a != c
    assert len(a[0].prompt.split()) == 11  # index prefix + 10 words


def test_shuffle_is_deterministic_and_covers_the_file(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "c.jsonl", [{"prompt": f"p{i}"} for i in range(10)])
    a = load_requests("custom", f, num_prompts=10, output_tokens=1, shuffle=True, seed=3)
    b = load_requests("custom", f, num_prompts=10, output_tokens=1, shuffle=True, seed=3)
    assert a == b and sorted(r.prompt for r in a) == sorted(f"p{i}" for i in range(10))
    assert [r.prompt for r in a] != [f"p{i}" for i in range(10)]


# ---- summary math -----------------------------------------------------------------------
def test_percentile_and_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert median([]) == 0.0


def test_percentile_is_the_inclusive_quantile_and_std_the_population_one() -> None:
    import random
    import statistics

    rng = random.Random(7)
    xs = [rng.lognormvariate(0.0, 1.0) for _ in range(37)]
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    for q in (1, 50, 90, 99):
        assert percentile(xs, q) == pytest.approx(cuts[q - 1], rel=1e-12)
    assert percentile(xs, 0) == min(xs) and percentile(xs, 100) == max(xs)
    assert percentile([4.0], 99.9) == 4.0
    assert median(xs) == statistics.median(xs)
    ms = [x * 1e3 for x in xs]
    d = summarize_requests([RequestOutcome(ok=True, ttft_s=x) for x in xs], 1.0)
    assert d["std_ttft_ms"] == pytest.approx(statistics.pstdev(ms), rel=1e-12)
    assert d["mean_ttft_ms"] == pytest.approx(statistics.fmean(ms), rel=1e-12)


def test_summarize_requests_figures() -> None:
    outs = [
        RequestOutcome(ok=True, prompt_tokens=10, output_tokens=11, ttft_s=0.1, latency_s=1.1,
                       itl_s=(0.1,) * 10),
        RequestOutcome(ok=True, prompt_tokens=10, output_tokens=21, ttft_s=0.3, latency_s=2.3,
                       itl_s=(0.1,) * 20),
        RequestOutcome(ok=False, error="boom"),
    ]
    r = summarize_requests(outs, duration_s=4.0)
    assert r["completed"] == 2 and r["failed"] == 1
    assert r["total_output_tokens"] == 32
    assert r["output_throughput"] == pytest.approx(8.0)
    assert r["total_token_throughput"] == pytest.approx(13.0)
    assert r["mean_ttft_ms"] == pytest.approx(200.0)
    assert r["mean_tpot_ms"] == pytest.approx(100.0)  # (1.1-0.1)/10 and (2.3-0.3)/20
    assert r["mean_itl_ms"] == pytest.approx(100.0)
    assert RequestOutcome(ok=True, output_tokens=1, latency_s=1.0).tpot_s is None


def test_compare_pair_medians_ratio_and_verdict() -> None:
    base = [{"output_throughput": t, "mean_tpot_ms": 10.0} for t in (100.0, 90.0, 110.0)]
    new = [{"output_throughput": t, "mean_tpot_ms": 8.0} for t in (120.0, 150.0, 100.0)]
    cmp = compare_pair(base, new, min_speedup=1.10)
    assert cmp.speedup == pytest.approx(1.2)  # median 120 / median 100
    assert cmp.rep_speedups == pytest.approx((1.2, 150 / 90, 100 / 110))
    assert cmp.passed
    a, b = cmp.figures["output_throughput"]
    assert (a.low, a.high, b.median) == (90.0, 110.0, 120.0)
    assert "mean_ttft_ms" not in cmp.figures  # absent figures are skipped, not invented
    assert not compare_pair(base, new, min_speedup=1.21).passed
    assert compare_pair(base, new, min_speedup=1.2).passed  # threshold is inclusive
    d = cmp.to_dict()
    assert d["figures"]["mean_tpot_ms"]["ratio_of_medians"] == pytest.approx(0.8)


def test_compare_pair_zero_baseline_fails() -> None:
    cmp = compare_pair([{"output_throughput": 0.0}], [{"output_throughput": 5.0}],
                       min_speedup=1.0)
    assert math.isnan(cmp.speedup) and not cmp.passed
    with pytest.raises(ValueError):
        compare_pair([], [{"output_throughput": 1.0}], min_speedup=1.0)


def test_spread() -> None:
    s = Spread.of([2.0, 1.0, 4.0])
    assert (s.median, s.low, s.high) == (2.0, 1.0, 4.0)
    assert s.rel_range == pytest.approx(1.5)


# ---- metrics ----------------------------------------------------------------------------
PROM_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total drafts
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vspec_draft_tokens_per_pos_total{position="0"} 10.0
vspec_accepted_tokens_per_pos_total{position="0"} 8.0
vspec_refill_holds_total 3.0
"""
PROM_AFTER = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 110.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 340.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 170.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 88.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50.0
vspec_draft_tokens_per_pos_total{position="0"} 110.0
vspec_draft_tokens_per_pos_total{position="1"} 60.0
vspec_accepted_tokens_per_pos_total{position="0"} 88.0
vspec_accepted_tokens_per_pos_total{position="1"} 30.0
vspec_gamma_steps_total{gamma="2"} 7.0
vspec_gamma_steps_created{gamma="2"} 1.7e9
vspec_refill_holds_total 8.0
"""


def test_parse_prometheus_labels_and_values() -> None:
    s = metrics.parse_prometheus(PROM_AFTER + 'x{a="q\\"uote",b="1"} 2.5\nnolabels 3\n')
    assert s[("x", (("a", 'q"uote'), ("b", "1")))] == 2.5
    assert s[("nolabels", ())] == 3.0
    assert metrics.by_label(s, "vspec_draft_tokens_per_pos_total", "position") == {0: 110.0,
                                                                                   1: 60.0}


PROM_TYPED = """\
# HELP vllm:e2e_request_latency_seconds latency
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 0.5
# TYPE vspec_gamma_steps counter
vspec_gamma_steps_total{gamma="3"} 4 1700000000000
"""


@pytest.mark.parametrize("parser", ["prometheus_client", "stand-in"])
def test_parse_prometheus_with_and_without_prometheus_client(
    parser: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if parser == "stand-in":
        monkeypatch.setitem(__import__("sys").modules, "prometheus_client.parser", None)
    s = metrics.parse_prometheus(PROM_AFTER + PROM_TYPED)
    assert s[("vspec_gamma_steps_total", (("gamma", "3"),))] == 4.0  # suffix kept, no timestamp
    assert s[("vllm:e2e_request_latency_seconds_bucket",
              (("le", "+Inf"), ("model_name", "m")))] == 3.0
    assert metrics.by_label(s, "vspec_gamma_steps_total", "gamma") == {2: 7.0, 3: 4.0}
    # one malformed line costs that line only, not the whole scrape
    broken = metrics.parse_prometheus(PROM_AFTER + "half{a=\"1\"\nnovalue\n")
    assert broken == metrics.parse_prometheus(PROM_AFTER)


def test_spec_figures_over_the_window_prefer_vspec_counters() -> None:
    window = metrics.diff(metrics.parse_prometheus(PROM_AFTER),
                          metrics.parse_prometheus(PROM_BEFORE))
    f = metrics.spec_figures(window)
    assert f.num_drafts == 100 and f.draft_tokens == 300 and f.accepted_tokens == 150
    assert f.acceptance_length == pytest.approx(2.5)
    assert f.acceptance_rate == pytest.approx(0.5)
    assert f.per_position_source == "vspec"
    assert f.per_position == pytest.approx([0.8, 0.5])  # 80/100, 30/60
    assert f.gamma_steps == {2: 7.0}
    assert f.refill_holds == 5.0 and f.to_dict()["refill_holds"] == 5.0


def test_spec_figures_fall_back_to_vllm_counters_and_empty() -> None:
    only_vllm = {k: v for k, v in metrics.parse_prometheus(PROM_AFTER).items()
                 if k[0].startswith("vllm:")}
    f = metrics.spec_figures(only_vllm)
    assert f.per_position_source == "vllm"
    assert f.per_position == pytest.approx([0.8, 50 / 110])
    empty = metrics.spec_figures({})
    assert empty.acceptance_length is None and empty.per_position == []


def test_aggregate_acceptance_medians_and_sums() -> None:
    runs = [{"spec": {"acceptance_length": 2.0, "acceptance_rate": 0.4,
                      "per_position_acceptance": [0.8, 0.4], "per_position_source": "vspec",
                      "gamma_steps": {"2": 5.0}}},
            {"spec": {"acceptance_length": 3.0, "acceptance_rate": 0.6,
                      "per_position_acceptance": [0.6], "per_position_source": "vspec",
                      "gamma_steps": {"2": 1.0, "0": 2.0}}}]
    a = aggregate_acceptance(runs)
    assert a["acceptance_length"] == 2.5
    assert a["per_position_acceptance"] == pytest.approx([0.7, 0.4])
    assert a["gamma_steps"] == {"0": 2.0, "2": 6.0}


# ---- commands ---------------------------------------------------------------------------
VSPEC_CMD = ServeCommand(
    argv=["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/t", "--host",
          "0.0.0.0", "--port", "8000", "--dtype", "float32", "--speculative-config",
          '{"method": "draft_model"}', "--enforce-eager"],
    env={"HUST_VSPEC_ENABLED": "1", "HUST_VSPEC_GAMMA": "4", "VLLM_CPU_KVCACHE_SPACE": "1",
         "PROMETHEUS_MULTIPROC_DIR": "/tmp/p"},
)


def test_baseline_command_is_the_vspec_command_without_speculation() -> None:
    base = baseline_command(VSPEC_CMD)
    assert "--speculative-config" not in base.argv
    assert [a for a in VSPEC_CMD.argv if a not in ("--speculative-config",
                                                   '{"method": "draft_model"}')] == base.argv
    assert base.env == {"HUST_VSPEC_ENABLED": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                        "PROMETHEUS_MULTIPROC_DIR": "/tmp/p"}
    with pytest.raises(ValueError, match="no --speculative-config"):
        baseline_command(base)


def test_with_flag_and_base_url() -> None:
    moved = with_flag(VSPEC_CMD.argv, "--port", "1234")
    assert moved.index("--port") == VSPEC_CMD.argv.index("--port") and "1234" in moved
    assert with_flag(["a", "--port=1"], "--port", "2") == ["a", "--port=2"]
    assert with_flag(["a"], "--port", "2") == ["a", "--port", "2"]
    assert base_url_of(ServeCommand(argv=moved)) == "http://127.0.0.1:1234"


def test_vllm_bench_argv_custom_and_random() -> None:
    args = VllmBenchArgs(base_url="http://h:1/", served_model_name="m", tokenizer="/tok",
                         dataset="custom", dataset_path="/p.jsonl", num_prompts=200,
                         output_len=256, input_len=128, request_rate=float("inf"),
                         max_concurrency=None, temperature=0.0, seed=0, ignore_eos=True,
                         result_dir="/r", result_filename="x.json")
    argv = bench_argv(args, runner=["vllm", "bench", "serve"])
    text = " ".join(argv)
    assert argv[:3] == ["vllm", "bench", "serve"]
    assert "--base-url http://h:1 " in text and "--dataset-name custom" in text
    assert "--custom-output-len 256" in text and "--request-rate inf" in text
    assert "--ignore-eos" in argv and "--temperature 0.0" in text
    assert "--max-concurrency" not in argv
    rnd = bench_argv(VllmBenchArgs(**{**args.__dict__, "dataset": "random",
                                      "dataset_path": None, "max_concurrency": 4}), runner=["v"])
    assert "--random-input-len" in rnd and rnd[rnd.index("--max-concurrency") + 1] == "4"


# ---- CLI dry runs -----------------------------------------------------------------------
@pytest.fixture
def fake_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("target", "draft"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text("{}")
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path / "models"))
    for key in ("HUST_VSPEC_ENABLED", "VSPEC_CONFIG", "VLLM_PLUGINS"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path / "models"


def test_pair_dry_run_prints_both_commands(
    fake_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--num-prompts", "32",
                         "--output-len", "64", "--repetitions", "2", "--dry-run", "--json",
                         "--backend", "builtin"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    base, vspec = plan["commands"]["baseline"], plan["commands"]["vspec"]
    assert "--speculative-config" in vspec["argv"] and "--speculative-config" not in base["argv"]
    assert vspec["env"]["HUST_VSPEC_ENABLED"] == "1" and base["env"]["HUST_VSPEC_ENABLED"] == "0"
    assert str(fake_models / "target") in base["argv"]
    assert plan["order"] == ["baseline-r1", "vspec-r1", "vspec-r2", "baseline-r2"]
    assert plan["min_speedup"] == 1.10 and plan["backend"] == "builtin"
    assert "32 prompts x 64 output tokens" in plan["load"]
    # the preset's [env] reaches both arms alike: one OpenMP thread per worker
    assert base["env"]["OMP_NUM_THREADS"] == vspec["env"]["OMP_NUM_THREADS"] == "1"
    assert plan["trace"] is False  # the vSpec arm runs as a server does unless asked


@pytest.mark.parametrize(("flags", "traced"), [([], False), (["--trace"], True),
                                               (["--plot", "p.png"], True)])
def test_pair_traces_the_vspec_arm_only_when_asked(
    fake_models: Path, capsys: pytest.CaptureFixture[str], flags: list[str], traced: bool
) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run", *flags])
    assert rc == 0
    out = capsys.readouterr().out
    assert ("trace per start" in out) is traced


def test_server_process_has_its_own_group_in_the_callers_session(tmp_path: Path) -> None:
    # its own group: stop() signals the EngineCore too; the caller's session: a new session
    # would be a kernel scheduling group of its own, splitting the CPUs with the load client
    cmd = ServeCommand(argv=[sys.executable, "-c", "import time; time.sleep(60)"])
    server = ServerProcess("sleeper", cmd, tmp_path / "sleeper.log")
    server.start(os.environ)
    try:
        assert server.proc is not None
        pid = server.proc.pid
        assert os.getpgid(pid) == pid != os.getpgid(0)
        assert os.getsid(pid) == os.getsid(0)
        server.interrupt()  # SIGINT to the group, no wait
        assert server.proc.wait(timeout=10) != 0
    finally:
        server.stop(grace_s=5.0)
    assert server.proc.poll() is not None


_HEALTH_SERVER = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.mark.parametrize("any_port", [True, False])
def test_a_server_that_loses_its_port_moves_only_when_any_port_will_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, any_port: bool
) -> None:
    # servers started minutes after their command was built find the port taken by another
    # engine's sockets; one started with any_port takes a fresh one, one bound to its port fails
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken])  # the first pick loses the race, later ones are free
        monkeypatch.setattr(server_mod, "free_port", lambda: next(picks, None) or _free())
        cmd = ServeCommand(argv=[sys.executable, "-c", _HEALTH_SERVER, "--port", str(taken)])
        server = ServerProcess("health", cmd, tmp_path / "health.log", any_port=any_port)
        server.start(os.environ)
        try:
            if any_port:
                server.wait_ready(30)
                assert not server.base_url.endswith(f":{taken}")
            else:
                with pytest.raises(ServerStartError, match="Address already in use"):
                    server.wait_ready(30)
        finally:
            server.stop(grace_s=5.0)


def _free() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pair_dry_run_text_and_passthrough(
    fake_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run", "--", "--max-log-len",
                         "5"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("--max-log-len 5") == 2  # both servers get the passthrough
    assert "order: baseline-r1 vspec-r1 vspec-r2 baseline-r2 baseline-r3 vspec-r3" in out
    assert "200 prompts x 256 output tokens" in out  # regression-protocol defaults


def test_pair_refuses_relaxed_acceptance(
    fake_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--confidence-accept-margin", "0.1",
                         "--dry-run"])
    assert rc == 2
    assert "relaxed acceptance" in capsys.readouterr().err


def test_run_dry_run_and_dataset_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench_cli.main(["run", "--base-url", "http://127.0.0.1:9", "--dry-run",
                           "--backend", "builtin"]) == 0
    assert "backend builtin" in capsys.readouterr().out
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "ok"}, "{oops"])
    rc = bench_cli.main(["run", "--base-url", "http://127.0.0.1:9", "--dataset", "gsm8k",
                         "--dataset-path", str(bad), "--dry-run"])
    assert rc == 2
    assert f"{bad}:2: not valid JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # an argparse range error (see test_bench_options)
        bench_cli.main(["run", "--base-url", "x", "--num-prompts", "0", "--dry-run"])
    assert exc.value.code == 2


def test_vllm_backend_needs_a_tokenizer(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench_cli.main(["run", "--base-url", "http://127.0.0.1:9", "--backend", "vllm",
                         "--dry-run"])
    assert rc == 2 and "--tokenizer" in capsys.readouterr().err


# ---- the built-in client against a fake streaming server (tests/support/_fake_openai.py)
def test_builtin_client_counts_usage_tokens(fake_server: str) -> None:
    seen: list[int] = []
    reqs = [BenchRequest("p", 8), BenchRequest("q", 4), BenchRequest("r", 6)]
    outs, duration = run_load(LoadSpec(base_url=fake_server, model="m", max_concurrency=2),
                              reqs, progress=lambda d, t, e: seen.append(d))
    assert all(o.ok for o in outs), [o.error for o in outs]
    assert [o.output_tokens for o in outs] == [8, 4, 6]  # from usage, not chunk count
    assert all(len(o.itl_s) == o.output_tokens // 2 - 1 for o in outs)
    assert sorted(seen) == [1, 2, 3] and duration > 0
    body = FakeOpenAI.bodies[0]
    assert body["temperature"] == 0.0 and body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_builtin_client_reports_unreachable_server() -> None:
    outs, _ = run_load(LoadSpec(base_url="http://127.0.0.1:9", model="m", timeout_s=2),
                       [BenchRequest("p", 2)])
    assert not outs[0].ok and outs[0].error
