"""The only layer that knows vLLM class names.

``apply(settings)`` is called by the plugin entry point in every vLLM process when
``HUST_VSPEC_ENABLED=1``. Importing this package does not import vllm; ``apply`` does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from vllm_hust_vspec.host.patching import Patcher

logger = logging.getLogger("vllm_hust_vspec.host")

_LOCK = threading.Lock()
_patcher: Patcher | None = None
_settings: Any = None
_registered: list[str] = []


def current_settings() -> Any:
    """The settings the next Scheduler will be built with (None before :func:`apply`)."""
    return _settings


def applied() -> bool:
    """True when the host patches are in place in this process."""
    return _patcher is not None


def apply(settings: Any) -> None:
    """Patch this process's vLLM for vSpec. Idempotent per process.

    A second call keeps the patches and only replaces the settings that later Schedulers are
    built with. Fails closed: raises (naming the missing class/attribute) when the host lacks
    what the hook needs, leaving nothing patched.
    """
    global _patcher, _settings
    with _LOCK:
        _settings = settings
        if _patcher is not None:
            return
        from vllm_hust_vspec.host import capabilities
        from vllm_hust_vspec.host import vllm as upstream

        caps = capabilities.detect()
        capabilities.require_upstream(caps)
        patcher = Patcher("vspec-upstream-vllm")
        try:
            upstream.install(patcher, current_settings)
            _apply_methods(patcher, settings)
            _apply_ascend(patcher, settings)
        except BaseException:
            patcher.undo()
            raise
        _patcher = patcher
        logger.info(
            "vSpec: patched vLLM %s (%d attributes)", caps.vllm_version, len(patcher)
        )


def _apply_methods(patcher: Patcher, settings: Any) -> None:
    """Method features on the upstream worker/config path (the one list of them):
    drafter registrations, the CPU expand fix, draft/target vocabulary rule, draft-side
    features (confidence stop, draft LM head, padded-vocab guards) and, on non-NPU hosts,
    relaxed acceptance."""
    global _registered
    from vllm_hust_vspec.host import ascend, models
    from vllm_hust_vspec.host.acceptance import install_acceptance
    from vllm_hust_vspec.host.cpu_expand import install_cpu_expand_fix
    from vllm_hust_vspec.host.drafting import install_drafting
    from vllm_hust_vspec.host.vocab import install_vocab_check

    _registered = models.register_models()
    install_cpu_expand_fix(patcher)  # strict acceptance needs it too
    install_vocab_check(patcher, current_settings)
    install_drafting(patcher, current_settings)
    if not ascend.is_ascend_platform():  # vllm-ascend's rejection path has its own patch
        install_acceptance(patcher, current_settings)


def _apply_ascend(patcher: Patcher, settings: Any) -> None:
    """On the NPU platform: check vllm-ascend's ABI live (fail closed), then patch it."""
    from vllm_hust_vspec.host import ascend

    if not ascend.is_ascend_platform():
        return
    from vllm_hust_vspec.host import abi

    method = getattr(settings, "method", "draft")
    if method in abi.METHODS:
        report = abi.check_live(
            method, bool(getattr(settings, "adaptive_speculation", True)),
            hosts=(abi.VLLM, abi.ASCEND), features=ascend.features_for(settings),
        )
        if not report.ok:
            raise abi.HostAbiError(report)
    ascend.install(patcher, current_settings)


def undo() -> None:
    """Remove every patch (tests; a process that wants vanilla vLLM back)."""
    global _patcher, _settings, _registered
    with _LOCK:
        if _patcher is not None:
            _patcher.undo()
        if _registered:
            from vllm_hust_vspec.host import models

            models.unregister_models(_registered)
        _patcher = None
        _settings = None
        _registered = []


__all__ = ["applied", "apply", "current_settings", "undo"]
