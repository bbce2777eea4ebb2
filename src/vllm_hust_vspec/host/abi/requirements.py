"""The ABI vSpec's patches touch, per method, as data (one list; both doctor tiers and the
plugin's fail-closed check read it).

Names were read from upstream vLLM 0.32 and vllm-ascend 0.23.0.post1 / 0.30.0rc2; see
docs/hosts.md for which release line needs which patch. :func:`ascend_fork_checks` adds what
the doctor reports about a vllm-ascend checkout (the vLLM-Ascend-HUST fork included): facts
about per-step gamma and runner calls that do not fit the classes they call.
"""

from __future__ import annotations

from vllm_hust_vspec.host.abi.model import (
    CALL_FITS,
    CALL_KW,
    CLASS,
    FIELD,
    FUNCTION,
    METHOD,
    SELF_ATTR,
    SOURCE,
    Check,
    Probe,
)
from vllm_hust_vspec.host.wire import K_FIELD

VLLM = "vllm"
ASCEND = "vllm_ascend"
HOSTS = (VLLM, ASCEND)

# Doctor / settings methods -> vLLM speculative methods.
METHODS = ("draft", "eagle", "eagle3", "mtp")

# --- upstream vLLM names --------------------------------------------------------------------
SCHED_OUT_MOD = "vllm.v1.core.sched.output"
SCHED_MOD = "vllm.v1.core.sched.scheduler"
ASYNC_SCHED_MOD = "vllm.v1.core.sched.async_scheduler"
ENGINE_CORE_MOD = "vllm.v1.engine.core"
REQUEST_MOD = "vllm.v1.request"
WORKER_MOD = "vllm.v1.worker.gpu_worker"
BASE_PROPOSER_MOD = "vllm.v1.spec_decode.llm_base_proposer"
# Where SpecDecodeBaseProposer lives on hosts before the split (the vLLM-HUST core).
BASE_PROPOSER_OLD_MOD = "vllm.v1.spec_decode.eagle"
BASE_PROPOSER_MODS = (BASE_PROPOSER_MOD, BASE_PROPOSER_OLD_MOD)
RUNNER_MOD = "vllm.v1.worker.gpu_model_runner"
REJECTION_MOD = "vllm.v1.sample.rejection_sampler"
ENGINE_ARGS_MOD = "vllm.engine.arg_utils"
SPEC_CONFIG_MOD = "vllm.config.speculative"
V2_RUNNER_MOD = "vllm.v1.worker.gpu.model_runner"
V2_SPEC_MOD = "vllm.v1.worker.gpu.spec_decode.speculator"
V2_STANDALONE_MOD = "vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator"
V2_TARGET_DEP_MOD = "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"
V2_MULTI_MTP_MOD = "vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator"
V2_REJ_MOD = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
V2_REJ_UTILS_MOD = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"

# --- vllm-ascend names ----------------------------------------------------------------------
A_SPEC_PKG = "vllm_ascend.spec_decode"
A_BASE_MOD = "vllm_ascend.spec_decode.llm_base_proposer"
A_BASE = "AscendSpecDecodeBaseProposer"
A_EAGLE_MOD = "vllm_ascend.spec_decode.eagle_proposer"
A_EAGLE = "AscendEagleProposer"
A_DRAFT_MOD = "vllm_ascend.spec_decode.draft_proposer"
A_DRAFT = "AscendDraftModelProposer"
A_STEP3P5_MOD = "vllm_ascend.spec_decode.step3p5"
A_STEP3P5 = "AscendStep3p5MTPProposer"
A_RUNNER_MOD = "vllm_ascend.worker.model_runner_v1"
A_RUNNER = "NPUModelRunner"
A_REJ_MOD = "vllm_ascend.sample.rejection_sampler"
A_REJ = "AscendRejectionSampler"
A_GRAPH_MOD = "vllm_ascend.compilation.acl_graph"
A_GRAPH = "ACLGraphWrapper"
# The fork's separate native engine (PEARL, with SpecRhythm's per-request TPOT budgets).
A_PEARL_API_MOD = "vllm_ascend.spec_decode.pearl.api"
A_PEARL_RHYTHM_MOD = "vllm_ascend.spec_decode.pearl.spec_rhythm"
FORWARD_CONTEXT_MOD = "vllm.forward_context"
# vLLM's graph dispatcher, which the NPU runner uses: graph-per-gamma patches it on Ascend.
A_DISPATCHER_MOD = "vllm.v1.cudagraph_dispatcher"
A_DISPATCHER = "CudagraphDispatcher"

# Labels of the two ways gamma reaches the drafter (checks with one alternative each).
NATIVE_K = "vLLM's K channel"
OWN_K = "vSpec's own K channel"

# The parameter a K-aware _propose takes first, and the one the backport reads gamma through.
K_PARAM = "num_speculative_tokens"
SCHED_OUT_PARAM = "scheduler_output"

# Switches (settings) whose host capability the doctor checks.
FEATURES = ("graph_per_gamma", "mtp_strict_graph", "acceptance")


def _p(kind: str, module: str, cls: str | None = None, name: str | None = None,
       *params: str, bases: tuple[str, ...] = (), callee: str | None = None,
       owner: str | None = None) -> Probe:
    return Probe(kind=kind, module=module, cls=cls, name=name, params=tuple(params),
                 bases=bases, callee=callee, owner=owner)


