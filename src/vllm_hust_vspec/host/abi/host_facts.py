"""Facts about the running host that the runner table and the runners' patches both read: the
platform, vLLM's own K channel, and whether the Model Runner V2 vSpec drives is there.

Below the process folders (engine, worker), so the runner table (host/abi/runners.py) can ask
them without importing a runner's patches.
"""

from __future__ import annotations

from vllm_hust_vspec.host.patching import resolve
from vllm_hust_vspec.host.wire import K_FIELD

# Model Runner V2: the runner and the speculator classes vSpec patches.
V2_RUNNER = ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")
V2_STANDALONE = ("vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator",
                 "StandaloneARSpeculator")
V2_TARGET_DEPENDENT = ("vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
                       "TargetDependentARSpeculator")
V2_BASE_SPECULATOR = ("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator")
V2_MULTI_MODULE_MTP = ("vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator",
                       "MultiModuleMTPSpeculator")
# Every speculator class defining its own propose() for the methods vSpec drives.
V2_SPECULATORS = (V2_STANDALONE, V2_TARGET_DEPENDENT, V2_MULTI_MODULE_MTP)


def is_ascend_platform() -> bool:
    """True when vLLM's current platform is the NPU one (imports vllm, not vllm_ascend)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return str(getattr(current_platform, "device_type", "")) == "npu"


def host_has_k_channel() -> bool:
    """True when this vLLM's SchedulerOutput has the per-step K field (upstream >= 0.31);
    False on hosts where vSpec carries its own channel (the vLLM-HUST core)."""
    import dataclasses

    from vllm.v1.core.sched.output import SchedulerOutput

    return K_FIELD in {f.name for f in dataclasses.fields(SchedulerOutput)}


def v2_runner_available() -> bool:
    """True when this vLLM has the Model Runner V2 vSpec drives: the runner and every
    speculator it patches import (an early V2 without them, such as the vLLM-HUST core's
    opt-in one, is not driven, and a worker that builds it stops: host/abi/runners.py)."""
    try:
        for target in (V2_RUNNER, V2_BASE_SPECULATOR, *V2_SPECULATORS):
            resolve(*target)
    except Exception:  # noqa: BLE001 - older hosts, or a V2 module that cannot import
        return False
    return True


__all__ = ["V2_BASE_SPECULATOR", "V2_MULTI_MODULE_MTP", "V2_RUNNER", "V2_SPECULATORS",
           "V2_STANDALONE", "V2_TARGET_DEPENDENT", "host_has_k_channel", "is_ascend_platform",
           "v2_runner_available"]
