"""The vllm-ascend host adapter (NPU).

vllm-ascend runs vLLM's own scheduler, so the upstream scheduler hook (``host.vllm``) is
shared; this package adds what the NPU worker side needs:

* ``proposer``: the K channel backport on lines whose ``AscendSpecDecodeBaseProposer._propose``
  takes no ``num_speculative_tokens`` (v0.18..v0.26, vLLM-Ascend-HUST's PEARL line); nothing on
  lines that take K (0.30+, vLLM-Ascend-HUST's main line).
* ``graphs``: ``mtp_strict_graph`` (stop instead of silently running eager).
* ``graph_widths``: graph-per-gamma: target FULL decode graphs per verify width and one
  merged draft graph per gamma, each with its own graph params (``mtp_strict_graph`` is
  checked in the same wrapper then); under combined FULL (``--graph-mode full``) the
  host's shared target graphs and params, and merged draft graphs per gamma. Either K
  channel: the drafter's ``num_speculative_tokens`` picks the draft graph when it runs.
* ``rejection``: relaxed acceptance modes on ``AscendRejectionSampler``'s path (strict is the
  host's own behaviour: nothing patched).

:func:`install` is the one list of Ascend patches. Importing this package imports neither
vllm nor vllm_ascend; :func:`install` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_hust_vspec.backends.acceptance import STRICT, AcceptanceParams
from vllm_hust_vspec.host.abi import requirements as req
from vllm_hust_vspec.host.abi.host_facts import is_ascend_platform
from vllm_hust_vspec.host.patching import Patcher, resolve
from vllm_hust_vspec.host.worker.ascend.proposer import BACKPORT, NATIVE

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host.worker.ascend")


@dataclass(frozen=True)
class AscendPlan:
    """What :func:`install` did."""

    k_channel: str  # "native" | "backport" | "off" (adaptive off)
    strict_graph: bool
    relaxed_acceptance: bool
    # verify widths that get their own FULL decode graphs (graph_per_gamma); () when off
    graph_widths: tuple[int, ...] = ()


def _acceptance(settings: Settings | None) -> AcceptanceParams:
    if settings is None:
        return STRICT
    from vllm_hust_vspec.backends.acceptance import params_from_settings

    return params_from_settings(settings)


def install(patcher: Patcher, get_settings: Callable[[], Settings]) -> AscendPlan:
    """Apply every vllm-ascend patch the settings ask for (fail closed on a missing name)."""
    settings = get_settings()
    adaptive = bool(settings.adaptive_speculation)
    method = settings.method

    def gamma0_mode() -> str:
        return "sticky" if get_settings().sticky_zero() else "sync"

    k_channel = "off"
    if adaptive:
        from vllm_hust_vspec.host.worker.ascend.proposer import install_proposer

        base = resolve(req.A_BASE_MOD, req.A_BASE)
        extra: tuple[type, ...] = ()
        if method == "mtp":
            try:
                extra = (resolve(req.A_STEP3P5_MOD, req.A_STEP3P5),)
            except Exception:  # noqa: BLE001 - optional proposer, absent on some lines
                extra = ()
        k_channel = install_proposer(patcher, base, gamma0_mode, extra)
        _install_draft_copy(patcher)

    strict_graph = settings.strict_mtp_graph() and method == "mtp"

    def strict_on() -> bool:
        s = get_settings()
        return s.strict_mtp_graph() and s.method == "mtp"

    graph_widths: tuple[int, ...] = ()
    if "graph_per_gamma" in features_for(settings):
        from vllm_hust_vspec.host.worker.ascend.graph_widths import (
            GraphWidthsError,
            install_graph_widths,
            plan_from_settings,
        )

        if k_channel not in (BACKPORT, NATIVE):
            raise GraphWidthsError(
                "vSpec graph-per-gamma on vLLM-Ascend needs gamma to reach the drafter; "
                "adaptive speculation is off. Use --graph-mode piecewise")
        # The per-gamma draft graph is chosen by the drafter's num_speculative_tokens at the
        # moment it runs: the backport sets it per call, a K-taking _propose sets it itself.
        runner = resolve(req.A_RUNNER_MOD, req.A_RUNNER)
        dispatcher = resolve(req.A_DISPATCHER_MOD, req.A_DISPATCHER)
        plan = plan_from_settings(settings)
        install_graph_widths(
            patcher, runner, dispatcher, lambda: plan_from_settings(get_settings()), strict_on
        )
        graph_widths = plan.widths
    elif strict_graph:
        from vllm_hust_vspec.host.worker.ascend.graphs import install_strict_graph

        runner = resolve(req.A_RUNNER_MOD, req.A_RUNNER)
        install_strict_graph(patcher, runner, strict_on)

    relaxed = False
    if not _acceptance(settings).strict:
        import importlib

        from vllm_hust_vspec.host.worker.ascend.rejection import install_rejection

        module = importlib.import_module(req.A_REJ_MOD)
        relaxed = install_rejection(patcher, module, lambda: _acceptance(get_settings()))

    result = AscendPlan(k_channel=k_channel, strict_graph=strict_graph,
                        relaxed_acceptance=relaxed, graph_widths=graph_widths)
    logger.info("vSpec: vllm-ascend adapter installed: %s", result)
    return result


def _install_draft_copy(patcher: Patcher) -> None:
    """The NPU runner's own sync copy of the drafts fills a ``[max_num_reqs, max K]`` buffer
    without a column slice: narrowed to the drafts' width (host/worker/k_channel.py). A runner
    module that cannot import here cannot build a runner either (vLLM fails on it), so
    there is nothing to patch then."""
    from vllm_hust_vspec.host.patching import PatchError
    from vllm_hust_vspec.host.worker.k_channel import make_draft_copy_wrapper

    try:
        npu_runner = resolve(req.A_RUNNER_MOD, req.A_RUNNER)
    except PatchError as exc:
        logger.info("vSpec: the NPU runner's draft copy is not patched: %s", exc)
        return
    if "_copy_draft_token_ids_to_cpu" in vars(npu_runner):
        patcher.wrap(npu_runner, "_copy_draft_token_ids_to_cpu", make_draft_copy_wrapper)


def features_for(settings: Settings) -> tuple[str, ...]:
    """The doctor features (host capabilities) these settings need on vllm-ascend."""
    out = []
    if (settings.graph_mode in ("full", "full-decode-only", "full-and-piecewise")
            and settings.adaptive_speculation):
        out.append("graph_per_gamma")
    if settings.strict_mtp_graph() and settings.method == "mtp":
        out.append("mtp_strict_graph")
    if not _acceptance(settings).strict:
        out.append("acceptance")
    return tuple(out)


__all__ = ["AscendPlan", "features_for", "install", "is_ascend_platform"]