def upstream_checks(method: str, adaptive: bool, *, ascend: bool) -> list[Check]:
    """Checks on upstream vLLM. ``ascend``: the worker side is vllm-ascend's, not vLLM's."""
    out = [
        Check.of("vllm.scheduler", VLLM, "the scheduler hook wraps these Scheduler methods",
                 *(_p(METHOD, SCHED_MOD, "Scheduler", m) for m in
                   ("__init__", "schedule", "update_from_output", "update_draft_token_ids",
                    "shutdown"))),
        Check(id="vllm.scheduler_state", host=VLLM,
              why="the hook reads the scheduler's token budget, requests and queues, and the "
                  "refill hold lowers the admission limit schedule() reads "
                  "(max_num_active_reqs upstream, max_num_running_reqs on the vLLM-HUST core)",
              alternatives=tuple(
                  (*(_p(SOURCE, SCHED_MOD, "Scheduler", "__init__", attr) for attr in
                     (limit, "max_num_scheduled_tokens", "requests", "waiting", "running",
                      "finished_req_ids")),
                   _p(SOURCE, SCHED_MOD, "Scheduler", "schedule", limit))
                  for limit in ("max_num_active_reqs", "max_num_running_reqs")),
              variants=("admission limit max_num_active_reqs",
                        "admission limit max_num_running_reqs")),
        Check.of("vllm.worker_load", VLLM,
                 "the worker checks which runner it builds (Model Runner V2 or V1) before "
                 "its model loads",
                 _p(METHOD, WORKER_MOD, "Worker", "load_model")),
        Check.of("vllm.engine_shutdown", VLLM,
                 "the trace is closed before EngineCore tears down the executor",
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "shutdown")),
        Check.of("vllm.engine_post_step", VLLM,
                 "EngineCore.post_step is wrapped on every host (after a step that skipped "
                 "the drafter it does nothing where the zero-draft fast path applies: there "
                 "are no drafts to fetch; it runs vLLM's own everywhere else)",
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "post_step", "model_executed")),
        Check.of("vllm.engine_kv_init", VLLM,
                 "EngineCore._initialize_kv_caches warms the model before the scheduler is "
                 "built (the start-up cost profile runs right after it)",
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "_initialize_kv_caches",
                    "vllm_config"),
                 _p(SOURCE, ENGINE_CORE_MOD, "EngineCore", "__init__",
                    "_initialize_kv_caches")),
        Check.of("vllm.startup_calibration", VLLM,
                 "the start-up calibration runs real steps of its own requests through the "
                 "built engine before it serves (host/engine/cost_prior/calibration.py)",
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "__init__"),
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCoreProc", "run_busy_loop"),
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "step"),
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "add_request", "request"),
                 _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "abort_requests", "request_ids"),
                 _p(METHOD, SCHED_MOD, "Scheduler", "has_requests"),
                 _p(METHOD, REQUEST_MOD, "Request", "__init__", "request_id",
                    "prompt_token_ids", "sampling_params", "pooling_params")),
        Check.of("vllm.rejection_sampler", VLLM,
                 "verification is ragged per request (acceptance modes patch around it)",
                 _p(CLASS, REJECTION_MOD, "RejectionSampler"),
                 _p(METHOD, REJECTION_MOD, "RejectionSampler", "forward", "metadata",
                    "draft_probs", "logits", "sampling_metadata")),
    ]
    if adaptive:
        out += [
            Check(id="vllm.k_channel", host=VLLM,
                  why="gamma travels to every rank in SchedulerOutput."
                      "num_spec_tokens_to_schedule: vLLM's field, or set by vSpec's own "
                      "channel on each output Scheduler.schedule builds (hosts without it)",
                  alternatives=(
                      (_p(FIELD, SCHED_OUT_MOD, "SchedulerOutput", K_FIELD),),
                      (_p(CLASS, SCHED_OUT_MOD, "SchedulerOutput"),
                       _p(SOURCE, SCHED_MOD, "Scheduler", "schedule", "SchedulerOutput")),
                  ), variants=(NATIVE_K, OWN_K)),
            Check(id="vllm.dynamic_schedule", host=VLLM,
                  why="each step verifies the drafts made after the previous one: vLLM's "
                      "dynamic_sd_lookup (no padding to 1 + max K), or, without it, a "
                      "schedule() that schedules each request's own spec_token_ids",
                  alternatives=(
                      (_p(SOURCE, SCHED_MOD, "Scheduler", "__init__", "dynamic_sd_lookup"),
                       _p(SOURCE, SCHED_MOD, "Scheduler", "schedule", "dynamic_sd_lookup")),
                      (_p(SOURCE, SCHED_MOD, "Scheduler", "schedule", "spec_token_ids"),
                       _p(METHOD, SCHED_MOD, "Scheduler", "update_draft_token_ids",
                          "draft_token_ids")),
                  ), variants=(NATIVE_K, OWN_K)),
            Check(id="vllm.async_k", host=VLLM,
                  why="under async scheduling each step's draft placeholders have the step's "
                      "gamma: sized by vLLM from num_spec_tokens_to_schedule, or the fixed "
                      "_spec_token_placeholders resized by vSpec after schedule()",
                  alternatives=(
                      (_p(SOURCE, ASYNC_SCHED_MOD, "AsyncScheduler", "_update_after_schedule",
                          K_FIELD),),
                      (_p(SELF_ATTR, ASYNC_SCHED_MOD, "AsyncScheduler",
                          "_spec_token_placeholders"),
                       _p(SOURCE, ASYNC_SCHED_MOD, "AsyncScheduler", "_update_after_schedule",
                          "_spec_token_placeholders")),
                  ), variants=(NATIVE_K, OWN_K), applies_if=ASYNC_SCHED_MOD),
            Check.of("vllm.finished_ids", VLLM,
                     "a sticky gamma-0 cohort ends when its last request is freed: "
                     "Scheduler._free_request records it in finished_req_ids",
                     _p(SOURCE, SCHED_MOD, "Scheduler", "_free_request", "finished_req_ids")),
        ]
        if not ascend:
            out += [
                Check(id="vllm.proposer_k", host=VLLM,
                      why="the proposer drafts the step's gamma: it takes "
                          "num_speculative_tokens, or vSpec sets the attribute its draft "
                          "loop reads for the call (host/worker/k_channel.py)",
                      alternatives=(
                          (_p(METHOD, BASE_PROPOSER_MOD, "SpecDecodeBaseProposer", "propose",
                              K_PARAM),),
                          *((_p(SELF_ATTR, mod, "SpecDecodeBaseProposer", K_PARAM),
                             _p(SOURCE, mod, "SpecDecodeBaseProposer", "propose", K_PARAM))
                            for mod in BASE_PROPOSER_MODS),
                      ), variants=(NATIVE_K, OWN_K, OWN_K)),
                Check(id="vllm.startup_profile", host=VLLM,
                      why="the start-up cost profile times the V1 runner's dummy batches and "
                          "the proposer's dummy drafting on every worker (collective_rpc)",
                      alternatives=tuple(
                          (_p(METHOD, RUNNER_MOD, "GPUModelRunner", "_dummy_run", "num_tokens"),
                           _p(METHOD, mod, "SpecDecodeBaseProposer", "dummy_run",
                              "num_tokens"))
                          for mod in BASE_PROPOSER_MODS)),
                Check(id="vllm.runner_forwards_k", host=VLLM,
                      why="the V1 runner passes the scheduler's K to propose(), or vSpec's "
                          "wrapper of propose_draft_token_ids sets the drafter's K from the "
                          "scheduler output it receives",
                      alternatives=(
                          (_p(SOURCE, RUNNER_MOD, "GPUModelRunner", "propose_draft_token_ids",
                              K_FIELD),),
                          (_p(METHOD, RUNNER_MOD, "GPUModelRunner", "propose_draft_token_ids",
                              "scheduler_output"),
                           _p(SOURCE, RUNNER_MOD, "GPUModelRunner", "propose_draft_token_ids",
                              "drafter")),
                      ), variants=(NATIVE_K, OWN_K)),
                Check.of("vllm.sync_draft_copy", VLLM,
                         "with synchronous scheduling the runner copies each step's drafts "
                         "into a [max_num_reqs, max K] CPU buffer; vSpec narrows it to the "
                         "drafts' width so gamma below max K reaches the scheduler as drafted",
                         _p(SELF_ATTR, RUNNER_MOD, "GPUModelRunner", "draft_token_ids_cpu"),
                         _p(SOURCE, RUNNER_MOD, "GPUModelRunner",
                            "_copy_draft_token_ids_to_cpu", "draft_token_ids_cpu"),
                         _p(SOURCE, RUNNER_MOD, "GPUModelRunner", "_get_draft_token_ids_cpu",
                            "draft_token_ids_cpu"),
                         applies_if=_p(METHOD, RUNNER_MOD, "GPUModelRunner",
                                       "_copy_draft_token_ids_to_cpu")),
                Check.of("vllm.declared_schedule", VLLM,
                         "vSpec declares gamma 0..max as a dynamic schedule where vLLM builds "
                         "the speculative config, so vLLM sizes graphs per verify width; a "
                         "host without the field captures target graphs for 1 + max K only "
                         "(steps of smaller gamma run piecewise or eager: same outputs)",
                         _p(METHOD, ENGINE_ARGS_MOD, "EngineArgs",
                            "create_speculative_config"),
                         _p(FIELD, SPEC_CONFIG_MOD, "SpeculativeConfig",
                            "num_speculative_tokens_per_batch_size"),
                         required=False),
                Check(id="vllm.dp_lockstep", host=VLLM,
                      why="under MoE data parallel the ranks agree on one gamma per lockstep "
                          "step (host/engine/dp_agreement.py): DPEngineCoreProc's own loop is "
                          "wrapped, its DP store (from stateless_init_dp_group) carries "
                          "vSpec's gloo group, an idle rank's EngineCore.execute_dummy_batch "
                          "runs the worker's dummy batch through collective_rpc with the "
                          "proposer's num_speculative_tokens set to the agreed gamma, which "
                          "its dummy_run drafts (without these, MoE data parallel with "
                          "adaptive gamma stops at start-up naming the missing piece)",
                      alternatives=tuple(
                          (_p(METHOD, ENGINE_CORE_MOD, "DPEngineCoreProc", "run_busy_loop"),
                           _p(SOURCE, ENGINE_CORE_MOD, "DPEngineCoreProc",
                              "_init_data_parallel", "dp_store"),
                           _p(METHOD, ENGINE_CORE_MOD, "EngineCore", "execute_dummy_batch"),
                           _p(METHOD, WORKER_MOD, "Worker", "execute_dummy_batch"),
                           _p(SOURCE, mod, "SpecDecodeBaseProposer", "dummy_run", K_PARAM))
                          for mod in BASE_PROPOSER_MODS),
                      required=False,
                      applies_if=_p(CLASS, ENGINE_CORE_MOD, "DPEngineCoreProc")),
                Check(id="vllm.zero_fast_path", host=VLLM,
                      why="sticky gamma-0 steps run as plain target steps: the runner decides "
                          "the speculative path from self.speculative_config in execute_model "
                          "and sample_tokens (and _prepare_inputs reads it, or the step's "
                          "scheduled drafts), and EngineCore.post_step, skipped after such a "
                          "step, fetches the drafts from the worker (gated by "
                          "check_for_draft_tokens, or use_spec_decode on the vLLM-HUST core)",
                      alternatives=tuple(
                          (_p(SOURCE, RUNNER_MOD, "GPUModelRunner", "_prepare_inputs", spec),
                           _p(SOURCE, RUNNER_MOD, "GPUModelRunner", "execute_model",
                              "speculative_config"),
                           _p(SOURCE, RUNNER_MOD, "GPUModelRunner", "sample_tokens",
                              "speculative_config"),
                           *(_p(SOURCE, ENGINE_CORE_MOD, "EngineCore", "post_step", token)
                             for token in ("take_draft_token_ids", gate, "async_scheduling")),
                           _p(SOURCE, ENGINE_CORE_MOD, "EngineCore", "__init__", "batch_queue"))
                          for spec, gate in (("speculative_config", "check_for_draft_tokens"),
                                             ("scheduled_spec_decode_tokens",
                                              "use_spec_decode"))),
                      variants=("upstream vLLM", "vLLM-HUST core")),
            ]
    if not ascend:
        out += v2_checks()
    return out


