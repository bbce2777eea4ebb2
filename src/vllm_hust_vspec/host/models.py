"""Out-of-tree model registrations (every process: front-end, EngineCore, workers).

EAGLE-Qwen2 checkpoints declare ``Qwen2ForCausalLM`` (or ``Qwen2ForCausalLMEagle``); vLLM's
``EAGLEConfig`` turns that into ``EagleQwen2ForCausalLM`` / ``EagleQwen2ForCausalLMEagle``,
which vLLM 0.32 does not implement. Each name is registered with the lazy ``module:Class``
string form (nothing is imported until such a checkpoint is loaded), and only when the host
has no implementation of its own, so a newer vLLM's built-in class always wins.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm_hust_vspec.host")

QWEN2_EAGLE_CLASS = "vllm_hust_vspec.backends.qwen2_eagle:EagleQwen2ForCausalLM"
# Kept here (not imported from backends.qwen2_eagle, which imports vLLM model code).
QWEN2_EAGLE_ARCHS = (
    "EagleQwen2ForCausalLM",
    "Qwen2ForCausalLMEagle",
    "EagleQwen2ForCausalLMEagle",
)


def register_models() -> list[str]:
    """Register vSpec's drafters the host lacks; returns the names registered now."""
    from vllm import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    added = []
    for arch in QWEN2_EAGLE_ARCHS:
        if arch in supported:
            continue
        ModelRegistry.register_model(arch, QWEN2_EAGLE_CLASS)
        added.append(arch)
    if added:
        logger.info("vSpec: registered Qwen2-EAGLE drafter for %s", ", ".join(added))
    return added


def unregister_models(names: list[str]) -> None:
    """Remove registrations made by :func:`register_models` (tests)."""
    from vllm import ModelRegistry

    for arch in names:
        ModelRegistry.models.pop(arch, None)


__all__ = ["QWEN2_EAGLE_ARCHS", "QWEN2_EAGLE_CLASS", "register_models", "unregister_models"]
