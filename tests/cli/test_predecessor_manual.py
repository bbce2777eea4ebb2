"""Every launcher and bench command of the predecessor's manual (tests/fixtures/
predecessor-README.zh.txt) runs as a dry run here: it builds the command it describes, or
fails closed (exit 2) with a message naming what is missing. Commands are taken from the
manual's text, joined over line continuations, with only the model paths made local."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from _model_folders import launcher_sees_ascend, make_model_dir

from vllm_hust_vspec.cli import bench as bench_cli
from vllm_hust_vspec.cli import launch

MANUAL = Path(__file__).resolve().parents[1] / "fixtures" / "predecessor-README.zh.txt"
# Folder names the manual's presets and commands look models up by.
MODELS = ["Qwen2.5-14B-Instruct", "Qwen2.5-0.5B-Instruct", "Eagle-Qwen2.5-14B-Instruct",
          "Qwen3.5-35B-A3B", "Qwen3.5-35B-A3B-Eagle3-Specforge"]
# Commands that must fail closed, and the words their message must contain.
FAILS_CLOSED = {
    # the predecessor's active-vocabulary files at its recorded paths, and NPU paths vSpec
    # does not implement: named, before any model loads
    "eagle-relaxed": ["eagle_draft_active_vocab_ids", "is not a file"],
    "qwen35-eagle3": ["--eagle-spec-metadata-cache", "--graph-event-ordering"],
    # the EAGLE profile command (its converted profile loads): NPU switches, each by name
    "qwen25_eagle_gsm8k_graph_b128.json": ["--eagle-spec-metadata-cache",
                                           "--graph-event-ordering"],
}


PATTERNS = (r"(?:^|\s)(\./run\.sh\s.*)$", r"(?:^|\s|/)(vllm-hust-vspec(?:-bench)?\s.*)$")


def commands() -> list[str]:
    """Launcher invocations (run.sh / vllm-hust-vspec) in the manual, one string each."""
    text = MANUAL.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        for pattern in PATTERNS:
            m = re.search(pattern, line)
            if m and not line.startswith("#") and line.isascii():  # prose is Chinese
                out.append(re.sub(r"\s+", " ", m.group(1)).strip())
                break
    return out


def local_argv(command: str, models: Path) -> tuple[str, list[str]]:
    """(tool, argv) with the manual's model folders replaced by local ones."""
    words = shlex.split(command)
    tool, args = words[0], words[1:]
    if tool == "./run.sh":
        tool, args = "vllm-hust-vspec", ["--protocol", *args] if args else []
    fixed = []
    for word in args:
        if word.startswith(("/model/", "/workspace/models/", "/data/shared-models/")):
            word = str(models / Path(word).name)
        fixed.append(word)
    return tool.rsplit("/", 1)[-1], fixed