# vLLM builds Model Runner V2 by itself (its CUDA default since 0.32) where VllmConfig decides
# the runner; where V2 is only an opt-in environment switch (the vLLM-HUST core) vSpec does
# not drive it, and a worker that builds it stops before its model loads (host/abi/runners.py).
V2_BUILT = _p(METHOD, "vllm.config.vllm", "VllmConfig", "use_v2_model_runner")


def v2_checks() -> list[Check]:
    """What host/worker/v2/runner.py patches (Model Runner V2 hosts only)."""
    propose = ("propose", K_PARAM, "dummy_run")
    return [
        Check.of("vllm.v2_runner", VLLM,
                 "Model Runner V2 keeps the step in execute_model and drafts in sample_tokens "
                 "through self.speculator.propose(num_speculative_tokens=K)",
                 _p(METHOD, V2_RUNNER_MOD, "GPUModelRunner", "execute_model",
                    "scheduler_output"),
                 _p(CALL_KW, V2_RUNNER_MOD, "GPUModelRunner", "sample_tokens", K_PARAM,
                    callee="propose"),
                 _p(METHOD, V2_RUNNER_MOD, "GPUModelRunner", "take_draft_token_ids"),
                 applies_if=V2_BUILT),
        Check.of("vllm.v2_speculators", VLLM,
                 "the sticky skip returns the speculator's draft buffer from each "
                 "speculator's own propose(); the draft model's decode loop reads "
                 "num_speculative_steps",
                 _p(METHOD, V2_STANDALONE_MOD, "StandaloneARSpeculator", *propose),
                 _p(METHOD, V2_TARGET_DEP_MOD, "TargetDependentARSpeculator", *propose),
                 _p(METHOD, V2_MULTI_MTP_MOD, "MultiModuleMTPSpeculator", *propose),
                 _p(SELF_ATTR, V2_SPEC_MOD, "DraftModelSpeculator", "draft_tokens"),
                 _p(SOURCE, V2_STANDALONE_MOD, "StandaloneARSpeculator",
                    "_multi_step_decode", "num_speculative_steps"),
                 applies_if=V2_BUILT),
        Check.of("vllm.v2_draft_logits", VLLM,
                 "the padded-vocabulary guard masks DraftModelSpeculator.compute_draft_logits, "
                 "which sample_draft reads",
                 _p(METHOD, V2_SPEC_MOD, "DraftModelSpeculator", "compute_draft_logits",
                    "hidden_states"),
                 _p(SOURCE, V2_SPEC_MOD, "DraftModelSpeculator", "sample_draft",
                    "compute_draft_logits"),
                 applies_if=V2_BUILT),
        Check.of("vllm.v2_rejection", VLLM,
                 "relaxed acceptance wraps the rejection_sample that RejectionSampler._verify "
                 "calls by name, inside GPUModelRunner.sample (the greedy rows' layout: "
                 "rows cu[r]..cu[r+1]-1, drafts one row ahead)",
                 _p(FUNCTION, V2_REJ_UTILS_MOD, None, "rejection_sample", "target_logits",
                    "draft_sampled", "cu_num_logits", "pos", "idx_mapping", "temperature",
                    "num_speculative_steps", "synthetic_conditional_rates"),
                 _p(SOURCE, V2_REJ_MOD, "RejectionSampler", "_verify", "rejection_sample"),
                 _p(METHOD, V2_RUNNER_MOD, "GPUModelRunner", "sample", "input_batch"),
                 applies_if=V2_BUILT),
    ]


