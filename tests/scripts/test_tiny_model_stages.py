"""The tiny-model build's stages: what a partial build leaves, and what a later call builds.

The training itself is not run here (minutes); ``_build`` and the derivations are replaced by
recorders that write what the real ones would list in the manifest.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_tiny_models.py"


@pytest.fixture()
def builder(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_tiny_models_stages", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def _fake(builder: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], bool]]:
    """Replace the training and derivations; returns the (stages, had a manifest) calls."""
    calls: list[tuple[list[str], bool]] = []

    def build(out: Path, seed: int, clock: Any, stages: list[str],
              man: dict[str, Any] | None) -> dict[str, Any]:
        calls.append((list(stages), man is not None))
        models = dict(man["models"]) if man and "lm" not in stages else {}
        for stage in stages:
            for name in builder.STAGE_MODELS[stage]:
                (out / name).mkdir(parents=True, exist_ok=True)
                (out / name / "config.json").write_text("{}")
                models[name] = {"path": name}
        manifest = {"script_version": builder.SCRIPT_VERSION, "seed": seed, "models": models}
        (out / builder.MANIFEST).write_text(json.dumps(manifest))
        return manifest

    def derive(name: str) -> Any:
        def run(out: Path, man: dict[str, Any]) -> dict[str, Any]:
            (out / name).mkdir(parents=True, exist_ok=True)
            (out / name / "config.json").write_text("{}")
            return {"path": name}
        return run

    monkeypatch.setattr(builder, "_build", build)
    monkeypatch.setattr(builder, "DERIVED", {
        name: (stage, derive(name)) for name, (stage, _) in builder.DERIVED.items()})
    return calls


def test_a_demo_build_then_a_full_one_trains_each_stage_once(
        builder: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _fake(builder, monkeypatch)
    builder.build_models(tmp_path, stages=("lm",), log=lambda _: None)
    assert calls == [(["lm"], False)]
    assert builder.is_current(tmp_path, stages=("lm",))
    assert not builder.is_current(tmp_path)  # the heads are still missing
    assert (tmp_path / "draft-padded-vocab" / "config.json").is_file()  # derived from lm
    assert not (tmp_path / "eagle-qwen2").exists()  # derived from heads

    builder.build_models(tmp_path, log=lambda _: None)
    assert calls[1] == (["heads"], True)  # trained on the lm stage's target, kept
    assert builder.is_current(tmp_path)
    man = json.loads((tmp_path / builder.MANIFEST).read_text())
    assert set(builder.STAGE_MODELS["lm"]) <= set(man["models"])
    assert "eagle-qwen2" in man["models"]

    builder.build_models(tmp_path, log=lambda _: None)
    assert len(calls) == 2  # nothing left to build


def test_heads_alone_build_the_target_first_and_a_new_target_rebuilds_both(
        builder: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _fake(builder, monkeypatch)
    builder.build_models(tmp_path, stages=("heads",), log=lambda _: None)
    assert calls == [(["lm", "heads"], False)]
    # a missing lm model means a new target: every stage trained on the old one is rebuilt
    (tmp_path / "draft" / "config.json").unlink()
    builder.build_models(tmp_path, stages=("heads",), log=lambda _: None)
    assert calls[1] == (["lm", "heads"], False)
    # another seed is another build
    assert not builder.is_current(tmp_path, seed=builder.DEFAULT_SEED + 1, stages=("lm",))


def test_the_command_line_names_the_stages(builder: ModuleType) -> None:
    with pytest.raises(SystemExit) as exc:
        builder.main(["--only", "eagle"])
    assert exc.value.code == 2
