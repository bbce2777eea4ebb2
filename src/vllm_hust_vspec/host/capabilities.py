"""What this vLLM host can do, read from its own code (signatures, fields, source), not from
version strings.

Importing this module does not import vllm; :func:`detect` does.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

from vllm_hust_vspec.host.patching import PatchError, resolve

SCHEDULER = ("vllm.v1.core.sched.scheduler", "Scheduler")
ENGINE_CORE = ("vllm.v1.engine.core", "EngineCore")
SCHEDULER_OUTPUT = ("vllm.v1.core.sched.output", "SchedulerOutput")
BASE_PROPOSER = ("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer")
MODEL_RUNNER = ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
SPEC_CONFIG = ("vllm.config.speculative", "SpeculativeConfig")


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
    # Scheduler methods the hook wraps, present on the class.
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


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _try(module: str, name: str, missing: list[str]) -> Any:
    try:
        return resolve(module, name)
    except PatchError:
        missing.append(f"{module}.{name}")
        return None


def detect() -> HostCapabilities:
    """Inspect the installed vLLM (imports it)."""
    missing: list[str] = []
    try:
        import vllm

        version: str | None = getattr(vllm, "__version__", None)
    except ImportError:
        return HostCapabilities(None, False, False, False, False, False, ("vllm",))

    sched_out = _try(*SCHEDULER_OUTPUT, missing)
    k_channel = bool(
        sched_out is not None
        and dataclasses.is_dataclass(sched_out)
        and "num_spec_tokens_to_schedule" in {f.name for f in dataclasses.fields(sched_out)}
    )
    if sched_out is not None and not k_channel:
        missing.append("SchedulerOutput.num_spec_tokens_to_schedule")

    proposer = _try(*BASE_PROPOSER, missing)
    takes_k = False
    if proposer is not None and hasattr(proposer, "propose"):
        params = inspect.signature(proposer.propose).parameters
        takes_k = "num_speculative_tokens" in params
    if proposer is not None and not takes_k:
        missing.append("SpecDecodeBaseProposer.propose(num_speculative_tokens, ...)")

    runner = _try(*MODEL_RUNNER, missing)
    forwards_k = False
    if runner is not None:
        fn = getattr(runner, "propose_draft_token_ids", None)
        forwards_k = fn is not None and "num_spec_tokens_to_schedule" in _source(fn)
        if not forwards_k:
            missing.append("GPUModelRunner.propose_draft_token_ids reading the scheduler's K")

    scheduler = _try(*SCHEDULER, missing)
    dynamic = False
    methods = False
    if scheduler is not None:
        dynamic = "dynamic_sd_lookup" in _source(scheduler.__init__) and (
            "self.dynamic_sd_lookup[" in _source(scheduler.schedule)
        )
        if not dynamic:
            missing.append("Scheduler.dynamic_sd_lookup (built-in dynamic K schedule)")
        wanted = ("schedule", "update_from_output", "shutdown", "update_draft_token_ids")
        absent = [m for m in wanted if not callable(getattr(scheduler, m, None))]
        for name in ("max_num_active_reqs", "max_num_scheduled_tokens", "finished_req_ids"):
            if name not in _source(scheduler.__init__):
                absent.append(name)
        methods = not absent
        missing.extend(f"Scheduler.{m}" for m in absent)

    return HostCapabilities(
        vllm_version=version,
        scheduler_k_channel=k_channel,
        proposer_takes_k=takes_k,
        runner_forwards_k=forwards_k,
        dynamic_schedule=dynamic,
        scheduler_methods=methods,
        missing=tuple(missing),
    )


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