def _ascend_proposer_class(method: str) -> tuple[str, str, tuple[str, ...]]:
    if method == "draft":
        return A_DRAFT_MOD, A_DRAFT, ("DraftModelProposer", A_BASE)
    return A_EAGLE_MOD, A_EAGLE, ("EagleProposer", A_BASE)


def ascend_checks(method: str, adaptive: bool, features: tuple[str, ...] = ()) -> list[Check]:
    """Checks on vllm-ascend for ``method`` (draft | eagle | eagle3 | mtp)."""
    mod, cls, bases = _ascend_proposer_class(method)
    out = [
        Check.of("ascend.spec_decode_factory", ASCEND,
                 "vllm-ascend builds the proposer through get_spec_decode_method",
                 _p(FUNCTION, A_SPEC_PKG, None, "get_spec_decode_method", "method",
                    "vllm_config", "device", "runner")),
        Check.of("ascend.proposer_class", ASCEND,
                 f"{method} drafts through {cls}, which must inherit the Ascend base proposer",
                 _p(CLASS, mod, cls, bases=bases),
                 _p(CLASS, A_BASE_MOD, A_BASE, bases=("SpecDecodeBaseProposer",))),
        Check.of("ascend.rejection_sampler", ASCEND,
                 "the acceptance wiring wraps the module-level rejection_sample used by "
                 "AscendRejectionSampler.forward",
                 _p(METHOD, A_REJ_MOD, A_REJ, "forward", "metadata", "draft_probs", "logits",
                    "sampling_metadata"),
                 _p(FUNCTION, A_REJ_MOD, None, "rejection_sample", "draft_token_ids",
                    "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens", "draft_probs",
                    "bonus_token_ids", "sampling_metadata"),
                 _p(SOURCE, A_REJ_MOD, A_REJ, "forward", "rejection_sample")),
    ]
    if adaptive:
        # _propose resolved through the MRO must be the Ascend base's (or a subclass's), not an
        # upstream class's: the backport patches the Ascend base class.
        native = (
            _p(METHOD, mod, cls, "_propose", K_PARAM),
        )
        backport = (
            _p(METHOD, mod, cls, "_propose", SCHED_OUT_PARAM, owner=A_BASE),
            _p(SELF_ATTR, A_BASE_MOD, A_BASE, "num_speculative_tokens"),
            _p(CALL_KW, A_RUNNER_MOD, A_RUNNER, "propose_draft_token_ids", SCHED_OUT_PARAM,
               callee="_propose"),
        )
        out.append(Check(
            id="ascend.k_channel", host=ASCEND,
            why="each step drafts the scheduler's gamma: natively (_propose takes "
                "num_speculative_tokens) or through vSpec's backport (reads gamma from the "
                "scheduler_output the runner passes to _propose)",
            alternatives=(native, backport), variants=("native", "backport"),
        ))
        out.append(Check.of(
            "ascend.runner_propose", ASCEND,
            "the NPU runner calls the drafter's _propose once per step",
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "propose_draft_token_ids", "scheduler_output"),
            _p(CALL_KW, A_RUNNER_MOD, A_RUNNER, "propose_draft_token_ids",
               "common_attn_metadata", callee="_propose"),
        ))
        out.append(Check.of(
            "ascend.sync_draft_copy", ASCEND,
            "with synchronous scheduling the NPU runner copies each step's drafts into a "
            "[max_num_reqs, max K] CPU buffer of its own; vSpec narrows the copy to the "
            "drafts' width so gamma below max K reaches the scheduler as drafted",
            _p(SELF_ATTR, A_RUNNER_MOD, A_RUNNER, "draft_token_ids_cpu"),
            _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_copy_draft_token_ids_to_cpu",
               "draft_token_ids_cpu"),
            applies_if=_p(METHOD, A_RUNNER_MOD, A_RUNNER, "_copy_draft_token_ids_to_cpu"),
        ))
        # The K backport's padding rule (host/worker/k_channel.py reads_stride_max_k): under async
        # scheduling the next frame reads this frame's drafts in _prepare_input_ids with row
        # stride num_spec_tokens (max K; vLLM 0.23), unless the runner keeps the last draft
        # width in prev_num_spec_tokens (vLLM >= 0.31; vllm-ascend 0.30 sets it too). vSpec
        # pads gamma drafts to max K exactly when the runner lacks that attribute.
        out.append(Check(
            id="ascend.async_draft_stride", host=ASCEND,
            why="under async scheduling the next frame reads the previous frame's drafts in "
                "_prepare_input_ids, with the stride of the last draft tensor "
                "(prev_num_spec_tokens) or else max K (num_spec_tokens); the K backport pads "
                "gamma drafts to max K exactly when the runner has no prev_num_spec_tokens",
            alternatives=(
                (_p(SELF_ATTR, A_RUNNER_MOD, A_RUNNER, "prev_num_spec_tokens"),
                 _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_prepare_input_ids",
                    "prev_num_spec_tokens")),
                (_p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_prepare_input_ids", "num_spec_tokens"),),
            ),
            variants=("last draft width", "stride max K: drafts padded"),
        ))
        if method == "mtp":
            out.append(Check(
                id="ascend.step3p5_mtp", host=ASCEND,
                why="Step3p5 MTP has its own _propose; vSpec's backport does not cover it "
                    "(fixed K for Step3p5 targets unless the host passes K natively)",
                alternatives=((_p(METHOD, A_STEP3P5_MOD, A_STEP3P5, "_propose", K_PARAM),),),
                required=False,
            ))
    if "graph_per_gamma" in features or "mtp_strict_graph" in features:
        out.append(Check.of(
            "ascend.graph_dispatch", ASCEND,
            "graph modes: the runner decides FULL/PIECEWISE/eager per batch here, and the "
            "draft graph is the proposer's _runnable",
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "_determine_batch_execution_and_padding",
               "num_tokens", "num_reqs", "num_scheduled_tokens_np",
               "max_num_scheduled_tokens"),
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "capture_model"),
            _p(METHOD, A_BASE_MOD, A_BASE, "dummy_run", "num_tokens", "aclgraph_runtime_mode",
               "batch_descriptor"),
            _p(SELF_ATTR, A_BASE_MOD, A_BASE, "_runnable"),
            _p(CLASS, A_GRAPH_MOD, "ACLGraphWrapper"),
        ))
    if "graph_per_gamma" in features:
        out.append(Check.of(
            "ascend.draft_graph_params", ASCEND,
            "per-gamma draft graphs need their own graph parameters: the module globals that "
            "get_graph_params / get_draft_graph_params return are replaced by one GraphParams "
            "per verify width / gamma",
            _p(FUNCTION, A_GRAPH_MOD, None, "set_draft_graph_params"),
            _p(FUNCTION, A_GRAPH_MOD, None, "get_draft_graph_params"),
            _p(FUNCTION, A_GRAPH_MOD, None, "update_full_graph_params"),
            _p(FIELD, A_GRAPH_MOD, "GraphParams", "attn_params"),
            _p(FIELD, A_GRAPH_MOD, "GraphParams", "handles"),
            _p(FUNCTION, A_GRAPH_MOD, None, "get_graph_params"),
        ))
        out.append(Check.of(
            "ascend.graph_widths", ASCEND,
            "target decode graphs per verify width: the runner resolves its graph mode and "
            "sizes in _check_and_update_cudagraph_mode, captures each key through "
            "_warmup_and_capture -> _dummy_run (shaped by uniform_decode_query_len), pads FIA "
            "query_start_loc by it, and vLLM's dispatcher pads and keys by it",
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "_check_and_update_cudagraph_mode",
               "attention_backends", "kv_cache_groups"),
            _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_check_and_update_cudagraph_mode",
               "set_graph_params"),
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "_warmup_and_capture", "desc",
               "cudagraph_runtime_mode"),
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "_dummy_run", "num_tokens",
               "cudagraph_runtime_mode", "uniform_decode"),
            _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_dummy_run", "uniform_decode_query_len"),
            _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_determine_batch_execution_and_padding",
               "uniform_decode_query_len"),
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "_pad_query_start_loc_for_fia",
               "query_start_loc", "num_tokens_padded", "num_reqs_padded", "num_reqs"),
            _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_pad_query_start_loc_for_fia",
               "uniform_decode_query_len"),
            _p(METHOD, A_RUNNER_MOD, A_RUNNER, "propose_draft_token_ids", "scheduler_output",
               "target_model_batch_desc"),
            _p(METHOD, A_DISPATCHER_MOD, A_DISPATCHER, "dispatch", "num_tokens",
               "uniform_decode", "has_lora"),
            _p(METHOD, A_DISPATCHER_MOD, A_DISPATCHER, "_create_padded_batch_descriptor",
               "num_tokens", "uniform_decode", "has_lora"),
            _p(SOURCE, A_DISPATCHER_MOD, A_DISPATCHER, "_create_padded_batch_descriptor",
               "_bs_to_padded_graph_size"),
            _p(SOURCE, A_DISPATCHER_MOD, A_DISPATCHER, "_create_padded_batch_descriptor",
               "uniform_decode_query_len"),
            _p(METHOD, A_DISPATCHER_MOD, A_DISPATCHER, "add_cudagraph_key", "runtime_mode",
               "batch_descriptor"),
            _p(METHOD, A_DISPATCHER_MOD, A_DISPATCHER, "_get_lora_cases"),
            _p(SELF_ATTR, A_DISPATCHER_MOD, A_DISPATCHER, "cudagraph_keys"),
        ))
        out.append(Check.of(
            "ascend.graph_state", ASCEND,
            "the per-width graph router reads the runner's uniform_decode_query_len and "
            "cudagraph_dispatcher, the forward context's batch descriptor and runtime mode, "
            "and checks that acl_graph's getters return the module globals _graph_params / "
            "_draft_graph_params it replaces per width",
            _p(SELF_ATTR, A_RUNNER_MOD, A_RUNNER, "uniform_decode_query_len"),
            _p(SELF_ATTR, A_RUNNER_MOD, A_RUNNER, "cudagraph_dispatcher"),
            _p(FUNCTION, FORWARD_CONTEXT_MOD, None, "get_forward_context"),
            _p(FUNCTION, FORWARD_CONTEXT_MOD, None, "is_forward_context_available"),
            _p(FIELD, FORWARD_CONTEXT_MOD, "ForwardContext", "batch_descriptor"),
            _p(FIELD, FORWARD_CONTEXT_MOD, "ForwardContext", "cudagraph_runtime_mode"),
            _p(SOURCE, A_GRAPH_MOD, None, "get_graph_params", "_graph_params"),
            _p(SOURCE, A_GRAPH_MOD, None, "get_draft_graph_params", "_draft_graph_params"),
        ))
        out.append(Check.of(
            "ascend.draft_capture", ASCEND,
            "each key's draft graph is captured from the runner's _dummy_run through "
            "self.drafter.dummy_run(aclgraph_runtime_mode=...); under combined FULL vSpec "
            "runs that one call once per gamma with a draft graph at the key",
            _p(SOURCE, A_RUNNER_MOD, A_RUNNER, "_dummy_run", "drafter"),
            _p(CALL_KW, A_RUNNER_MOD, A_RUNNER, "_dummy_run", "aclgraph_runtime_mode",
               callee="dummy_run"),
        ))
        graph_init = _p(METHOD, A_GRAPH_MOD, "ACLGraphWrapper", "__init__", "runnable",
                        "vllm_config", "runtime_mode", "use_eagle", "enable_enpu")
        merged = _p(METHOD, A_BASE_MOD, A_BASE, "_run_merged_draft", "num_input_tokens",
                    "batch_size", "multi_steps_attn_metadata")
        dispatch = _p(SOURCE, A_BASE_MOD, A_BASE, "_propose", "cudagraph_dispatcher")
        out.append(Check(
            id="ascend.draft_graph_per_gamma", host=ASCEND,
            why="one merged draft graph per gamma: the proposer's _runnable is an "
                "ACLGraphWrapper around _run_merged_draft, whose step loop and capture shape "
                "follow the step attributes vSpec sets to gamma for each capture: "
                "num_draft_steps and num_speculative_tokens (vLLM-Ascend-HUST) or "
                "num_speculative_tokens alone",
            alternatives=(
                (graph_init, merged,
                 _p(SELF_ATTR, A_BASE_MOD, A_BASE, "num_draft_steps"),
                 _p(SOURCE, A_BASE_MOD, A_BASE, "_run_merged_draft", "num_draft_steps"),
                 _p(SOURCE, A_BASE_MOD, A_BASE, "dummy_run", "num_draft_steps"),
                 _p(SOURCE, A_BASE_MOD, A_BASE, "dummy_run", "num_speculative_tokens"),
                 dispatch),
                (graph_init, merged,
                 _p(SOURCE, A_BASE_MOD, A_BASE, "_run_merged_draft", "num_speculative_tokens"),
                 _p(SOURCE, A_BASE_MOD, A_BASE, "dummy_run", "num_speculative_tokens"),
                 dispatch),
            ),
            variants=("steps: num_draft_steps and num_speculative_tokens",
                      "steps: num_speculative_tokens"),
        ))
    return out


