"""What this vLLM host can do: a view over the doctor's requirement table (host/abi/), read
from the host's own code (signatures, fields, source), never from version strings.

The plugin's fail-closed check and the doctor evaluate the same checks, so the two cannot
disagree. Importing this module does not import vllm; :func:`detect` does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SCHEDULER = ("vllm.v1.core.sched.scheduler", "Scheduler")
ENGINE_CORE = ("vllm.v1.engine.core", "EngineCore")
ENGINE_CORE_PROC = ("vllm.v1.engine.core", "EngineCoreProc")
SCHEDULER_OUTPUT = ("vllm.v1.core.sched.output", "SchedulerOutput")
# (modules, class): the class moved to llm_base_proposer after the vLLM-HUST core's base.
BASE_PROPOSER = (("vllm.v1.spec_decode.llm_base_proposer", "vllm.v1.spec_decode.eagle"),
                 "SpecDecodeBaseProposer")
MODEL_RUNNER = ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
WORKER = ("vllm.v1.worker.gpu_worker", "Worker")
SPEC_CONFIG = ("vllm.config.speculative", "SpeculativeConfig")

# HostCapabilities field -> the requirement checks (host/abi/requirements.py) behind it.
_FIELDS: dict[str, tuple[str, ...]] = {
    "scheduler_k_channel": ("vllm.k_channel",),
    "proposer_takes_k": ("vllm.proposer_k",),
    "runner_forwards_k": ("vllm.runner_forwards_k",),
    "dynamic_schedule": ("vllm.dynamic_schedule",),
    "scheduler_methods": ("vllm.scheduler", "vllm.scheduler_state", "vllm.finished_ids",
                          "vllm.engine_shutdown", "vllm.engine_kv_init", "vllm.worker_load"),
}


class HostCapabilityError(RuntimeError):
    """The host lacks something the upstream scheduler hook needs."""


@dataclass(frozen=True)
class HostCapabilities:
    """Facts about the installed host that decide which patches apply."""

    vllm_version: str | None
    # SchedulerOutput carries a per-step K (num_spec_tokens_to_schedule).
    scheduler_k_channel: bool
    # SpecDecodeBaseProposer.propose takes num_speculative_tokens (drafts K per call).
    proposer_takes_k: bool
    # GPUModelRunner.propose_draft_token_ids forwards the scheduler's K to the proposer.
    runner_forwards_k: bool
    # The scheduler has the built-in batch-size schedule (dynamic_sd_lookup), which also
    # switches off the padding of new decodes to 1 + max K.
    dynamic_schedule: bool
    # Scheduler methods and state the hook wraps and reads, EngineCore.shutdown and
    # _initialize_kv_caches (the start-up cost profile runs after it),
    # and Worker.load_model (where the runner check runs).
    scheduler_methods: bool
    missing: tuple[str, ...] = field(default_factory=tuple)

    @property
    def upstream_k_channel(self) -> bool:
        """True when the scheduler hook alone makes gamma reach the drafter."""
        return (
            self.scheduler_k_channel
            and self.proposer_takes_k
            and self.runner_forwards_k
            and self.dynamic_schedule
            and self.scheduler_methods
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for the doctor's JSON)."""
        return dataclasses.asdict(self)


def detect() -> HostCapabilities:
    """Evaluate the upstream requirement checks on the installed vLLM (imports it)."""
    from vllm_hust_vspec.host import abi

    report = abi.check_live("draft", True, hosts=(abi.VLLM,))
    host = report.host(abi.VLLM)
    if host is None or not host.importable:
        return HostCapabilities(None, False, False, False, False, False, ("vllm",))
    results = {r.check.id: r for tier in report.tiers for r in tier.results}
    values: dict[str, bool] = {}
    missing: list[str] = []
    for name, ids in _FIELDS.items():
        ok = True
        for check_id in ids:
            result = results.get(check_id)
            if result is None or not result.passed:
                ok = False
                missing.extend(result.missing if result is not None else (check_id,))
        values[name] = ok
    return HostCapabilities(vllm_version=host.version, missing=tuple(missing), **values)


def require_upstream(caps: HostCapabilities) -> None:
    """Fail closed when the upstream scheduler hook cannot drive gamma on this host."""
    if caps.upstream_k_channel:
        return
    raise HostCapabilityError(
        f"vSpec: this vLLM host ({caps.vllm_version or 'not importable'}) lacks what the "
        f"per-step gamma hook needs: {', '.join(caps.missing) or 'unknown'}. Upstream vLLM >= "
        f"0.31 (V1 runner) is supported directly; other hosts need the proposer backport "
        f"(see docs/hosts.md). Unset HUST_VSPEC_ENABLED to serve without vSpec."
    )


__all__ = [
    "HostCapabilities",
    "HostCapabilityError",
    "detect",
    "require_upstream",
]