def with_dry_run(argv: list[str]) -> list[str]:
    """``--dry-run --json`` before any ``--`` (what follows it goes to vllm serve)."""
    ours = [a for a in argv if a not in ("--dry-run", "--json")]
    cut = ours.index("--") if "--" in ours else len(ours)
    return [*ours[:cut], "--dry-run", "--json", *ours[cut:]]


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The manual's model folders, and vLLM-Ascend as the host (the stack the manual is for:
    its validated presets ask for the merged FULL draft graph only vLLM-Ascend has)."""
    launcher_sees_ascend(monkeypatch)
    root = make_model_dir(tmp_path / "models", tuple(MODELS))
    for key in list(__import__("os").environ):
        if key.startswith(("HUST_VSPEC_", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    # The manual's `vllm-hust-ext run -- vllm-hust-vspec --method eagle ...` names no drafter:
    # the deployment's environment does (a local path, like the others).
    monkeypatch.setenv("HUST_VSPEC_EAGLE_MODEL", str(root / "Eagle-Qwen2.5-14B-Instruct"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # profiles/ as the manual assumes
    return root


def test_the_manual_has_its_commands() -> None:
    found = commands()
    assert len(found) >= 15, found
    assert any("--protocol arc-easy" in c for c in found)
    assert any(c.startswith("vllm-hust-vspec-bench") for c in found)


def test_every_launcher_command_dry_runs_or_fails_closed(
    models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = 0
    for command in commands():
        tool, argv = local_argv(command, models)
        if tool != "vllm-hust-vspec" or "--dry-run" in argv and argv.index("--dry-run") == 0:
            continue
        expect = next((words for key, words in FAILS_CLOSED.items() if key in command), None)
        argv = with_dry_run(argv)
        code = launch.main(argv)
        captured = capsys.readouterr()
        if expect is not None:
            assert code == 2, (command, captured.err)
            for word in expect:
                assert word in captured.err, (command, captured.err)
        else:
            assert code == 0, (command, captured.err)
            doc = json.loads(captured.out)
            assert doc["env"]["HUST_VSPEC_ENABLED"] == "1", command
            assert "--speculative-config" in doc["argv"], command
        ran += 1
    assert ran >= 12


def test_the_protocol_bench_commands_dry_run(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "materialized.jsonl"
    data.write_text(json.dumps({"prompt": "Question: 2+2?", "answer": "4"}) + "\n")
    benches = [c for c in commands() if c.startswith("vllm-hust-vspec-bench")]
    assert benches
    for command in benches:
        _, argv = local_argv(command, models)
        code = bench_cli.main([*argv, "--dataset-path", str(data), "--output-dir",
                               str(tmp_path / "out"), "--dry-run"])
        out = capsys.readouterr()
        assert code == 0, (command, out.err)
        assert "--num-prompts 200" in out.out and "ARC-Easy" in out.out, out.out


def test_run_sh_without_a_preset_runs_draft(models: Path) -> None:
    """0.14's run.sh took 'draft' when no preset (or a flag) came first."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    out = subprocess.run(["bash", str(root / "run.sh"), "--port", "8100", "--dry-run", "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    # the draft preset asks for vLLM-Ascend's merged draft graph: named on this host (with the
    # preset file that asked for it), or run
    assert ("merged" in out.stderr and "qwen25-14b-05b.toml" in out.stderr) if out.returncode else (
        json.loads(out.stdout)["env"]["HUST_VSPEC_METHOD"] == "draft")
    help_out = subprocess.run(["bash", str(root / "run.sh"), "--help"], capture_output=True,
                              text=True, env=env, timeout=120)
    assert help_out.returncode == 0 and "default preset: draft" in help_out.stdout


# --- the manual, item by item ---------------------------------------------------------------
# Every item of the predecessor's manual (its flags, commands, files, features) and how vSpec
# meets it: ("same", "file::test") = behaves as it did, shown by that test; ("closed",
# "file::test") = stops before any model loads naming what the host lacks; ("migration",
# "phrase") = differs on purpose, the phrase is its entry in docs/migration.md (which gives
# the reason and the way back).
SAME, CLOSED, MIGRATION = "same", "closed", "migration"
MANUAL_ITEMS: dict[str, tuple[str, str]] = {
    # flags
    "--method": (MIGRATION, "`--method dflash`"),
    "--target-model": (SAME, "test_launch.py::test_dry_run_every_preset"),
    "--draft-model": (SAME, "test_model_store.py::test_bare_method_finds_the_default_drafter"),
    "--gamma": (SAME, "test_settings.py::test_mtp_default_gamma_is_6"),
    "--max-num-seqs": (MIGRATION, "A launch without a preset took the launcher's defaults"),
    "--max-num-batched-tokens": (MIGRATION, "A launch without a preset took the launcher's"),
    "--max-model-len": (MIGRATION, "A launch without a preset took the launcher's defaults"),
    "--graph-mode": (SAME, "test_predecessor_semantics.py::"
                     "test_graph_mode_names_are_the_predecessors"),
    "--generation-config": (SAME, "test_protocols.py::"
                            "test_arc_easy_presets_are_the_predecessor_protocol"),
    "--capture-policy": (MIGRATION, "`--capture-policy` built request buckets"),
    "--adaptive-refill-batch": (MIGRATION, "the cohort refill held the queue whenever "
                                "`--adaptive-refill-batch` > 1"),
    "--adaptive-refill-batch (sizes)": (SAME, "test_predecessor_semantics.py::"
                                        "test_refill_turns_off_by_switch_by_size_one_and_by_"
                                        "the_predecessors_variables"),
    "--confidence-accept-margin": (SAME, "test_predecessor_semantics.py::"
                                   "test_confidence_margin_is_in_logits"),
    "--confidence-accept-from-position": (MIGRATION, "without a relaxed mode were ignored"),
    "--confidence-accept-after-tokens": (MIGRATION, "without a relaxed mode were ignored"),
    "--confidence-protected-token-ids": (SAME, "test_predecessor_semantics.py::"
                                         "test_protected_token_ids_take_the_predecessors_"
                                         "spelling"),
    "--async-scheduling": (MIGRATION, "A launch without a preset took the launcher's defaults"),
    "--no-async-scheduling": (SAME, "test_predecessor_flags.py::"
                              "test_contradicting_graph_switches_are_refused"),
    "--prefix-caching": (SAME, "test_launch.py::test_bool_flags_have_no_variant"),
    "--no-prefix-caching": (SAME, "test_launch.py::test_bool_flags_have_no_variant"),
    "--chunked-prefill": (SAME, "test_protocols.py::test_recorded_config_files_load_and_"
                          "match_their_preset"),
    "--no-chunked-prefill": (SAME, "test_settings.py::test_every_option_has_three_spellings"),
    "--device": (MIGRATION, "it sets `CUDA_VISIBLE_DEVICES` too"),
    "--port": (SAME, "test_launch.py::test_passthrough_and_cli_precedence"),
    "--gpu-memory-utilization": (MIGRATION, "A launch without a preset took the launcher's"),
    "--adaptive-speculation": (SAME, "test_launch.py::test_bool_flags_have_no_variant"),
    "--adaptive-policy": (SAME, "test_settings.py::test_a_profile_alone_implies_the_"
                          "profile_policy"),
    "--adaptive-profile": (SAME, "test_predecessor_profiles.py::"
                           "test_the_launcher_dry_run_accepts_them"),
    "--adaptive-ewma-weight": (MIGRATION, "`--adaptive-ewma-weight` (0.1)"),
    "--adaptive-hysteresis": (MIGRATION, "`--adaptive-hysteresis` 0.05"),
    "--adaptive-min-gamma": (MIGRATION, "`--adaptive-min-gamma` defaulted to 1"),
    "--adaptive-min-observations": (SAME, "test_predecessor_knobs.py::"
                                    "test_min_observations_is_a_profile_policy_knob_only"),
    "--adaptive-control-interval": (MIGRATION, "`--adaptive-control-interval` 4"),
    "--adaptive-max-gamma-step": (MIGRATION, "`--adaptive-max-gamma-step` to 1"),
    "--adaptive-latency-calibration": (MIGRATION, "refused `--no-adaptive-latency-calibration`"),
    "--no-adaptive-latency-calibration": (MIGRATION, "refused `--no-adaptive-latency-"
                                          "calibration`"),
    "--adaptive-latency-ewma-weight": (SAME, "test_predecessor_knobs.py::"
                                       "test_latency_ewma_weight_sets_the_calibration_rate"),
    "--adaptive-gamma0-mode": (MIGRATION, "sticky gamma 0 is allowed under online"),
    "--adaptive-online-window": (MIGRATION, "`--adaptive-online-window` (32)"),
    "--adaptive-online-exploration": (MIGRATION, "`--adaptive-online-exploration` (0.01)"),
    "--adaptive-online-warmup-samples": (MIGRATION, "`--adaptive-online-warmup-samples` (1)"),
    "--adaptive-online-warmup-return": (MIGRATION, "`--adaptive-online-warmup-return`"),
    "--adaptive-entropy-stop": (SAME, "test_draft_side.py::"
                                "test_draft_config_defaults_and_labels"),
    "--adaptive-entropy-topk": (SAME, "test_draft_side.py::"
                                "test_draft_config_defaults_and_labels"),
    "--adaptive-entropy-threshold": (SAME, "test_predecessor_knobs.py::"
                                     "test_entropy_scale_keeps_the_predecessors_direction"),
    "--adaptive-entropy-scale": (SAME, "test_predecessor_knobs.py::"
                                 "test_entropy_scale_keeps_the_predecessors_direction"),
    "--adaptive-trace": (SAME, "test_predecessor_semantics.py::"
                         "test_bare_adaptive_trace_logs_to_the_server_log"),
    "--adaptive-full-graph": (MIGRATION, "`--adaptive-full-graph` and `--adaptive-async` on"),
    "--adaptive-async": (MIGRATION, "`--adaptive-full-graph` and `--adaptive-async` on"),
    "--shared-tokenizer-padding": (SAME, "test_protocols.py::test_recorded_config_files_"
                                   "load_and_match_their_preset"),
    "--no-shared-tokenizer-padding": (SAME, "test_settings.py::"
                                      "test_every_option_has_three_spellings"),
    "--merged-full": (CLOSED, "test_predecessor_flags.py::"
                      "test_merged_full_is_vllm_ascends_own_graph_under_full_graph_modes"),
    "--no-merged-full": (SAME, "test_predecessor_flags.py::"
                         "test_merged_full_is_vllm_ascends_own_graph_under_full_graph_modes"),
    "--merged-full-max-batch": (CLOSED, "test_predecessor_semantics.py::"
                                "test_merged_full_max_batch_zero_is_no_cap"),
    "--eagle-draft-active-vocab-size": (MIGRATION, "`--eagle-draft-active-vocab-size N` kept"),
    "--eagle-draft-active-vocab-ids": (SAME, "test_predecessor_flags.py::"
                                       "test_renamed_options_are_aliases_in_every_spelling"),
    "--eagle-target-active-vocab-ids": (SAME, "test_protocols.py::test_recorded_config_"
                                        "files_load_and_match_their_preset"),
    "--eagle-draft-lm-head-quantization": (SAME, "test_predecessor_flags.py::"
                                           "test_renamed_options_are_aliases_in_every_"
                                           "spelling"),
    "--eagle-relaxed-accept-topk": (SAME, "test_predecessor_semantics.py::"
                                    "test_the_predecessors_off_values_mean_off"),
    "--eagle-relaxed-accept-after-tokens": (SAME, "tests/e2e/test_engine_methods_acceptance.py"
                                            "::test_after_tokens_keeps_the_first_tokens_"
                                            "strict"),
    "--eagle-spec-metadata-cache": (CLOSED, "test_predecessor_flags.py::"
                                    "test_host_switches_no_host_has_fail_closed"),
    "--eagle-uniform-state-kernel": (CLOSED, "test_predecessor_flags.py::"
                                     "test_host_switches_no_host_has_fail_closed"),
    "--graph-event-ordering": (CLOSED, "test_predecessor_flags.py::"
                               "test_host_switches_no_host_has_fail_closed"),
    "--eagle-tree-width": (CLOSED, "test_predecessor_flags.py::"
                           "test_host_switches_no_host_has_fail_closed"),
    "--eagle-zero-draft-kv-first-step": (CLOSED, "test_predecessor_flags.py::"
                                         "test_host_switches_no_host_has_fail_closed"),
    "--eagle-draft-trace": (SAME, "test_settings.py::test_every_option_has_three_spellings"),
    "--eagle-draft-io-trace-dir": (SAME, "test_settings.py::"
                                   "test_every_option_has_three_spellings"),
    "--eagle-target-hidden-trace-dir": (SAME, "test_settings.py::"
                                        "test_every_option_has_three_spellings"),
    "--eagle-target-argmax-trace-path": (SAME, "test_settings.py::"
                                         "test_every_option_has_three_spellings"),
    # commands, files and features
    "run.sh presets (draft, eagle, draft-adaptive, *-arc-easy, eagle-relaxed, qwen35-eagle3)":
        (SAME, "test_protocols.py::test_run_sh_names_are_aliases_of_the_validated_presets"),
    "./run.sh with no preset": (SAME, "test_predecessor_manual.py::"
                                "test_run_sh_without_a_preset_runs_draft"),
    "configs/*.toml as recorded": (SAME, "test_protocols.py::test_recorded_config_files_"
                                   "load_and_match_their_preset"),
    "--protocol arc-easy --method draft|eagle": (SAME, "test_protocols.py::"
                                                 "test_launcher_arc_easy_dry_run_and_errors"),
    "--protocol qwen35-frontier-mtp2 pins its conditions": (SAME, "test_protocols.py::"
                                                            "test_the_frontier_protocol_pins_"
                                                            "its_validated_conditions"),
    "MTP2 budgets 2/4/6": (MIGRATION, "`--method mtp` played only the budgets 2, 4 and 6"),
    "every launcher command of the manual": (SAME, "test_predecessor_manual.py::"
                                             "test_every_launcher_command_dry_runs_or_fails_"
                                             "closed"),
    "vllm-hust-vspec-bench --method draft|eagle": (SAME, "test_predecessor_manual.py::"
                                                   "test_the_protocol_bench_commands_dry_run"),
    "profiles/*.json of 0.14": (SAME, "test_predecessor_profiles.py::"
                                "test_step_times_equal_the_014_formula"),
    "vllm-hust-vspec-doctor commands": (SAME, "test_doctor.py::"
                                        "test_the_predecessor_manual_commands_parse"),
    "doctor without a host": (MIGRATION, "the doctor with no vLLM host installed"),
    "manage.sh install / --editable / --enable, install.sh": (SAME, "test_lifecycle_manage"
                                                              ".py::test_install_and_"
                                                              "uninstall_shortcuts_dry_run"),
    "manage.sh list/validate/check/plan/render/enable/status": (SAME, "test_lifecycle_"
                                                                "manage.py::test_dry_run_with_"
                                                                "manager_delegates_without_"
                                                                "calling_it"),
    "manage.sh run --dry-run -- CMD": (SAME, "test_lifecycle_manage.py::"
                                       "test_dry_run_run_verb"),
    "manage.sh disable / uninstall / uninstall.sh / --dry-run": (SAME, "test_lifecycle_"
                                                                 "venv.py::test_uninstall_for_"
                                                                 "real_leaves_the_host_alone"),
    "parent-environment copy is reported, not removed": (SAME, "test_lifecycle_venv.py::"
                                                         "test_parent_environment_copy_is_"
                                                         "reported_not_removed"),
    "manage.sh upgrade / rollback with 0.14.3": (SAME, "test_lifecycle_venv.py::"
                                                 "test_rollback_to_the_predecessor_and_"
                                                 "upgrade_back"),
    "upgrade refuses an older version": (MIGRATION, "refuses an older target"),
    "release.sh source-check / build / check": (SAME, "test_lifecycle_release.py::"
                                                "test_check_passes_on_built_artefacts"),
    "release.sh publish with UV_PUBLISH_TOKEN": (SAME, "test_lifecycle_release.py::"
                                                 "test_publish_accepts_the_predecessors_token_"
                                                 "variable"),
    "manage.sh models, vllm-hust-vspec-models": (SAME, "test_model_store.py::"
                                                 "test_manage_models_verb_runs_the_cli"),
    "install --model-dir / --model-registry / --no-model-download / --skip-model-setup":
        (SAME, "test_lifecycle_manage.py::test_dry_run_install_model_step"),
    "install does not download by default": (MIGRATION, "detect, validate and register local"),
    "model registry {schema_version, models}": (SAME, "test_model_store.py::"
                                                "test_registry_layouts_at_the_xdg_default"),
    "HUST_VSPEC_DRAFT_MODEL / EAGLE_MODEL / MODEL_DIR / MODEL_REGISTRY": (
        SAME, "test_model_store.py::test_lookup_order_first_valid_copy_wins"),
    "VSPEC_CONFIG=... ./run.sh": (MIGRATION, "replaced `run.sh`'s preset file"),
    "legacy SPECSLO_/SPECASCEND_ config and variables": (SAME, "test_settings.py::"
                                                         "test_legacy_env_prefixes_lose_to_"
                                                         "new"),
    "-- passthrough to vllm serve": (MIGRATION, "`--` arguments replaced a file's"),
    "curl example's served model name": (SAME, "test_protocols.py::"
                                         "test_recorded_config_files_load_and_match_their_"
                                         "preset"),
    "HUST_VSPEC_ENABLED=1 gates every patch": (SAME, "test_register.py::"
                                               "test_register_is_a_noop_without_the_flag"),
    "AgentX 256K target-only / MTP2 templates": (SAME, "test_agentx_templates.py::"
                                                 "test_templates_satisfy_the_harness_and_"
                                                 "stay_unfilled"),
    "SPEED-Bench forced acceptance length": (MIGRATION, "`--synthetic-acceptance-length X`"),
    "vllm-hust-vspec-fit-profile samples.json profile.json": (SAME, "test_adaptive_fit.py"),
    "version orders after 0.14.3": (SAME, "test_lifecycle_manage.py::"
                                    "test_dry_run_upgrade_from_the_predecessor"),
}


def _test_exists(ref: str) -> bool:
    path, _, name = ref.partition("::")
    tests = Path(__file__).resolve().parents[1]
    # a bare file name is the test file of that name anywhere under tests/ (names are unique)
    file = tests.parent / path if "/" in path else next(tests.rglob(path), tests / path)
    return file.is_file() and (not name or re.search(rf"^def {name}\(", file.read_text(),
                                                      re.M) is not None)


def test_every_flag_of_the_manual_has_an_entry() -> None:
    from test_predecessor_flags import manual_flags

    missing = sorted(f for f in manual_flags() if f not in MANUAL_ITEMS)
    assert missing == []


@pytest.mark.parametrize("item", sorted(MANUAL_ITEMS))
def test_each_item_is_shown_or_documented(item: str) -> None:
    kind, ref = MANUAL_ITEMS[item]
    if kind == MIGRATION:
        migration = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()
        assert ref in migration, f"{item}: docs/migration.md has no entry {ref!r}"
    else:
        assert kind in (SAME, CLOSED)
        assert _test_exists(ref), f"{item}: no test {ref}"
