"""The default drafters: registry (both layouts), lookup order, validation, the bare
``--method draft|eagle`` launch, ``vllm-hust-vspec-models`` and ``manage.sh models``.

Every folder is under tmp_path: HOME, the XDG folders and the fixed /data/shared-models and
/model folders are pointed there, and nothing opens a connection.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from _lifecycle import MANAGE, run_script

from vllm_hust_vspec.cli import models as models_cli
from vllm_hust_vspec.cli.launch import main as launch
from vllm_hust_vspec.launch import model_store
from vllm_hust_vspec.launch.model_store import (
    DEFAULT_DRAFTERS,
    ModelRegistryError,
    check_model,
    find_drafter,
    load_registry,
)
from vllm_hust_vspec.launch.models import ModelNotFoundError, default_drafter, resolve_model

DRAFT, EAGLE = DEFAULT_DRAFTERS["draft"], DEFAULT_DRAFTERS["eagle"]
ARCH = {"draft": "Qwen2ForCausalLM", "eagle": "Qwen2ForCausalLMEagle"}


def make_model(folder: Path, key: str = "draft") -> Path:
    """A folder that passes validation as the ``key`` drafter (tiny, fake weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": [ARCH[key]]}))
    (folder / "model.safetensors").write_bytes(b"\0" * 8)
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment: HOME in tmp_path, no XDG or vSpec variables, fixed folders moved."""
    for key in list(os.environ):
        if key.startswith(("HUST_VSPEC_", "HUST_SPEC", "VSPEC_", "SPECSLO", "SPECASCEND",
                           "XDG_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(model_store, "SHARED_MODEL_DIR", tmp_path / "data" / "shared-models")
    monkeypatch.setattr(model_store, "CONTAINER_MODEL_DIR", tmp_path / "container-model")
    return tmp_path / "home"


def default_registry(home: Path) -> Path:
    return home / ".config" / "vllm-hust-vspec" / "models.json"


def target(tmp_path: Path) -> str:
    (tmp_path / "target").mkdir(exist_ok=True)
    (tmp_path / "target" / "config.json").write_text("{}")
    return str(tmp_path / "target")


def dry_launch(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    rc = launch([*args, "--dry-run", "--json"])
    out = capsys.readouterr()
    return rc, json.loads(out.out) if rc == 0 else None, out.err


def draft_of(result: dict[str, Any]) -> str:
    argv = result["argv"]
    return json.loads(argv[argv.index("--speculative-config") + 1])["model"]  # type: ignore


# --- registry ------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["structured-object", "structured-path", "flat"])
def test_registry_layouts_at_the_xdg_default(home: Path, tmp_path: Path, layout: str) -> None:
    folder = make_model(tmp_path / "somewhere" / "d")
    doc: dict[str, Any] = {
        "structured-object": {"schema_version": 1, "models": {"draft": {
            "path": str(folder), "method": "draft_model", "repo_id": DRAFT.repo_id,
            "revision": DRAFT.revision}}},
        "structured-path": {"schema_version": 1, "models": {"draft": str(folder)}},
        "flat": {"draft": str(folder)},
    }[layout]
    default_registry(home).parent.mkdir(parents=True)
    default_registry(home).write_text(json.dumps(doc))
    assert default_drafter("draft", os.environ) == str(folder)
    reg = load_registry(os.environ)
    assert reg.path == default_registry(home) and reg.entry_path("draft") == folder


def test_registry_location_order(home: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert model_store.registry_location(os.environ, None) == default_registry(home)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    xdg = tmp_path / "cfg" / "vllm-hust-vspec" / "models.json"
    assert model_store.registry_location(os.environ, None) == xdg
    monkeypatch.setenv("HUST_VSPEC_MODEL_REGISTRY", str(tmp_path / "env.json"))
    assert model_store.registry_location(os.environ, None) == tmp_path / "env.json"
    assert model_store.registry_location(os.environ, tmp_path / "x.json") == tmp_path / "x.json"


def test_explicit_registry_beats_the_environments(home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_model(tmp_path / "a"), make_model(tmp_path / "b")
    (tmp_path / "a.json").write_text(json.dumps({"schema_version": 1, "models": {"draft": str(a)}}))
    (tmp_path / "b.json").write_text(json.dumps({"schema_version": 1, "models": {"draft": str(b)}}))
    monkeypatch.setenv("HUST_VSPEC_MODEL_REGISTRY", str(tmp_path / "a.json"))
    assert default_drafter("draft", os.environ) == str(a)
    assert default_drafter("draft", os.environ, registry=str(tmp_path / "b.json")) == str(b)


@pytest.mark.parametrize(("text", "needle"), [
    ("{not json", "is not valid JSON"),
    ('["a"]', "must hold a JSON object"),
    ('{"schema_version": 2, "models": {}}', "schema_version 2 is not supported"),
    ('{"schema_version": 1, "models": []}', 'no "models" object'),
])
def test_bad_registry_is_an_error_naming_the_file(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, text: str, needle: str,
) -> None:
    reg = tmp_path / "reg.json"
    reg.write_text(text)
    monkeypatch.setenv("HUST_VSPEC_MODEL_REGISTRY", str(reg))
    with pytest.raises(ModelRegistryError, match=needle) as err:
        load_registry(os.environ)
    assert str(reg) in str(err.value)
    rc, _, stderr = dry_launch(capsys, "--method", "draft", "--target-model", target(tmp_path))
    assert rc == 2 and needle in stderr and str(reg) in stderr
    assert models_cli.main([]) == 2


def test_missing_registry_file_is_empty(home: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUST_VSPEC_MODEL_REGISTRY", str(tmp_path / "none.json"))
    reg = load_registry(os.environ)
    assert not reg.exists and reg.models == {}


# --- lookup order and validation -----------------------------------------------------------


def test_lookup_order_first_valid_copy_wins(home: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    places = {
        "override": tmp_path / "override" / "x",
        "registry": tmp_path / "registered" / "x",
        "model_dir": tmp_path / "mdir" / DRAFT.folder,
        "shared": model_store.SHARED_MODEL_DIR / DRAFT.folder,
        "container": model_store.CONTAINER_MODEL_DIR / DRAFT.folder,
        "xdg": home / ".local" / "share" / "vllm-hust-vspec" / "models" / DRAFT.folder,
    }
    for folder in places.values():
        make_model(folder)
    monkeypatch.setenv("HUST_VSPEC_DRAFT_MODEL", str(places["override"]))
    reg = tmp_path / "reg.json"
    reg.write_text(json.dumps({"schema_version": 1, "models": {"draft": str(places["registry"])}}))
    monkeypatch.setenv("HUST_VSPEC_MODEL_REGISTRY", str(reg))
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path / "mdir"))
    for name, folder in places.items():
        assert default_drafter("draft", os.environ) == str(folder), name
        (folder / "model.safetensors").write_bytes(b"")  # invalid now: the next one wins
    with pytest.raises(ModelNotFoundError) as err:
        default_drafter("draft", os.environ)
    text = str(err.value)
    for folder in places.values():
        assert str(folder) in text
    assert "HUST_VSPEC_DRAFT_MODEL" in text and str(reg) in text
    assert "--draft-model" in text and "vllm-hust-vspec-models --download" in text


@pytest.mark.parametrize(("key", "breakage", "needle"), [
    ("draft", "no-config", "config.json is missing"),
    ("draft", "bad-json", "config.json is not valid JSON"),
    ("draft", "wrong-arch", "config.json: architectures ['LlamaForCausalLM'] name none of "
                            "Qwen2ForCausalLM"),
    ("eagle", "wrong-arch", "name none of Qwen2ForCausalLMEagle"),
    ("draft", "empty-weights", "holds no non-empty *.safetensors or *.bin"),
    ("draft", "no-tokenizer-config", "tokenizer_config.json is missing"),
    ("draft", "no-tokenizer", "none of the tokenizer files"),
    ("draft", "not-a-folder", "does not exist"),
])
def test_validation_names_the_file_and_the_fault(
    tmp_path: Path, key: str, breakage: str, needle: str
) -> None:
    folder = make_model(tmp_path / "m", key)
    if breakage == "no-config":
        (folder / "config.json").unlink()
    elif breakage == "bad-json":
        (folder / "config.json").write_text("{")
    elif breakage == "wrong-arch":
        (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    elif breakage == "empty-weights":
        (folder / "model.safetensors").write_bytes(b"")
    elif breakage == "no-tokenizer-config":
        (folder / "tokenizer_config.json").unlink()
    elif breakage == "no-tokenizer":
        (folder / "tokenizer.json").unlink()
    else:
        folder = tmp_path / "nothing"
    reason = check_model(folder, DEFAULT_DRAFTERS[key])
    assert reason is not None and needle in reason and str(folder) in reason


def test_eagle_needs_no_tokenizer_and_bin_weights_count(tmp_path: Path) -> None:
    folder = make_model(tmp_path / "e", "eagle")
    for name in ("tokenizer_config.json", "tokenizer.json", "model.safetensors"):
        (folder / name).unlink()
    (folder / "pytorch_model.bin").write_bytes(b"x")
    assert check_model(folder, EAGLE) is None


# --- the bare --method draft / eagle launch --------------------------------------------------


@pytest.mark.parametrize("method", ["draft", "eagle"])
def test_bare_method_finds_the_default_drafter(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, method: str,
) -> None:
    data = tmp_path / "shared"  # a /data/shared-models-like folder
    folder = make_model(data / DEFAULT_DRAFTERS[method].folder, method)
    make_model(data / DEFAULT_DRAFTERS["eagle" if method == "draft" else "draft"].folder,
               "eagle" if method == "draft" else "draft")
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(data))
    rc, out, err = dry_launch(capsys, "--method", method, "--target-model", target(tmp_path))
    assert rc == 0, err
    assert draft_of(out) == str(folder)


@pytest.mark.parametrize("method", ["draft", "eagle"])
def test_bare_method_without_a_copy_fails_before_loading(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], method: str
) -> None:
    spec = DEFAULT_DRAFTERS[method]
    make_model(model_store.SHARED_MODEL_DIR / spec.folder, "draft" if method == "eagle"
               else "eagle")  # the wrong architecture: skipped, and said so
    rc, _, err = dry_launch(capsys, "--method", method, "--target-model", target(tmp_path))
    assert rc == 2
    for needle in (spec.repo_id, spec.env, str(default_registry(home)),
                   str(model_store.SHARED_MODEL_DIR / spec.folder), "name none of",
                   str(model_store.CONTAINER_MODEL_DIR / spec.folder),
                   str(home / ".local" / "share" / "vllm-hust-vspec" / "models" / spec.folder),
                   "Hugging Face cache", "--draft-model",
                   f"vllm-hust-vspec-models --download --method {method}"):
        assert needle in err, (needle, err)


def test_config_env_table_counts_for_the_default_lookup(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_model(tmp_path / "elsewhere" / DRAFT.folder)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[env]\nHUST_VSPEC_MODEL_DIR = "{tmp_path / "elsewhere"}"\n')
    rc, out, err = dry_launch(capsys, "--config", str(cfg), "--method", "draft",
                              "--target-model", target(tmp_path))
    assert rc == 0, err
    assert draft_of(out) == str(folder)


def test_eagle_model_env_beats_draft_model_env_for_eagle(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draft, eagle = make_model(tmp_path / "d"), make_model(tmp_path / "e", "eagle")
    monkeypatch.setenv("HUST_VSPEC_DRAFT_MODEL", str(draft))
    monkeypatch.setenv("HUST_VSPEC_EAGLE_MODEL", str(eagle))
    t = target(tmp_path)
    assert draft_of(dry_launch(capsys, "--method", "eagle", "--target-model", t)[1]) == str(eagle)
    assert draft_of(dry_launch(capsys, "--method", "draft", "--target-model", t)[1]) == str(draft)


def test_preset_repo_id_finds_a_predecessor_registry_entry(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = make_model(tmp_path / "anywhere" / "qwen-small")
    default_registry(home).parent.mkdir(parents=True)
    default_registry(home).write_text(json.dumps({"schema_version": 1, "models": {
        "draft": {"path": str(draft)}, "Qwen2.5-14B-Instruct": target(tmp_path)}}))
    # the recorded /model/Qwen2.5-14B-Instruct is found under its folder name
    rc, out, err = dry_launch(capsys, "--protocol", "qwen25-14b-05b-arc-easy")
    assert rc == 0, err
    assert draft_of(out) == str(draft)
    assert resolve_model(DRAFT.repo_id, "draft", os.environ, "--draft-model") == str(draft)


def test_model_registry_setting_is_read(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vllm_hust_vspec.settings import OPTIONS_BY_NAME

    if "model_registry" not in OPTIONS_BY_NAME:
        pytest.skip("the model_registry option (--model-registry) is not defined yet")
    folder = make_model(tmp_path / "d")
    reg = tmp_path / "r.json"
    reg.write_text(json.dumps({"schema_version": 1, "models": {"draft": str(folder)}}))
    rc, out, err = dry_launch(capsys, "--method", "draft", "--model-registry", str(reg),
                              "--target-model", target(tmp_path))
    assert rc == 0, err
    assert draft_of(out) == str(folder)


# --- vllm-hust-vspec-models ----------------------------------------------------------------


def test_models_cli_registers_what_the_launcher_then_reads(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mdir = tmp_path / "mdir"
    draft, eagle = make_model(mdir / DRAFT.folder), make_model(mdir / EAGLE.folder, "eagle")
    assert models_cli.main(["--model-dir", str(mdir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["registry_written"] and report["models"]["draft"]["status"] == "found"
    text = default_registry(home).read_text()
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    assert doc == {"schema_version": 1, "models": {
        "draft": {"path": str(draft), "method": "draft_model", "repo_id": DRAFT.repo_id,
                  "revision": DRAFT.revision},
        "eagle": {"path": str(eagle), "method": "eagle", "repo_id": EAGLE.repo_id,
                  "revision": EAGLE.revision}}}
    assert not list(default_registry(home).parent.glob(".*"))  # no temporary file left
    for method, folder in (("draft", draft), ("eagle", eagle)):
        rc, out, err = dry_launch(capsys, "--method", method, "--target-model", target(tmp_path))
        assert rc == 0, err
        assert draft_of(out) == str(folder)


def test_models_cli_keeps_other_entries_and_drops_stale_ones(
    home: Path, tmp_path: Path
) -> None:
    reg = tmp_path / "r.json"
    reg.write_text(json.dumps({"Qwen/Qwen2.5-14B-Instruct": "/t", "draft": "/gone"}))
    eagle = make_model(tmp_path / "m" / EAGLE.folder, "eagle")
    assert models_cli.main(["--model-dir", str(tmp_path / "m"), "--model-registry", str(reg),
                            "--allow-missing"]) == 0
    doc = json.loads(reg.read_text())
    assert doc["schema_version"] == 1
    assert set(doc["models"]) == {"Qwen/Qwen2.5-14B-Instruct", "eagle"}
    assert doc["models"]["eagle"]["path"] == str(eagle)


def test_models_cli_is_offline_by_default(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("downloaded without --download")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    mdir = tmp_path / "mdir"
    make_model(mdir / DRAFT.folder)
    assert models_cli.main(["--model-dir", str(mdir)]) == 1  # eagle is missing
    err = capsys.readouterr().err
    assert "eagle: no usable local copy of" in err and "--download" in err
    assert "draft" in json.loads(default_registry(home).read_text())["models"]
    assert models_cli.main(["--model-dir", str(mdir), "--allow-missing"]) == 0
    assert models_cli.main(["--model-dir", str(mdir), "--method", "draft"]) == 0


def test_models_cli_download_uses_the_pinned_revision(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub

    calls: list[tuple[str, str, str]] = []

    def fake_download(repo_id: str, revision: str, local_dir: str, **_k: Any) -> str:
        calls.append((repo_id, revision, local_dir))
        key = "eagle" if "Eagle" in repo_id else "draft"
        return str(make_model(Path(local_dir), key))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    mdir = tmp_path / "mdir"
    assert models_cli.main(["--model-dir", str(mdir), "--download", "--method", "draft",
                            "--json"]) == 0
    assert calls == [(DRAFT.repo_id, DRAFT.revision, str(mdir / DRAFT.folder))]
    assert json.loads(capsys.readouterr().out)["models"]["draft"]["status"] == "downloaded"
    entry = json.loads(default_registry(home).read_text())["models"]["draft"]
    assert entry["revision"] == "7ae557604adf67be50417f59c2c2f167def9a775"
    assert entry["path"] == str(mdir / DRAFT.folder)
    # present now: a second run finds it and downloads nothing
    assert models_cli.main(["--model-dir", str(mdir), "--download", "--method", "draft"]) == 0
    assert len(calls) == 1


def test_models_cli_download_failures_name_the_model_and_the_way_round(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub

    def unreachable(*_a: Any, **_k: Any) -> None:
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    args = ["--model-dir", str(tmp_path / "m"), "--download", "--method", "eagle"]
    assert models_cli.main(args) == 1
    err = capsys.readouterr().err
    assert EAGLE.repo_id in err and "hub unreachable" in err and "--draft-model" in err
    assert f"--revision {EAGLE.revision}" in err
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    assert models_cli.main(args) == 1
    err = capsys.readouterr().err
    assert "huggingface_hub is not installed" in err and EAGLE.repo_id in err
    assert not default_registry(home).exists()


def test_model_dir_default(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = home / ".local" / "share" / "vllm-hust-vspec" / "models"
    assert model_store.default_model_dir(os.environ) == xdg
    model_store.SHARED_MODEL_DIR.mkdir(parents=True)
    assert model_store.default_model_dir(os.environ) == model_store.SHARED_MODEL_DIR
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path / "x"))
    assert model_store.default_model_dir(os.environ) == tmp_path / "x"


def test_find_drafter_lists_model_dir_first_after_the_registry(
    home: Path, tmp_path: Path
) -> None:
    make_model(model_store.SHARED_MODEL_DIR / DRAFT.folder)
    mine = make_model(tmp_path / "mine" / DRAFT.folder)
    found = find_drafter(DRAFT, os.environ, load_registry(os.environ), model_dir=tmp_path / "mine")
    assert found.found == mine and found.source == "--model-dir"


def test_manage_models_verb_runs_the_cli(home: Path, tmp_path: Path) -> None:
    mdir = tmp_path / "mdir"
    make_model(mdir / DRAFT.folder)
    reg = tmp_path / "etc" / "models.json"
    res = run_script(MANAGE, "--python", sys.executable, "models", "--model-dir", str(mdir),
                     "--model-registry", str(reg), "--method", "draft",
                     env={"HOME": str(home)})
    assert res.returncode == 0, res.stderr
    assert json.loads(reg.read_text())["models"]["draft"]["path"] == str(mdir / DRAFT.folder)
    res = run_script(MANAGE, "--python", sys.executable, "models", "--help")
    assert res.returncode == 0 and "usage: vllm-hust-vspec-models" in res.stdout
