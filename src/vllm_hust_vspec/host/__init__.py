"""The only layer that knows vLLM class names.

``apply(settings)`` is called by the plugin entry point in every vLLM process when
``HUST_VSPEC_ENABLED=1``. Importing this package does not import vllm; ``apply`` does. The
settings reach every patch as an argument (a :class:`SettingsRef` the patches read when they
run), never through a module global they look up.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_hust_vspec.host.patching import Patcher

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")


@dataclass
class SettingsRef:
    """The settings that later Schedulers and workers are built with. A second
    :func:`apply` replaces them in place, so the patches keep reading the current ones."""

    settings: Settings

    def get(self) -> Settings:
        """The current settings."""
        return self.settings


@dataclass
class _Applied:
    patcher: Patcher
    ref: SettingsRef
    registered: list[str]


_LOCK = threading.Lock()
_state: _Applied | None = None


def current_settings() -> Settings | None:
    """The settings the next Scheduler will be built with (None before :func:`apply`)."""
    return _state.ref.settings if _state is not None else None


def applied() -> bool:
    """True when the host patches are in place in this process."""
    return _state is not None


def apply(settings: Settings) -> None:
    """Patch this process's vLLM for vSpec. Idempotent per process.

    A second call keeps the patches and only replaces the settings that later Schedulers are
    built with. Fails closed: raises (naming the missing class/attribute) when the host lacks
    what the hook needs, leaving nothing patched.
    """
    global _state
    with _LOCK:
        from vllm_hust_vspec.host.abi import compat
        from vllm_hust_vspec.host.worker import ascend

        compat.require_supported(settings, ascend=ascend.is_ascend_platform())
        if _state is not None:
            _state.ref.settings = settings
            return
        from vllm_hust_vspec.host.abi import capabilities, neighbours

        # the other plugins beside vSpec, named before anything is patched or loaded
        on_npu = ascend.is_ascend_platform()
        neighbours.check_at_startup(
            ascend=on_npu,
            graph_per_gamma=on_npu and "graph_per_gamma" in ascend.features_for(settings))
        caps = capabilities.detect()
        capabilities.require_upstream(caps)
        patcher = Patcher("vspec-upstream-vllm")
        ref = SettingsRef(settings)
        registered: list[str] = []
        try:
            _apply_core(patcher, ref)
            _apply_methods(patcher, ref, registered)
            _apply_ascend(patcher, ref)
        except BaseException:
            patcher.undo()
            _unregister(registered)
            raise
        _state = _Applied(patcher, ref, registered)
        logger.info(
            "vSpec: patched vLLM %s (%d attributes)", caps.vllm_version, len(patcher)
        )


def _apply_core(patcher: Patcher, ref: SettingsRef) -> None:
    """The per-step gamma, process by process: the front end declares the gamma range and
    ends the server when the engine dies, the EngineCore's scheduler decides every step, and
    each runner's workers honour the decision (V1 here, Model Runner V2 next; vLLM-Ascend's in
    :func:`_apply_ascend`)."""
    from vllm_hust_vspec.host.engine import scheduler
    from vllm_hust_vspec.host.frontend import declared_schedule, engine_dead
    from vllm_hust_vspec.host.worker.v1 import runner as v1_runner
    from vllm_hust_vspec.host.worker.v2 import runner as v2_runner

    declared_schedule.install(patcher, ref.get)
    engine_dead.install(patcher)
    scheduler.install(patcher, ref.get)
    v1_runner.install(patcher, ref.get)
    v2_runner.install(patcher, ref.get)


def _apply_methods(patcher: Patcher, ref: SettingsRef, registered: list[str]) -> None:
    """Method features on the upstream worker/config path (the one list of them):
    drafter registrations, the CPU expand fix, draft/target vocabulary rule, draft-side
    features (confidence stop, draft LM head, padded-vocab guards) and, on non-NPU hosts,
    relaxed acceptance. ``registered`` receives the model architectures registered first, so
    a later failure can unregister them."""
    from vllm_hust_vspec.host import models
    from vllm_hust_vspec.host.vocab_check import install_vocab_check
    from vllm_hust_vspec.host.worker import ascend
    from vllm_hust_vspec.host.worker.v1.acceptance import install_acceptance
    from vllm_hust_vspec.host.worker.v1.cpu_expand import install_cpu_expand_fix
    from vllm_hust_vspec.host.worker.v1.diagnostics import install_diagnostics
    from vllm_hust_vspec.host.worker.v1.drafting import install_drafting
    from vllm_hust_vspec.host.worker.v1.target_vocab import install_target_vocab
    from vllm_hust_vspec.host.worker.v2.acceptance import install_acceptance_v2

    registered.extend(models.register_models())
    install_cpu_expand_fix(patcher)  # strict acceptance needs it too
    install_vocab_check(patcher, ref.get)
    install_diagnostics(patcher, ref.get)
    install_drafting(patcher, ref.get)
    install_target_vocab(patcher, ref.get)
    if not ascend.is_ascend_platform():  # vllm-ascend's rejection path has its own patch
        install_acceptance(patcher, ref.get)
        install_acceptance_v2(patcher, ref.get)


def _apply_ascend(patcher: Patcher, ref: SettingsRef) -> None:
    """On the NPU platform: check vllm-ascend's ABI live (fail closed), then patch it."""
    from vllm_hust_vspec.host.worker import ascend

    if not ascend.is_ascend_platform():
        return
    from vllm_hust_vspec.host import abi

    settings = ref.settings
    if settings.method in abi.METHODS:
        report = abi.check_live(
            settings.method, settings.adaptive_speculation,
            hosts=(abi.VLLM, abi.ASCEND), features=ascend.features_for(settings),
        )
        if not report.ok:
            raise abi.HostAbiError(report)
    ascend.install(patcher, ref.get)


def _unregister(registered: list[str]) -> None:
    if registered:
        from vllm_hust_vspec.host import models

        models.unregister_models(registered)


def undo() -> None:
    """Remove every patch (tests; a process that wants vanilla vLLM back)."""
    global _state
    with _LOCK:
        if _state is not None:
            _state.patcher.undo()
            _unregister(_state.registered)
        _state = None


__all__ = ["SettingsRef", "applied", "apply", "current_settings", "undo"]