def _fits(method: str, callee: str, target: tuple[str, str, str]) -> Probe:
    """The NPU runner's ``method`` calls ``callee`` only as ``target`` accepts."""
    return _p(CALL_FITS, A_RUNNER_MOD, A_RUNNER, method, *target, callee=callee)


def ascend_fork_checks() -> list[Check]:
    """What a vllm-ascend checkout does with per-step gamma, read from its code: which K
    channel its runner and proposer imply, whether its runner's calls fit the classes it
    calls (a tree mixing code lines does not), and the facts that decide what a step at
    gamma below the configured K really runs. Facts never fail; mismatches warn."""
    runner = (A_RUNNER_MOD, A_RUNNER)
    base = (A_BASE_MOD, A_BASE)

    def r(kind: str, name: str, *params: str, callee: str | None = None) -> Probe:
        return _p(kind, *runner, name, *params, callee=callee)

    def b(kind: str, name: str, *params: str) -> Probe:
        return _p(kind, *base, name, *params)

    return [
        Check.fact_of(
            "ascend.k_shape.proposer", ASCEND,
            "the K channel the proposer's _propose signature implies (vSpec decides by it: "
            "host/worker/ascend/proposer.py)",
            (f"K-taking _propose({K_PARAM}, ...): gamma arrives natively, vSpec patches "
             "nothing", (b(METHOD, "_propose", K_PARAM),)),
            (f"K-less _propose(..., {SCHED_OUT_PARAM}): vSpec's backport reads gamma from "
             f"{SCHED_OUT_PARAM}", (b(METHOD, "_propose", SCHED_OUT_PARAM),)),
            (f"_propose takes neither {K_PARAM} nor {SCHED_OUT_PARAM}: gamma cannot reach "
             "the drafter", ()),
        ),
        Check.fact_of(
            "ascend.k_shape.runner", ASCEND,
            "what the NPU runner hands the drafter each step",
            (f"the runner passes K: _propose({K_PARAM}=scheduler_output."
             "num_spec_tokens_to_schedule, ...)",
             (r(CALL_KW, "propose_draft_token_ids", K_PARAM, callee="_propose"),)),
            (f"the runner passes {SCHED_OUT_PARAM} only (no K)",
             (r(CALL_KW, "propose_draft_token_ids", SCHED_OUT_PARAM, callee="_propose"),)),
            ("the runner calls no _propose", ()),
        ),
        Check.of(
            "ascend.coherent.runner_propose", ASCEND,
            "the runner's _propose call must fit the proposer's signature (a runner and a "
            "proposer from different code lines do not; vSpec's K backport takes a "
            f"{K_PARAM} keyword the K-less _propose lacks, any other mismatch is the host's "
            "TypeError)",
            _fits("propose_draft_token_ids", "_propose", (*base, "_propose")),
            required=False),
        Check.of(
            "ascend.coherent.rejection_sampler", ASCEND,
            "the runner builds AscendRejectionSampler with the arguments its __init__ takes "
            "(else the host fails when it sets up the drafter)",
            _fits("_set_up_drafter", A_REJ, (A_REJ_MOD, A_REJ, "__init__")),
            required=False),
        Check.of(
            "ascend.coherent.graph_wrapper", ASCEND,
            "the runner wraps its model in ACLGraphWrapper with keywords its __init__ takes "
            "(else the host fails when it loads the model under FULL graphs)",
            _fits("load_model", A_GRAPH, (A_GRAPH_MOD, A_GRAPH, "__init__")),
            required=False),
        Check.fact_of(
            "ascend.gamma.skip_drafting", ASCEND,
            "a step without drafting publishes placeholder drafts the next step scatters",
            ("_skip_drafting publishes zero drafts at the configured width (num_spec_tokens)",
             (r(METHOD, "_skip_drafting", "scheduler_output"),
              r(SOURCE, "_skip_drafting", "num_spec_tokens"))),
            ("_skip_drafting present", (r(METHOD, "_skip_drafting"),)),
            ("no _skip_drafting", ()),
        ),
        Check.fact_of(
            "ascend.gamma.draft_trim", ASCEND,
            "who cuts each request's drafts before the scheduler sees them",
            ("take_draft_token_ids cuts each request to drafter.dynamic_spec."
             "num_verify_tokens (clamped to the configured K)",
             (r(SOURCE, "take_draft_token_ids", "dynamic_spec"),
              r(SOURCE, "take_draft_token_ids", "num_verify_tokens"))),
            ("take_draft_token_ids keeps every drafted token", ()),
        ),
        Check.fact_of(
            "ascend.gamma.rejection_init", ASCEND,
            "the rejection sampler's constructor (its config decides block verification)",
            ("AscendRejectionSampler(sampler, speculative_config, device)",
             (_p(METHOD, A_REJ_MOD, A_REJ, "__init__", "sampler", "speculative_config",
                 "device"),)),
            ("AscendRejectionSampler(sampler)",
             (_p(METHOD, A_REJ_MOD, A_REJ, "__init__", "sampler"),)),
            ("another AscendRejectionSampler constructor", ()),
        ),
        Check.fact_of(
            "ascend.gamma.graph_key", ASCEND,
            "what selects a captured ACL graph: a graph keyed without K replays the steps "
            "unrolled at capture whatever gamma the step asks for",
            ("ACLGraphWrapper keys graphs by the forward context's BatchDescriptor only "
             "(K is not in the key)",
             (_p(SOURCE, A_GRAPH_MOD, A_GRAPH, "__call__", "batch_descriptor"),)),
            ("ACLGraphWrapper keyed otherwise", ()),
        ),
        Check.fact_of(
            "ascend.gamma.uniform_decode", ASCEND,
            "which steps the target's FULL decode graphs take",
            ("FULL_DECODE_ONLY needs uniform_decode_query_len (1 + configured K) tokens a "
             "request: a step at gamma < K leaves the graph",
             (r(SOURCE, "_determine_batch_execution_and_padding",
                "uniform_decode_query_len"),)),
            ("uniform decode decided otherwise", ()),
        ),
        Check.fact_of(
            "ascend.gamma.draft_steps", ASCEND,
            "what the draft loops count (fixed in __init__, never resized)",
            ("draft loops count num_draft_steps (tree depth, else K; set in __init__)",
             (b(SELF_ATTR, "num_draft_steps"),
              b(SOURCE, "_run_merged_draft", "num_draft_steps"))),
            ("draft loops count num_speculative_tokens",
             (b(SOURCE, "_run_merged_draft", "num_speculative_tokens"),)),
            ("no merged draft loop", ()),
        ),
        Check.fact_of(
            "ascend.gamma.tree_drafting", ASCEND,
            "tree drafting fixes tree_width * tree_depth == K at init",
            ("tree drafting (speculative_config tree_width / tree_depth, width * depth == K)",
             (b(SELF_ATTR, "tree_width"), b(SELF_ATTR, "tree_depth"))),
            ("no tree drafting", ()),
        ),
        Check.fact_of(
            "ascend.gamma.parallel_drafting", ASCEND,
            "parallel drafting drafts all K positions in one pass, sized by K",
            ("parallel_drafting read by the draft loops",
             (b(SOURCE, "_propose", "parallel_drafting"),)),
            ("parallel_drafting not read by _propose", ()),
        ),
        Check.fact_of(
            "ascend.gamma.decode_threshold", ASCEND,
            "PCP/DCP slot and block sizing per request",
            ("decode_threshold = 1 + configured K sizes PCP/DCP slots",
             (b(SELF_ATTR, "decode_threshold"),)),
            ("no decode_threshold on the proposer", ()),
        ),
        Check.fact_of(
            "ascend.gamma.pearl", ASCEND,
            "the fork's separate native engine, an alternative to vSpec on this host",
            ("PEARL native engine with SpecRhythm (per-request TPOT-SLO gamma budgets)",
             (_p(CLASS, A_PEARL_API_MOD, "PEARLEngine"),
              _p(CLASS, A_PEARL_RHYTHM_MOD, "SpecRhythmBudgetShaper"))),
            ("PEARL native engine", (_p(CLASS, A_PEARL_API_MOD, "PEARLEngine"),)),
            ("no PEARL engine", ()),
        ),
    ]


def checks_for(
    method: str, adaptive: bool, hosts: tuple[str, ...], features: tuple[str, ...] = (),
    *, facts: bool = False,
) -> list[Check]:
    """Every check for ``method`` on the given host packages (``vllm``, ``vllm_ascend``).

    ``facts``: add the doctor's report of what a vllm-ascend checkout does with per-step
    gamma (:func:`ascend_fork_checks`; never failures)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; expected among {', '.join(FEATURES)}")
    ascend = ASCEND in hosts
    out: list[Check] = []
    if VLLM in hosts:
        out += upstream_checks(method, adaptive, ascend=ascend)
    if ascend:
        out += ascend_checks(method, adaptive, features)
        if facts:
            out += ascend_fork_checks()
    return out


__all__ = [
    "ASCEND",
    "FEATURES",
    "HOSTS",
    "K_PARAM",
    "METHODS",
    "SCHED_OUT_PARAM",
    "VLLM",
    "ascend_checks",
    "ascend_fork_checks",
    "checks_for",
    "upstream_checks",
]
