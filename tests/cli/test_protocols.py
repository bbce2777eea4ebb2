"""Predecessor protocols: arc-easy by --method, config-name aliases, preset model names,
the ARC-Easy protocol bench entry, the GSM8K pair scripts and the missing NPU profiles."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
from _model_folders import launcher_sees_ascend, make_model_dir
from _predecessor_configs import RECORDED_CONFIGS

from vllm_hust_vspec.bench import protocol
from vllm_hust_vspec.bench.datasets import DatasetError
from vllm_hust_vspec.cli import bench, launch
from vllm_hust_vspec.settings import SettingsError, list_presets, resolve_settings
from vllm_hust_vspec.settings.sources import preset_aliases, protocol_preset, read_toml_layer

ROOT = Path(__file__).resolve().parents[2]
# The predecessor's run.sh preset names and the configs/ file each one ran.
RUN_SH_NAMES = {
    "draft": "qwen25-14b-05b", "draft-adaptive": "qwen25-14b-05b-adaptive-b128",
    "draft-arc-easy": "qwen25-14b-05b-arc-easy", "eagle": "qwen25-14b-eagle",
    "eagle-relaxed": "qwen25-14b-eagle-relaxed", "eagle-arc-easy": "qwen25-14b-eagle-arc-easy",
    "eagle3": "qwen3-8b-eagle3", "qwen35-eagle3": "qwen35-35b-a3b-eagle3",
    "qwen35-frontier-mtp2": "qwen35-35b-a3b-frontier-mtp2",
}
# Keys of the recorded files that name checkouts on the predecessor's own machine: honoured
# from a config file, left out of the bundled presets.
MACHINE_KEYS = {"vllm_source", "ascend_source"}


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_model_dir(tmp_path / "models")
    for key in list(os.environ):
        if key.startswith(("HUST_VSPEC_", "HUST_SPEC", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    return root


def _dry(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert launch.main([*args, "--dry-run", "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_run_sh_names_are_aliases_of_the_validated_presets() -> None:
    assert preset_aliases() == RUN_SH_NAMES
    assert set(RECORDED_CONFIGS) <= set(list_presets())


@pytest.mark.parametrize(("alias", "preset"), sorted(RUN_SH_NAMES.items()))
def test_alias_gives_the_same_settings_as_its_preset(alias: str, preset: str) -> None:
    real = resolve_settings(preset=preset, env={})
    by_protocol = resolve_settings(preset=alias, env={})
    by_config = resolve_settings(config=str(ROOT / "configs" / f"{alias}.toml"), env={})
    assert by_protocol.settings == real.settings == by_config.settings
    assert by_protocol.extra_env == real.extra_env == by_config.extra_env


@pytest.mark.parametrize("name", sorted(RECORDED_CONFIGS))
def test_recorded_config_files_load_and_match_their_preset(name: str, tmp_path: Path) -> None:
    """The predecessor's own file, as recorded, loads unchanged; over the predecessor's
    launcher defaults it gives exactly the bundled preset of the same name."""
    path = tmp_path / f"{name}.toml"
    path.write_text(RECORDED_CONFIGS[name])
    alone = resolve_settings(config=str(path), env={})
    assert alone.settings.method in ("draft", "eagle", "eagle3", "mtp")
    as_before = resolve_settings(preset="v0.14-defaults", config=str(path), env={})
    preset = resolve_settings(preset=name, env={})
    def drop(settings: object) -> dict[str, object]:
        return {k: v for k, v in vars(settings).items() if k not in MACHINE_KEYS}

    def pop_stride(values: dict[str, object]) -> object:
        tuning = dict(values["adaptive_tuning"])  # type: ignore[call-overload]
        stride = tuning.pop("gamma_stride", 1)
        values["adaptive_tuning"] = tuning
        return stride

    mine = drop(as_before.settings)
    theirs = drop(preset.settings)
    if preset.settings.method == "mtp":
        # 0.14 played only the MTP2 budgets 2/4/6 for any mtp run; vSpec's MTP presets say so
        # (a file of one's own adds adaptive_tuning gamma_stride = 2: docs/migration.md)
        assert (pop_stride(theirs), pop_stride(mine)) == (2, 1)
    assert mine == theirs
    assert as_before.extra_env == preset.extra_env
    # VSPEC_CONFIG over the run.sh name reads the same as the predecessor's run.sh did
    via_env = resolve_settings(preset=name, env={"VSPEC_CONFIG": str(path)})
    via = drop(via_env.settings)
    pop_stride(via) if preset.settings.method == "mtp" else None
    assert via == mine


def test_alias_files_hold_no_settings_of_their_own(tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text('alias_of = "draft"\n[serve]\ngamma = 2\n')
    with pytest.raises(SettingsError, match=r"x.toml: an alias file holds only alias_of.*serve"):
        read_toml_layer(bad, "preset")
    bad.write_text('alias_of = "no-such"\n')
    with pytest.raises(SettingsError, match="alias_of = 'no-such' names no preset"):
        read_toml_layer(bad, "preset")
    (tmp_path / "y.toml").write_text('alias_of = "x"\n')
    bad.write_text('alias_of = "draft"\n')
    with pytest.raises(SettingsError, match="is itself an alias"):
        read_toml_layer(tmp_path / "y.toml", "preset")


def test_a_preset_inherits_one_base(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text('[serve]\ngamma = 3\nport = 9001\n[env]\nA = "1"\n')
    (tmp_path / "top.toml").write_text('inherits = "base"\n[serve]\ngamma = 5\n')
    layer = read_toml_layer(tmp_path / "top.toml", "preset")
    assert layer.values == {"gamma": 5, "port": 9001} and layer.env == {"A": "1"}
    (tmp_path / "base.toml").write_text('inherits = "top"\n')
    with pytest.raises(SettingsError, match="one level deep"):
        read_toml_layer(tmp_path / "top.toml", "preset")


def test_the_frontier_protocol_pins_its_validated_conditions(model_dir: Path) -> None:
    pinned = resolve_settings(preset="qwen35-frontier-mtp2", env={}).settings
    assert (pinned.method, pinned.gamma, pinned.tensor_parallel_size, pinned.vllm["max_model_len"],
            pinned.graph_mode) == ("mtp", 6, 2, 262144, "full-and-piecewise")
    for name, value in (("gamma", 4), ("max_model_len", 8192), ("prefix_caching", False),
                        ("graph_mode", "full")):
        with pytest.raises(SettingsError, match=f"{name} is pinned"):
            resolve_settings(preset="qwen35-frontier-mtp2", cli={name: value}, env={})
    ok = resolve_settings(preset="qwen35-frontier-mtp2", cli={"port": 9000}, env={})
    assert ok.settings.port == 9000  # what the protocol does not pin stays free


def test_arc_easy_protocol_picks_the_preset_by_method() -> None:
    assert protocol_preset("arc-easy", "draft") == "draft-arc-easy"
    assert protocol_preset("arc-easy", "eagle") == "eagle-arc-easy"
    assert protocol_preset("arc-easy", "draft_model") == "draft-arc-easy"
    assert protocol_preset("eagle", None) == "eagle"  # other names pass through
    with pytest.raises(SettingsError, match="--protocol arc-easy needs --method: one of "
                                            r"--method draft \(draft-arc-easy\)"):
        protocol_preset("arc-easy", None)
    with pytest.raises(SettingsError, match="does not support --method mtp"):
        protocol_preset("arc-easy", "mtp")


@pytest.mark.parametrize("method", ["draft", "eagle"])
def test_arc_easy_presets_are_the_predecessor_protocol(method: str) -> None:
    s = resolve_settings(preset=f"{method}-arc-easy", env={}).settings
    assert (s.method, s.target_model, s.dtype, s.max_num_seqs, s.port, s.vllm["max_model_len"]) == (
        method, "/model/Qwen2.5-14B-Instruct", "float16", 16, 18180, 32768)
    assert (s.graph_mode, s.vllm["prefix_caching"], s.async_scheduling) == (
        "full-decode-only", False, False)
    assert (s.vllm["generation_config"], s.vllm["served_model_name"]) == (
        "auto", f"qwen2.5-14b-{method}-vspec-fp16")
    assert (s.adaptive_speculation, s.adaptive_policy) == (True, "online")
    assert (s.adaptive_min_gamma, s.effective_gamma()) == (1, 4)
    assert s.eagle_relaxed_accept_topk is None and s.confidence_accept_margin is None


def test_launcher_arc_easy_dry_run_and_errors(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _dry(capsys, "--protocol", "arc-easy", "--method", "eagle")
    argv = out["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--port") + 1] == "18180"
    assert argv[argv.index("--dtype") + 1] == "float16"
    assert argv[argv.index("--served-model-name") + 1] == "qwen2.5-14b-eagle-vspec-fp16"
    assert "--no-enable-prefix-caching" in argv
    # the recorded /model/Qwen2.5-14B-Instruct, mounted under HUST_VSPEC_MODEL_DIR here
    assert str(model_dir / "Qwen2.5-14B-Instruct") in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == str(model_dir / "Eagle-Qwen2.5-14B-Instruct")
    assert spec["num_speculative_tokens"] == 4
    assert launch.main(["--protocol", "arc-easy", "--dry-run"]) == 2
    assert "--protocol arc-easy needs --method" in capsys.readouterr().err
    assert launch.main(["--protocol", "arc-easy", "--method", "mtp", "--dry-run"]) == 2
    assert "does not support --method mtp" in capsys.readouterr().err


def test_validated_presets_name_the_recorded_models() -> None:
    def s(name: str):  # noqa: ANN202
        return resolve_settings(preset=name, env={}).settings

    for name in ("draft", "draft-adaptive", "eagle", "eagle-relaxed"):
        # the drafter is the default one, looked up locally as the predecessor did
        assert s(name).target_model == "/data/shared-models/Qwen2.5-14B-Instruct"
        assert s(name).draft_model is None
    assert s("qwen35-eagle3").draft_model == (
        "/workspace/models/Qwen3.5-35B-A3B-Eagle3-Specforge")
    for name in ("qwen35-frontier-mtp2", "qwen35-35b-a3b-mtp2"):
        assert (s(name).method, s(name).target_model, s(name).draft_model) == (
            "mtp", "/workspace/models/Qwen3.5-35B-A3B", None)
    mtp2 = s("qwen35-35b-a3b-mtp2")
    assert (mtp2.gamma, mtp2.adaptive_min_gamma, mtp2.strict_mtp_graph()) == (6, 2, True)
    assert mtp2 != s("qwen35-frontier-mtp2")


# --- the ARC-Easy protocol bench --------------------------------------------------------

def test_protocol_bench_missing_dataset_is_exit_2_naming_path_and_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "materialized.jsonl"
    assert bench.main(["--method", "draft", "--dataset-path", str(missing), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "--dataset-path FILE.jsonl" in err
    assert Path("/run_dir/materialized.jsonl") == protocol.DEFAULT_DATASET
    with pytest.raises(SystemExit) as exc:  # no --method
        bench.main([])
    assert exc.value.code == 2
    assert "--method" in capsys.readouterr().err


def test_protocol_bench_dry_run_prints_the_vllm_bench_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "materialized.jsonl"
    data.write_text(json.dumps({"prompt": "Question: 2+2?\nAnswer:"}) + "\n")
    monkeypatch.setattr("vllm_hust_vspec.bench.vllm_cli.vllm_bench_available", lambda: True)
    rc = bench.main(["--method", "eagle", "--dataset-path", str(data), "--output-dir",
                     str(tmp_path / "br"), "--tokenizer", str(tmp_path), "--dry-run"])
    assert rc == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    cmd = out.splitlines()[-1]
    out_dir = tmp_path / "br" / "ARC-Easy-eagle-vspec"
    for part in ("--base-url http://127.0.0.1:18180", "--served-model-name qwen2.5-14b",
                 "--num-prompts 200", "--request-rate inf", "--temperature 0.0",
                 "--custom-output-len 256", f"--result-dir {out_dir}", "--ignore-eos"):
        assert part in cmd
    assert f"result {out_dir / 'ARC-Easy.json'}" in out


def test_protocol_bench_reads_both_dataset_shapes(tmp_path: Path) -> None:
    custom, arc = tmp_path / "c.jsonl", tmp_path / "a.jsonl"
    custom.write_text('\n{"prompt": "p"}\n')
    arc.write_text(json.dumps({"question": "q?", "choices": {"text": ["x", "y"],
                                                            "label": ["A", "B"]}}) + "\n")
    assert protocol.sniff_dataset(custom) == "custom"
    assert protocol.sniff_dataset(arc) == "arc-easy"
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(DatasetError, match="no prompts"):
        protocol.sniff_dataset(tmp_path / "e.jsonl")
    run = protocol.plan_protocol("draft", dataset_path=arc, output_root=tmp_path, env={},
                                 num_prompts=4)
    assert run.out_dir == tmp_path / "ARC-Easy-draft-vspec"
    assert (run.load.dataset, run.load.temperature, run.load.output_len) == ("arc-easy", 0.0, 256)
    assert run.load.request_rate == float("inf")
    assert run.notes() and "not the ARC-Easy protocol (200 x 256)" in run.notes()[0]
    assert not dataclasses.replace(run, load=dataclasses.replace(run.load,
                                                                 num_prompts=200)).notes()


# --- the GSM8K pair scripts -------------------------------------------------------------

def _script(name: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake-bench.sh"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\nexit 1\n')
    fake.chmod(0o755)
    full = {"PATH": os.environ["PATH"], "VSPEC_BENCH": str(fake), **env}
    return subprocess.run([str(ROOT / "scripts" / name), *args], env=full, text=True,
                          capture_output=True, check=False)


def _flag(lines: list[str], flag: str) -> str:
    return [lines[i + 1] for i, v in enumerate(lines) if v == flag][-1]  # last one wins


def test_frontier_script_wraps_bench_pair_with_the_gate(tmp_path: Path) -> None:
    name = "benchmark_qwen35_frontier_mtp2_gsm8k.sh"
    data = {"VSPEC_GSM8K_DATASET": "/d/gsm8k.jsonl"}
    r = _script(name, tmp_path, "pair", **data)
    lines = r.stdout.splitlines()
    assert r.returncode == 1  # the bench's exit status (1: under the gate) comes through
    assert lines[0] == "pair" and _flag(lines, "--protocol") == "qwen35-frontier-mtp2"
    assert _flag(lines, "--min-speedup") == "1.10"
    assert _flag(lines, "--dataset") == "gsm8k"
    assert _flag(lines, "--dataset-path") == "/d/gsm8k.jsonl"
    r = _script(name, tmp_path, "pair", **data, VSPEC_MIN_SPEEDUP="1.3")
    assert _flag(r.stdout.splitlines(), "--min-speedup") == "1.3"
    r = _script(name, tmp_path, "pair", "--min-speedup", "0.5", **data, VSPEC_MIN_SPEEDUP="1.3")
    assert _flag(r.stdout.splitlines(), "--min-speedup") == "0.5"
    r = _script(name, tmp_path)
    assert r.returncode == 2 and "usage:" in r.stderr
    r = _script(name, tmp_path, "pair")
    assert r.returncode == 2 and "VSPEC_GSM8K_DATASET" in r.stderr


def test_mtp2_script_is_the_same_pair_with_the_non_frontier_preset(tmp_path: Path) -> None:
    r = _script("benchmark_qwen35_mtp2_gsm8k.sh", tmp_path, "--num-prompts", "4",
                VSPEC_GSM8K_DATASET="/d/g.jsonl")
    lines = r.stdout.splitlines()
    assert _flag(lines, "--protocol") == "qwen35-35b-a3b-mtp2"
    assert _flag(lines, "--min-speedup") == "1.10" and _flag(lines, "--num-prompts") == "4"


# --- the predecessor's profiles, converted ------------------------------------------------

@pytest.mark.parametrize(("preset", "profile", "table"), [
    ("qwen25-14b-05b", "profiles/qwen25_draft_gsm8k_graph_b128_g4.json", {1: 4, 64: 4, 128: 3}),
    ("qwen25-14b-eagle", "profiles/qwen25_eagle_gsm8k_graph_b128.json", {1: 1, 2: 2, 128: 2}),
])
def test_the_manuals_profiles_ship_converted_and_launch(
    preset: str, profile: str, table: dict[int, int], model_dir: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_hust_vspec.adaptive.profile_file import load_profile

    monkeypatch.chdir(ROOT)
    launcher_sees_ascend(monkeypatch)  # the NPU presets' graph switches need vLLM-Ascend
    loaded = load_profile(profile)
    # the 0.14 batch -> gamma table, and a label that says what the file is
    assert {b: loaded.table_gamma(b) for b in table} == table
    assert loaded.batch_gamma_table_mode == "preferred"
    assert "not a measurement" in loaded.notes and "0.14.3" in loaded.notes
    rc = launch.main(["--protocol", preset, "--adaptive-speculation", "--adaptive-profile",
                      profile, "--dry-run", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    env = json.loads(out.out)["env"]
    assert profile in env.values()
