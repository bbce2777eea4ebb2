"""SPEED-Bench in vllm-hust-vspec-bench: the loader, the per-group report math, the grouped
runner against a fake server whose /metrics counters depend on the category, and the
forced-acceptance-length refusal and labels (no vLLM)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_hust_vspec.bench.datasets import DatasetError, load_requests
from vllm_hust_vspec.bench.run import LoadConfig, Target, requests_for
from vllm_hust_vspec.bench.speed_bench import bucket_for_tokens, load_speed_bench
from vllm_hust_vspec.bench.speed_report import (
    group_row,
    merge_results,
    overall_row,
    pair_groups,
)
from vllm_hust_vspec.bench.speed_run import run_speed_bench
from vllm_hust_vspec.cli import bench as bench_cli


def _row(qid: str, category: str, *turns: str, **extra: Any) -> dict[str, Any]:
    return {"question_id": qid, "category": category, "sub_category": "x", "turns": list(turns),
            "source": "s", "src_id": "1", "difficulty": "easy",
            "multiturn": len(turns) > 1, **extra}


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ---- loader -----------------------------------------------------------------------------
def test_qualitative_rows_group_by_category_in_the_dataset_order(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "q.jsonl", [
        _row("1", "writing", "Write a poem."),
        _row("2", "coding", "Sort a list.", "Now in C."),
        "",
        _row("3", "coding", "Reverse a string."),
        _row("4", "zz-other", "Something else."),
    ])
    sb = load_speed_bench(f)
    assert sb.split == "qualitative"
    groups = sb.groups()
    assert list(groups) == ["coding", "writing", "zz-other"]  # published order, then others
    assert [r.question_id for r in groups["coding"]] == ["2", "3"]
    multi = groups["coding"][0]
    assert multi.prompt == "Sort a list." and multi.turns == 2 and multi.multiturn
    assert multi.line == 2 and groups["coding"][1].line == 4  # blank line 3 skipped
    assert sb.multiturn_rows() == 1
    # only the first turn is ever sent, also through the generic loader
    reqs = load_requests("speed-bench", f, num_prompts=4, output_tokens=5)
    assert [r.prompt for r in reqs][:2] == ["Write a poem.", "Sort a list."]
    grouped = requests_for(LoadConfig(dataset="speed-bench", dataset_path=str(f),
                                      num_prompts=3, output_len=5, group="coding"))
    assert [r.prompt for r in grouped] == ["Sort a list.", "Reverse a string.", "Sort a list."]


def test_throughput_buckets_from_the_split_field_or_the_file_name(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "mixed.jsonl", [
        _row("1", "low_entropy", "a " * 10, split="throughput_8k"),
        _row("2", "high_entropy", "b " * 10, split="throughput_1k"),
        _row("3", "low_entropy", "c " * 10, split="throughput_32k"),
    ])
    sb = load_speed_bench(f)
    assert sb.split == "throughput"
    assert list(sb.groups()) == ["1k", "8k", "32k"]  # by size, not by file order
    named = _jsonl(tmp_path / "throughput_2k.jsonl", [_row("1", "low_entropy", "x")])
    assert list(load_speed_bench(named).groups()) == ["2k"]
    plain = _jsonl(tmp_path / "plain.jsonl", [_row("1", "low_entropy", "x")])
    assert list(load_speed_bench(plain, "throughput").groups()) == ["unbucketed"]
    assert bucket_for_tokens(1000) == "1k" and bucket_for_tokens(7000) == "8k"
    assert bucket_for_tokens(30000) == "32k"


@pytest.mark.parametrize(("row", "needle"), [
    ({"category": "qa", "turns": ["q"], "multiturn": False}, "missing field 'question_id'"),
    (_row("1", "", "q"), "field 'category' must be a non-empty string"),
    (_row("1", "qa"), "field 'turns' must be a non-empty list"),
    ({**_row("1", "qa", "q"), "turns": "q"}, "field 'turns' must be a non-empty list"),
    ({**_row("1", "qa", "q"), "turns": [1]}, "field 'turns' must be a non-empty list"),
    ({**_row("1", "qa", "q"), "multiturn": "no"}, "field 'multiturn' must be true or false"),
    ({k: v for k, v in _row("1", "qa", "q").items() if k != "multiturn"},
     "missing field 'multiturn'"),
    ({**_row("1", "qa", "q"), "src_id": 7}, "field 'src_id' must be a string or null"),
    ({**_row("1", "qa", "q"), "split": "throughput_3k"}, "field 'split'"),
])
def test_malformed_rows_name_file_line_and_field(
    tmp_path: Path, row: dict[str, Any], needle: str
) -> None:
    f = _jsonl(tmp_path / "bad.jsonl", [_row("0", "qa", "fine"), row])
    with pytest.raises(DatasetError) as exc:
        load_speed_bench(f)
    assert f"{f}:2:" in str(exc.value) and needle in str(exc.value)
    # the bench checks the whole file before anything is sent, however few prompts it needs
    with pytest.raises(DatasetError, match=f"{f}:2:"):
        requests_for(LoadConfig(dataset="speed-bench", dataset_path=str(f), num_prompts=1))


def test_null_descriptive_fields_are_accepted(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "q.jsonl", [{**_row("1", "qa", "q"), "difficulty": None,
                                       "src_id": None}])
    assert load_speed_bench(f).rows[0].difficulty == ""


def test_bad_split_option_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="--speed-bench-split"):
        load_speed_bench(tmp_path / "x.jsonl", "both")
    with pytest.raises(DatasetError, match="cannot read dataset"):
        load_speed_bench(tmp_path / "missing.jsonl")


# ---- report math on synthetic counter deltas --------------------------------------------
def _result(drafts: float, draft_tokens: float, accepted: float, *, tokens: int = 100,
            duration: float = 2.0, done: int = 4, in_tokens: int = 400) -> dict[str, Any]:
    return {"completed": done, "failed": 0, "duration": duration, "total_input_tokens": in_tokens,
            "total_output_tokens": tokens, "output_throughput": tokens / duration,
            "request_throughput": done / duration, "mean_tpot_ms": 10.0, "mean_ttft_ms": 5.0,
            "spec": {"num_drafts": drafts, "draft_tokens": draft_tokens,
                     "accepted_tokens": accepted},
            "spec_counters": {"vllm:spec_decode_num_drafts_total": drafts,
                              "vllm:spec_decode_num_draft_tokens_total": draft_tokens,
                              "vllm:spec_decode_num_accepted_tokens_total": accepted}}


def test_group_rows_and_pooled_overall() -> None:
    coding = group_row("coding", _result(10, 40, 30), rows=2, multiturn_rows=1)
    math_ = group_row("math", _result(30, 120, 15, tokens=300, duration=6.0))
    assert coding["acceptance_length"] == pytest.approx(4.0)
    assert coding["accepted_per_draft"] == pytest.approx(3.0)
    assert coding["acceptance_rate"] == pytest.approx(0.75)
    assert coding["mean_prompt_tokens"] == pytest.approx(100.0)
    assert math_["acceptance_length"] == pytest.approx(1.5)
    idle = group_row("stem", _result(0, 0, 0))
    assert idle["acceptance_length"] is None and idle["accepted_per_draft"] is None
    pooled = overall_row([coding, math_, idle])
    # pooled from summed counters (45 accepted / 40 drafts), not the mean of the ratios
    assert pooled["acceptance_length"] == pytest.approx(1 + 45 / 40)
    assert pooled["acceptance_rate"] == pytest.approx(45 / 160)
    assert pooled["output_throughput"] == pytest.approx(500 / 10.0)
    assert pooled["requests"] == 12 and pooled["multiturn_rows"] == 1


def test_merge_results_sums_counters_and_weights_latency() -> None:
    a = _result(10, 40, 30, done=1)
    b = {**_result(30, 120, 15, tokens=300, duration=6.0, done=3), "mean_tpot_ms": 20.0}
    merged = merge_results([a, b])
    assert merged["completed"] == 4 and merged["total_output_tokens"] == 400
    assert merged["output_throughput"] == pytest.approx(400 / 8.0)
    assert merged["mean_tpot_ms"] == pytest.approx((10.0 + 3 * 20.0) / 4)
    assert merged["spec"]["num_drafts"] == 40 and merged["spec"]["accepted_tokens"] == 45
    assert merged["spec"]["acceptance_length"] == pytest.approx(1 + 45 / 40)


def test_pair_groups_medians_per_arm_and_pooled_acceptance() -> None:
    def run(tput: dict[str, float], spec: dict[str, tuple[float, float]]) -> dict[str, Any]:
        return {"speed_bench": {"groups": [
            {"group": g, "output_throughput": t, "num_drafts": spec.get(g, (0, 0))[0],
             "draft_tokens": 4 * spec.get(g, (0, 0))[0], "accepted_tokens": spec.get(g, (0, 0))[1]}
            for g, t in tput.items()]}}

    base = [run({"coding": 10.0, "math": 10.0}, {}), run({"coding": 12.0, "math": 8.0}, {})]
    new = [run({"coding": 20.0, "math": 9.0}, {"coding": (10, 20), "math": (10, 2)}),
           run({"coding": 24.0, "math": 9.0}, {"coding": (10, 30), "math": (10, 4)})]
    rows = {r["group"]: r for r in pair_groups(base, new)}
    assert rows["coding"]["baseline_output_throughput"] == pytest.approx(11.0)
    assert rows["coding"]["vspec_output_throughput"] == pytest.approx(22.0)
    assert rows["coding"]["speedup"] == pytest.approx(2.0)
    assert rows["coding"]["acceptance_length"] == pytest.approx(1 + 50 / 20)
    assert rows["math"]["accepted_per_draft"] == pytest.approx(6 / 20)


# ---- the grouped runner against a fake server -------------------------------------------
class _FakeSpecServer(http.server.BaseHTTPRequestHandler):
    """Completions plus /metrics counters that grow by the category in the prompt:
    'CODE' prompts accept 3 of 4 drafted tokens per draft, others 1 of 4."""

    protocol_version = "HTTP/1.1"
    counters = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        c = type(self).counters
        text = (f"vllm:spec_decode_num_drafts_total {c['drafts']}\n"
                f"vllm:spec_decode_num_draft_tokens_total {c['draft_tokens']}\n"
                f"vllm:spec_decode_num_accepted_tokens_total {c['accepted']}\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = int(body["max_tokens"])
        with type(self).lock:
            c = type(self).counters
            c["drafts"] += 2
            c["draft_tokens"] += 8
            c["accepted"] += 6 if body["prompt"].startswith("CODE") else 2
        events = [{"choices": [{"text": "a"}]} for _ in range(n)]
        events.append({"choices": [], "usage": {"prompt_tokens": len(body["prompt"].split()),
                                                "completion_tokens": n}})
        payload = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
        payload += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def spec_server() -> Iterator[str]:
    _FakeSpecServer.counters = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeSpecServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_runner_gives_each_category_its_own_counter_window(
    spec_server: str, tmp_path: Path
) -> None:
    f = _jsonl(tmp_path / "q.jsonl", [_row("1", "math", "MATH one"),
                                      _row("2", "coding", "CODE one", "CODE two"),
                                      _row("3", "coding", "CODE three")])
    load = LoadConfig(dataset="speed-bench", dataset_path=str(f), num_prompts=3, output_len=4,
                      warmup_prompts=2, warmup_output_len=2)
    out = run_speed_bench(Target(spec_server, "m"), load, backend="builtin",
                          workdir=tmp_path / "res")
    sb = out.result["speed_bench"]
    rows = {r["group"]: r for r in sb["groups"]}
    assert [r["group"] for r in sb["groups"]] == ["coding", "math"]
    # warm-up (2 requests, before coding's window) is excluded: 3 requests x 2 drafts each
    assert rows["coding"]["num_drafts"] == 6 and rows["math"]["num_drafts"] == 6
    assert rows["coding"]["acceptance_length"] == pytest.approx(4.0)
    assert rows["math"]["acceptance_length"] == pytest.approx(2.0)
    assert rows["coding"]["multiturn_rows"] == 1 and sb["multiturn_rows"] == 1
    assert sb["overall"]["acceptance_length"] == pytest.approx(3.0)
    assert out.result["completed"] == 6 and out.result["spec"]["num_drafts"] == 12
    saved = json.loads((tmp_path / "res" / "run.json").read_text())
    assert saved["speed_bench"]["split"] == "qualitative"
    assert (tmp_path / "res" / "run.coding.json").is_file()


def test_run_cli_prints_the_per_category_table(
    spec_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _jsonl(tmp_path / "q.jsonl", [_row("1", "math", "MATH one"),
                                      _row("2", "coding", "CODE one")])
    rc = bench_cli.main(["run", "--base-url", spec_server, "--model", "m", "--dataset",
                         "speed-bench", "--dataset-path", str(f), "--num-prompts", "2",
                         "--output-len", "3", "--warmup-prompts", "0", "--backend", "builtin",
                         "--result-dir", str(tmp_path / "r"), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| category |" in out and "| coding | 2 |" in out and "| math | 2 |" in out
    assert "| all |" in out


def test_cli_reports_a_malformed_row_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _jsonl(tmp_path / "q.jsonl", [_row("1", "qa", "q"), {**_row("2", "qa", "q"),
                                                             "multiturn": 1}])
    rc = bench_cli.main(["run", "--base-url", "http://127.0.0.1:9", "--dataset", "speed-bench",
                         "--dataset-path", str(f), "--dry-run"])
    assert rc == 2
    assert f"{f}:2: field 'multiturn'" in capsys.readouterr().err


# ---- forced acceptance length ------------------------------------------------------------
@pytest.fixture
def fake_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("target", "draft"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text("{}")
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path / "models"))
    for key in ("HUST_VSPEC_ENABLED", "VSPEC_CONFIG", "VLLM_PLUGINS",
                "HUST_VSPEC_FORCED_ACCEPTANCE_LENGTH"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path / "models"


def test_forced_acceptance_is_refused_without_the_explicit_flag(
    fake_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--forced-acceptance-length", "3",
                         "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--allow-changed-outputs" in err and "outputs change" in err


def test_forced_acceptance_from_the_environment_is_refused_too(
    fake_models: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HUST_VSPEC_FORCED_ACCEPTANCE_LENGTH", "2")
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run"])
    assert rc == 2 and "--allow-changed-outputs" in capsys.readouterr().err


def test_forced_acceptance_with_the_flag_is_labelled_everywhere(
    fake_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--forced-acceptance-length", "3",
                         "--allow-changed-outputs", "--dry-run", "--json",
                         "--backend", "builtin"])
    cap = capsys.readouterr()
    assert rc == 0
    plan = json.loads(cap.out)
    assert plan["outputs_changed"] is True and plan["forced_acceptance_length"] == 3
    assert plan["commands"]["vspec"]["env"]["HUST_VSPEC_FORCED_ACCEPTANCE_LENGTH"] == "3"
    assert "HUST_VSPEC_FORCED_ACCEPTANCE_LENGTH" not in plan["commands"]["baseline"]["env"]
    assert "FORCED ACCEPTANCE LENGTH 3" in cap.err and "OUTPUTS CHANGED" in cap.err
    rc = bench_cli.main(["pair", "--protocol", "cpu-tiny", "--forced-acceptance-length", "3",
                         "--allow-changed-outputs", "--dry-run"])
    assert rc == 0 and "OUTPUTS CHANGED" in capsys.readouterr().out


def test_a_normal_pair_plan_says_outputs_unchanged(
    fake_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench_cli.main(["pair", "--protocol", "cpu-tiny", "--dry-run", "--json",
                           "--backend", "builtin"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["outputs_changed"] is False and plan["forced_acceptance_length"] is None


def test_help_labels_the_forced_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_cli.main(["pair", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--allow-changed-outputs" in out and "MEASUREMENT ONLY" in out
    assert "--speed-bench-split" in out


def test_pair_summary_json_and_markdown_carry_the_forced_labels(
    fake_models: Path, tmp_path: Path
) -> None:
    import os

    from vllm_hust_vspec.bench.pair import PairResult, plan_pair
    from vllm_hust_vspec.bench.run import BenchUsageError
    from vllm_hust_vspec.bench.stats import compare_pair
    from vllm_hust_vspec.settings import resolve_settings

    resolved = resolve_settings(preset="cpu-tiny", cli={"forced_acceptance_length": 2},
                                env=os.environ)
    kwargs: dict[str, Any] = {"load": LoadConfig(dataset="speed-bench"), "repetitions": 1,
                              "min_speedup": 1.0, "backend": "builtin", "result_dir": tmp_path}
    with pytest.raises(BenchUsageError, match="--allow-changed-outputs"):
        plan_pair(resolved, os.environ, [], **kwargs)
    plan = plan_pair(resolved, os.environ, [], allow_changed_outputs=True, **kwargs)
    base = {**_result(0, 0, 0), "speed_bench": {"split": "qualitative", "groups": [
        group_row("coding", _result(0, 0, 0))]}}
    new = {**_result(10, 40, 20), "speed_bench": {"split": "qualitative", "groups": [
        group_row("coding", _result(10, 40, 20))]}}
    res = PairResult(plan=plan, runs={"baseline": [base], "vspec": [new]},
                     comparison=compare_pair([base], [new], min_speedup=1.0))
    d = res.to_dict()
    assert d["outputs_changed"] is True and d["forced_acceptance_length"] == 2
    assert d["plan"]["outputs_changed"] is True
    assert d["speed_bench"]["groups"][0]["acceptance_length"] == pytest.approx(3.0)
    md = res.markdown()
    assert md.startswith("*** FORCED ACCEPTANCE LENGTH 2") and "| coding |" in md
