"""Model folders for launcher dry runs: what the predecessor's presets and manual look up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Folder names the predecessor's presets and manual commands name.
PREDECESSOR_MODELS = (
    "Qwen2.5-14B-Instruct", "Qwen2.5-0.5B-Instruct", "Eagle-Qwen2.5-14B-Instruct",
    "Qwen3.5-35B-A3B", "Qwen3.5-35B-A3B-Eagle3-Specforge", "Qwen3-8B", "qwen3_8b_eagle3",
)


def make_model_folder(folder: Path) -> Path:
    """A folder that passes the default-drafter validation (tiny fake weights, tokenizer);
    an ``Eagle-`` name gets the EAGLE architecture."""
    folder.mkdir(parents=True, exist_ok=True)
    arch = "Qwen2ForCausalLMEagle" if folder.name.startswith("Eagle-") else "Qwen2ForCausalLM"
    (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
    (folder / "model.safetensors").write_bytes(b"\0" * 8)
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def make_model_dir(root: Path, names: tuple[str, ...] = PREDECESSOR_MODELS) -> Path:
    """``root`` holding one model folder per name."""
    for name in names:
        make_model_folder(root / name)
    return root


def launcher_sees_ascend(monkeypatch: Any) -> None:
    """The launcher's host check finds vLLM-Ascend installed (the predecessor's host)."""
    import importlib.util

    from vllm_hust_vspec.cli import launch

    real = importlib.util.find_spec
    monkeypatch.setattr(launch.importlib.util, "find_spec",
                        lambda n, *a: object() if n == "vllm_ascend" else real(n, *a))
