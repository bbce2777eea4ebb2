"""Every host attribute vSpec patches: one table, read by the doctor and by the start-up check
for other plugins' wrappers (host/abi/neighbours.py).

It is the requirement table's method probes (host/abi/requirements.py, every method, adaptive,
every feature) plus the attributes patched without a method probe of their own. Module-level
globals vSpec swaps while it runs (``acl_graph._graph_params`` for the per-width graphs) are
listed too: another plugin swapping them is a conflict even though nothing is wrapped.
Importing this module imports neither vllm nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hust_vspec.host.abi import requirements as req
from vllm_hust_vspec.host.abi.model import METHOD


@dataclass(frozen=True)
class Target:
    """``module.cls.name`` (``cls`` None for a module attribute)."""

    module: str
    cls: str | None
    name: str
    # "wrap" (a function vSpec wraps) or "global" (a module attribute vSpec swaps).
    kind: str = "wrap"

    @property
    def label(self) -> str:
        """Dotted name for messages."""
        return ".".join(p for p in (self.module, self.cls, self.name) if p)


# Patched without a method probe in the requirement table (their probes read source or
# signatures elsewhere, or the patch is optional on the host).
_EXTRA: tuple[tuple[str, str | None, str], ...] = (
    (req.ENGINE_ARGS_MOD, "EngineArgs", "create_speculative_config"),
    ("vllm.config.vllm", "VllmConfig", "_maybe_disable_dynamic_sd_for_data_parallel"),
    ("vllm.v1.engine.core_client", "AsyncMPClient", "_ensure_output_queue_task"),
    ("vllm.v1.engine.core_client", "SyncMPClient", "__init__"),
    (req.SCHED_MOD, "Scheduler", "get_grammar_bitmask"),
    (req.RUNNER_MOD, "GPUModelRunner", "propose_draft_token_ids"),
    (req.RUNNER_MOD, "GPUModelRunner", "_copy_draft_token_ids_to_cpu"),
    (req.RUNNER_MOD, "GPUModelRunner", "execute_model"),
    (req.RUNNER_MOD, "GPUModelRunner", "sample_tokens"),
    (req.RUNNER_MOD, "GPUModelRunner", "take_draft_token_ids"),
    (req.V2_RUNNER_MOD, "GPUModelRunner", "execute_model"),
    (req.V2_RUNNER_MOD, "GPUModelRunner", "sample_tokens"),
    (req.V2_RUNNER_MOD, "GPUModelRunner", "take_draft_token_ids"),
    (req.V2_STANDALONE_MOD, "StandaloneARSpeculator", "propose"),
    (req.V2_TARGET_DEP_MOD, "TargetDependentARSpeculator", "propose"),
    (req.V2_MULTI_MTP_MOD, "MultiModuleMTPSpeculator", "propose"),
    (req.V2_SPEC_MOD, "DraftModelSpeculator", "compute_draft_logits"),
    (req.REJECTION_MOD, None, "expand_batch_to_tokens"),
    (req.SPEC_CONFIG_MOD, "SpeculativeConfig", "verify_equal_vocab_size_if_draft_model"),
    (req.BASE_PROPOSER_MOD, "SpecDecodeBaseProposer", "_greedy_sample"),
    (req.BASE_PROPOSER_MOD, "SpecDecodeBaseProposer", "propose"),
)
_GLOBALS: tuple[tuple[str, str], ...] = (
    (req.A_GRAPH_MOD, "_graph_params"),
    (req.A_GRAPH_MOD, "_draft_graph_params"),
)


def targets() -> tuple[Target, ...]:
    """Every host attribute vSpec may patch, sorted (which ones a process patches depends on
    the host, the runner and the settings)."""
    found: set[Target] = set()
    for method in req.METHODS:
        for check in req.checks_for(method, True, req.HOSTS, req.FEATURES, facts=True):
            for alternative in check.alternatives:
                for probe in alternative:
                    if probe.kind == METHOD and probe.name:
                        found.add(Target(probe.module, probe.cls, probe.name))
    found.update(Target(m, c, n) for m, c, n in _EXTRA)
    found.update(Target(m, None, n, "global") for m, n in _GLOBALS)
    return tuple(sorted(found, key=lambda t: (t.module, t.cls or "", t.name)))


__all__ = ["Target", "targets"]
