"""The predecessor's flags keep their units and directions (vllm-hust-vSpec 0.14.3's launcher):
each test below spells a flag the way its manual or configs did and checks what it does."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from vllm_hust_vspec.cli.launch import build_parser, main
from vllm_hust_vspec.cli.options import cli_values
from vllm_hust_vspec.launch.capture import CUDAGRAPH_MODE
from vllm_hust_vspec.settings import SettingsError, load_settings, resolve_settings


def _settings(*argv: str) -> Any:
    return resolve_settings(cli=cli_values(build_parser().parse_args(list(argv))),
                            env={}).settings


def test_confidence_margin_is_in_logits() -> None:
    torch = pytest.importorskip("torch")
    from vllm_hust_vspec.backends.acceptance import accept_mask, params_from_settings

    s = _settings("--method", "eagle", "--confidence-accept-margin", "5.25")  # 0.13's value
    params = params_from_settings(s)
    assert (params.margin, params.margin_unit) == (5.25, "logit")
    # target logits: top-1 id 0 at 10.0; id 1 at 5.0 (5 logits down), id 2 at 4.0 (6 down)
    logits = torch.tensor([[10.0, 5.0, 4.0, -9.0]] * 2)
    keep, _ = accept_mask(torch.tensor([1, 2]), logits, params)
    assert keep.tolist() == [True, False]
    prob = params_from_settings(_settings("--method", "eagle",
                                          "--confidence-accept-prob-margin", "0.99"))
    assert prob.margin_unit == "prob"
    assert accept_mask(torch.tensor([1, 2]), logits, prob)[0].tolist() == [True, True]
    with pytest.raises(SettingsError, match="two units of one rule"):
        _settings("--confidence-accept-margin", "1", "--confidence-accept-prob-margin", "0.1")


def test_protected_token_ids_take_the_predecessors_spelling() -> None:
    base = ("--method", "eagle", "--eagle-relaxed-accept-topk", "2")
    spaced = _settings(*base, "--confidence-protected-token-ids", "15", "16", "17")
    commas = _settings(*base, "--confidence-protected-token-ids", "15,16,17")
    assert spaced.confidence_protected_token_ids == commas.confidence_protected_token_ids == [
        15, 16, 17]


def test_bare_adaptive_trace_logs_to_the_server_log(caplog: pytest.LogCaptureFixture) -> None:
    from vllm_hust_vspec.host.engine.trace import LOG_SINK, TraceWriter

    assert _settings("--adaptive-trace").adaptive_trace == LOG_SINK
    assert load_settings({"HUST_VSPEC_ADAPTIVE_TRACE": "1"}).adaptive_trace == LOG_SINK
    assert load_settings({"HUST_VSPEC_ADAPTIVE_TRACE": "0"}).adaptive_trace is None
    assert _settings("--adaptive-trace", "/tmp/t.jsonl").adaptive_trace == "/tmp/t.jsonl"
    with caplog.at_level(logging.INFO, logger="vllm_hust_vspec.trace"):
        writer = TraceWriter(LOG_SINK)
        writer.write({"gamma": 3})
        writer.close()
    assert any('"gamma":3' in r.getMessage() for r in caplog.records)


def test_graph_mode_names_are_the_predecessors() -> None:
    assert CUDAGRAPH_MODE["full"] == "FULL"
    assert CUDAGRAPH_MODE["full-and-piecewise"] == "FULL_AND_PIECEWISE"
    assert CUDAGRAPH_MODE["full-decode-only"] == "FULL_DECODE_ONLY"


@pytest.mark.parametrize(("flag", "value", "field"), [
    ("--eagle-relaxed-accept-topk", "1", "eagle_relaxed_accept_topk"),
    ("--eagle-draft-active-vocab-size", "0", "eagle_draft_active_vocab_size"),
])
def test_the_predecessors_off_values_mean_off(flag: str, value: str, field: str) -> None:
    s = _settings("--method", "eagle", flag, value)
    assert getattr(s, field) is None and not s.relaxed_acceptance()


def test_merged_full_max_batch_zero_is_no_cap() -> None:
    from vllm_hust_vspec.settings import SettingsError

    assert _settings("--merged-full", "--merged-full-max-batch", "0") == _settings(
        "--merged-full")
    assert _settings("--eagle-tree-width", "1") == _settings()
    with pytest.raises(SettingsError, match="--merged-full-max-batch"):
        resolve_settings(cli=cli_values(build_parser().parse_args(
            ["--merged-full", "--merged-full-max-batch", "8"])), env={}).require_honoured()


def test_refill_turns_off_by_switch_by_size_one_and_by_the_predecessors_variables() -> None:
    assert _settings("--method", "draft").refill_batch() == 8
    assert _settings("--no-mtp-cohort-refill").refill_batch() == 1
    assert _settings("--adaptive-refill-batch", "4", "--eagle3-cohort-refill").refill_batch() == 4
    assert _settings("--adaptive-refill-batch", "1").refill_batch() == 1
    env = {"HUST_VSPEC_METHOD": "mtp", "HUST_VSPEC_MTP_COHORT_REFILL": "0"}
    assert load_settings(env).refill_batch() == 1
    assert load_settings({"HUST_VSPEC_EAGLE3_COHORT_REFILL": "0"}).refill_batch() == 1


def test_the_0_14_presets_keep_its_refill_rule_and_vspec_measures_by_default() -> None:
    assert _settings().adaptive_refill_hold == "auto"
    def preset(name: str) -> str:
        return str(resolve_settings(preset=name, cli={}, env={}).settings.adaptive_refill_hold)

    for name in ("draft", "eagle", "draft-adaptive", "v0.14-defaults"):
        assert preset(name) == "speculating", name
    assert preset("vspec-draft-adaptive") == "auto"


def test_mtp_strict_graph_is_on_for_a_bare_mtp_run() -> None:
    assert _settings("--method", "mtp").strict_mtp_graph()
    assert not _settings("--method", "mtp", "--no-mtp-strict-graph").strict_mtp_graph()
    assert not _settings("--method", "draft").strict_mtp_graph()


def test_online_exploration_zero_explores_nothing() -> None:
    from vllm_hust_vspec.host.engine.controller_factory import controller_kwargs

    assert controller_kwargs(_settings("--adaptive-online-exploration", "0"), 4)[
        "exploration"] == 0.0
    assert "exploration" not in controller_kwargs(_settings(), 4)
    assert controller_kwargs(_settings("--adaptive-online-exploration", "0.01"), 4)[
        "exploration"] == pytest.approx(1.0)  # 0.14.3's default: one posterior std
    wide = controller_kwargs(_settings("--adaptive-exploration", "0.02"), 4)
    assert wide["exploration"] == pytest.approx(2.0)


def test_the_runtime_knobs_of_0_14_are_named_and_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text("{}")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[serve]\nmethod = "mtp"\n[env]\nHUST_VSPEC_REFILL_EXPLORATION = "0.15"\n'
                   'HUST_VSPEC_MTP_COHORT_REFILL = "1"\n')
    monkeypatch.delenv("HUST_VSPEC_REFILL_EXPLORATION", raising=False)
    assert main(["--config", str(cfg), "--target-model", str(target), "--dry-run",
                 "--json"]) == 0
    err = capsys.readouterr().err
    assert "HUST_VSPEC_REFILL_EXPLORATION" in err and "ignored" in err
    assert load_settings({"HUST_VSPEC_REFILL_MAX_HOLDS": "8"}).method == "draft"


def test_source_trees_go_first_on_the_servers_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, core, ascend = (tmp_path / n for n in ("t", "core", "ascend"))
    for folder in (target, core, ascend):
        folder.mkdir()
    (target / "config.json").write_text("{}")
    assert main(["--method", "mtp", "--target-model", str(target), "--vllm-source", str(core),
                 "--ascend-source", str(ascend), "--dry-run", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)["env"]
    assert env["PYTHONPATH"].split(":")[:2] == [str(core), str(ascend)]
    assert main(["--method", "mtp", "--target-model", str(target), "--vllm-source",
                 str(tmp_path / "gone"), "--dry-run", "--json"]) == 0
    assert "not a folder here" in capsys.readouterr().err


def test_serving_keys_of_the_recorded_configs_reach_vllm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text("{}")
    assert main(["--method", "mtp", "--target-model", str(target), "--block-size", "128",
                 "--kv-cache-dtype", "auto", "--disable-log-stats", "--vllm-executable",
                 "/opt/v/bin/vllm", "--mtp-local-argmax-reduction", "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[:2] == ["/opt/v/bin/vllm", "serve"]
    assert argv[argv.index("--block-size") + 1] == "128"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "auto"
    assert "--disable-log-stats" in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["use_local_argmax_reduction"] is True


def test_capture_sizes_replace_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text("{}")
    assert main(["--method", "mtp", "--target-model", str(target), "--graph-mode", "full",
                 "--capture-sizes", "1", "2", "4", "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    cc = json.loads(argv[argv.index("--compilation-config") + 1])
    assert cc["cudagraph_capture_sizes"] == [1, 2, 4]


def test_python_m_runs_the_launcher(tmp_path: Path) -> None:
    """0.14's run.sh ran ``python -m vllm_hust_vspec --config FILE``."""
    import subprocess
    import sys

    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text("{}")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\nmethod = "mtp"\ntarget_model = "{target}"\nblock_size = 128\n')
    out = subprocess.run([sys.executable, "-m", "vllm_hust_vspec", "--config", str(cfg),
                          "--dry-run", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--block-size" in json.loads(out.stdout)["argv"]
