"""The one definition of every vSpec option.

Each option is a field of :class:`Settings`; its metadata (help, choices, range, group) is the
single source for the CLI flags, the TOML keys, the ``HUST_VSPEC_*`` environment names and the
README flag reference, so the four can never drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "HUST_VSPEC_"

METHODS = ("draft", "eagle", "eagle3", "mtp", "ngram")
METHOD_ALIASES = {"draft_model": "draft", "qwen3_5_mtp": "mtp", "eagle-3": "eagle3"}
DEFAULT_GAMMA = {"mtp": 6}
FALLBACK_GAMMA = 4

GAMMA0_MODES = ("sticky", "sticky-spec", "sync")


@dataclass(frozen=True)
class TuningKey:
    """One key of ``adaptive_tuning``: its type, default, range and which policies read it."""

    kind: str  # "int" | "float" | "str" | "bool"
    help: str
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


ALL_POLICIES = "all policies"
# adaptive_tuning's keys (0.14.3's adaptive_<key> flags set one each: settings/legacy.py).
TUNING: dict[str, TuningKey] = {
    "control_interval": TuningKey("int", "steps between decisions", minimum=1),
    "hysteresis": TuningKey("float", "relative gain needed to switch arms, 0..1",
                            minimum=0.0, maximum=1.0),
    "gamma_stride": TuningKey(
        "int", "play only gammas adaptive_min_gamma + k * stride, default 1 (2 gives the"
        " predecessor's MTP2 budgets 2/4/6; gamma minus adaptive_min_gamma must be a"
        " multiple)", default=1, minimum=1),
    "max_gamma_step": TuningKey("int", "largest gamma change per decision", minimum=1),
    "online_window": TuningKey("int", "steady samples per arm kept for the measured goodput"
                               " (online: in reports only; decisions use the posteriors)",
                               minimum=1),
    "online_warmup_samples": TuningKey("int", "steady samples discarded before learning step"
                                       " costs", minimum=0),
    "online_warmup_return": TuningKey(
        "str", "online and ucb1: 'best' (default) may leave the initial gamma on the first"
        " decision the posterior favours another arm, 'incumbent' keeps it until the posterior"
        " says, with probability 0.9, that another arm beats it", default="best",
        choices=("best", "incumbent")),
    "min_observations": TuningKey("int", "profile: steady samples an arm needs in a batch"
                                  " bucket before it is compared by its own measurements",
                                  minimum=1),
    "ewma_weight": TuningKey("float", "weight of the newest step in the acceptance estimate"
                             " (0..1]; half-life ln(0.5)/ln(1-w) requests",
                             minimum=0.001, maximum=1.0),
    "latency_ewma_weight": TuningKey("float", "profile: weight of the newest step in the"
                                     " online correction of the offline latency model, 0..1;"
                                     " 0 trusts the profile as is", minimum=0.0, maximum=1.0),
}

# diagnostics' keys (0.14.3's flags of the same names: settings/legacy.py).
DIAGNOSTICS: dict[str, TuningKey] = {
    "eagle_draft_trace": TuningKey("bool", "true: log every step's draft tokens per request"),
    "eagle_draft_io_trace_dir": TuningKey("str", "folder for the drafter's inputs and outputs"
                                          " per step (bounded)"),
    "eagle_target_hidden_trace_dir": TuningKey("str", "folder for the target hidden states the"
                                               " drafter receives (bounded)"),
    "eagle_target_argmax_trace_path": TuningKey("str", "JSONL file the target's argmax token"
                                                " ids per step are appended to (the input of"
                                                " vllm-hust-vspec-active-vocab)"),
}
# vllm's keys: `vllm serve` options vSpec passes through (0.14.3's flags of the same names:
# settings/legacy.py); launch/command.py turns each set key into its vLLM flag.
VLLM: dict[str, TuningKey] = {
    "served_model_name": TuningKey("str", "model name the OpenAI API answers to"),
    "max_model_len": TuningKey("int", "maximum context length", minimum=16),
    "kv_cache_dtype": TuningKey("str", "KV cache dtype, e.g. fp8"),
    "block_size": TuningKey("int", "KV cache block size in tokens", minimum=1),
    "gpu_memory_utilization": TuningKey("float", "fraction of device memory vLLM may use",
                                        minimum=0.05, maximum=1.0),
    "generation_config": TuningKey("str", "where default sampling params come from: vllm"
                                   " (default, greedy) or auto", default="vllm",
                                   choices=("vllm", "auto")),
    "prefix_caching": TuningKey("bool", "prefix caching"),
    "chunked_prefill": TuningKey("bool", "chunked prefill"),
    "disable_log_stats": TuningKey("bool", "true: no periodic engine stats lines"),
    "shutdown_timeout": TuningKey("int", "seconds in-flight requests may drain after"
                                  " SIGTERM/SIGINT before the server stops; 0 aborts them at"
                                  " once", minimum=0),
    "language_model_only": TuningKey("bool", "load only the language model of a multimodal"
                                     " checkpoint"),
}

# ascend's keys (0.14.3's flags of the same names: settings/legacy.py).
ASCEND: dict[str, TuningKey] = {
    "mtp_strict_graph": TuningKey("bool", "MTP: stop the server when a decode batch would run"
                                  " without its full graph instead of silently running eager;"
                                  " unset: on for method mtp"),
    "merged_full": TuningKey("bool", "one merged FULL draft graph for all draft steps; fails"
                             " closed where unavailable, docs/hosts.md"),
    "mtp_local_argmax_reduction": TuningKey("bool", "MTP: the host's local argmax reduction"
                                            " across TP ranks, the vLLM-HUST speculative config"
                                            " use_local_argmax_reduction; fails closed where"
                                            " the host lacks it"),
}
# The table options and their keys.
TABLES: dict[str, dict[str, TuningKey]] = {"adaptive_tuning": TUNING, "diagnostics": DIAGNOSTICS,
                                           "vllm": VLLM, "ascend": ASCEND}


def _keys(keys: dict[str, TuningKey]) -> str:
    return "; ".join(f"{k} ({t.help})" for k, t in keys.items()) + "."


def _opt(
    default: Any,
    help: str,
    *,
    group: str = "serve",
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    metavar: str | None = None,
    off: Any = None,
    bare: str | None = None,
) -> Any:
    """Declare an option: a dataclass field carrying its CLI/TOML/env metadata (0.14.3's other
    names are in settings/legacy.py). ``off`` is a value that means "feature off" (0.14.3's
    spelling, e.g. top-K 1): it reads as the default. ``bare`` is the value of the flag given
    without an argument (and of a TOML/env boolean true)."""
    meta = {
        "off": off,
        "bare": bare,
        "help": help,
        "group": group,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "metavar": metavar,
    }
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)

@dataclass(frozen=True)
class Settings:
    """Every vSpec option, typed. Build it with :func:`vllm_hust_vspec.settings.load_settings`.

    ``None`` means "leave it to the host (vLLM) or to the method's default".
    """

    # --- what to serve -------------------------------------------------------------------
    method: str = _opt(
        "draft", "Speculative method (aliases: draft_model, qwen3_5_mtp).", choices=METHODS
    )
    target_model: str | None = _opt(
        None, "Target model: a local path or a repo id resolved from local caches only.",
        metavar="PATH_OR_REPO",
    )
    draft_model: str | None = _opt(
        None, "Draft/EAGLE model: local path or repo id (not used by mtp and ngram).",
        metavar="PATH_OR_REPO",
    )
    gamma: int | None = _opt(
        None, "Upper bound of draft tokens per step (default 4; 6 for mtp).",
        minimum=1, maximum=32,
    )
    dtype: str = _opt(
        "auto", "Model dtype.", choices=("auto", "float16", "bfloat16", "float32")
    )
    max_num_seqs: int | None = _opt(None, "Maximum concurrent sequences.", minimum=1)
    max_num_batched_tokens: int | None = _opt(
        None, "Token budget of one engine step.", minimum=1
    )
    tensor_parallel_size: int = _opt(1, "Target tensor-parallel size.", minimum=1)
    draft_tensor_parallel_size: int | None = _opt(
        None, "Draft tensor-parallel size (default: the host's choice).", minimum=1
    )
    host: str = _opt("127.0.0.1", "Address the server binds to.")
    port: int = _opt(8000, "Port the server listens on.", minimum=1, maximum=65535)
    device: str | None = _opt(
        None, "Visible device list, e.g. '0,1' (sets CUDA/ASCEND_RT_VISIBLE_DEVICES).",
        metavar="LIST",
    )
    graph_mode: str = _opt(
        "piecewise", "Graph capture mode (vLLM's cudagraph_mode): piecewise = PIECEWISE,"
        " full-decode-only = FULL_DECODE_ONLY, full-and-piecewise = FULL_AND_PIECEWISE, full ="
        " FULL (one FULL graph per size for every batch, no separate decode routine); eager"
        " serves with --enforce-eager.",
        choices=("eager", "piecewise", "full-decode-only", "full-and-piecewise", "full"),
    )
    capture_policy: str = _opt(
        "auto", "Which batch sizes get graphs (see docs/hosts.md).",
        choices=("auto", "exact", "power2", "steady"),
    )
    capture_sizes: list[int] = _opt(
        [], "Exact graph capture sizes in tokens (vLLM cudagraph_capture_sizes), replacing the"
        " ones --capture-policy and the candidate gammas give; widths missing here run"
        " eager.", metavar="N",
    )
    async_scheduling: bool | None = _opt(None, "Host async scheduling (default: host's).")
    model_runner: str = _opt(
        "auto", "Worker model runner on GPU hosts: 'auto' leaves vLLM's choice (Model Runner V2"
        " on CUDA since 0.32), 'v1' / 'v2' set VLLM_USE_V2_MODEL_RUNNER. v1: every vSpec"
        " feature, PIECEWISE graphs under adaptive gamma (vLLM's rule); v2: FULL graphs per"
        " verify width, no diagnostics traces, no target active vocabulary, the confidence stop"
        " only with eager drafting (docs/hosts.md).",
        choices=("auto", "v1", "v2"),
    )
    vllm_source: str | None = _opt(
        None, "A vLLM source tree put first on the server's PYTHONPATH (serve that checkout "
        "instead of the installed vLLM).", metavar="PATH",
    )
    ascend_source: str | None = _opt(
        None, "A vLLM-Ascend source tree put on the server's PYTHONPATH after --vllm-source.",
        metavar="PATH",
    )
    vllm_executable: str | None = _opt(
        None, "The 'vllm' program to run (default: the one beside this Python, else on PATH).",
        metavar="PATH",
    )
    model_registry: str | None = _opt(
        None, "Model registry JSON naming local model folders (default: "
        "$HUST_VSPEC_MODEL_REGISTRY, then ~/.config/vllm-hust-vspec/models.json; written by "
        "vllm-hust-vspec-models).", metavar="PATH",
    )
    vllm: dict[str, Any] = _opt(
        {}, "vLLM serve options vSpec passes through, key=value,... (a TOML table under [serve"
        ".vllm]); each key is also 0.14.3's flag of that name; unset keys keep the host's"
        " defaults. Keys: " + _keys(VLLM), metavar="KEY=VALUE,...",
    )
    extra_args: list[str] = _opt(
        [], "Extra arguments for 'vllm serve' (TOML array or shell-quoted string).",
        metavar="ARGS",
    )

    # --- adaptive controller -------------------------------------------------------------
    adaptive_speculation: bool = _opt(
        True, "Pick gamma every step (off: fixed gamma, vSpec only observes).", group="adaptive"
    )
    adaptive_policy: str = _opt(
        "online", "Controller: 'online' learns as it serves (one cost posterior and Thompson "
        "sampling over it and the acceptance rates); 'ucb1' learns as it serves with "
        "vllm-hust-vSpec 0.14.3's rule (UCB1 over each batch bucket's measured rewards, "
        "decision for decision, with 0.14.3's defaults for the knobs it reads); 'profile' reads "
        "step costs from an offline profile and learns acceptance online.",
        group="adaptive", choices=("online", "ucb1", "profile"),
    )
    adaptive_profile: str | None = _opt(
        None, "Profile JSON (schema v1) for the profile policy.", group="adaptive",
        metavar="PATH",
    )
    adaptive_min_gamma: int = _opt(
        0, "Lowest gamma the controller may pick (0 lets it switch speculation off).",
        group="adaptive", minimum=0, maximum=32,
    )
    adaptive_exploration: float | None = _opt(
        None, "How much the online policies try arms their data does not favour, in UCB1's "
        "unit: policy ucb1 uses it as its exploration coefficient; policy online draws at "
        "value / 0.01 posterior standard deviations. Default 0.01 (one standard deviation); 0 "
        "explores nothing (the posterior mean, the best measured arm).", group="adaptive",
        minimum=0.0, maximum=1.0,
    )
    adaptive_gamma0_mode: str = _opt(
        "sticky", "At gamma 0: 'sticky' skips drafting until the cohort ends and runs such"
        " steps with no drafts to verify like a target-only engine (plain sampler, no spec"
        " metadata); 'sticky-spec' skips drafting but keeps vLLM's speculative path on every"
        " step; 'sync' keeps a shadow draft so speculation can resume.", group="adaptive",
        choices=GAMMA0_MODES,
    )
    adaptive_refill_batch: int = _opt(
        0, "Cohort refill: hold waiting requests until a cohort of this many can join (0: the"
        " method's default, 8 for draft, 4 otherwise; 1: no refill hold, admit as the host"
        " does).", group="adaptive", minimum=0,
    )
    adaptive_refill_hold: str = _opt(
        "auto", "When refill holds the queue: 'auto' while the measured fixed cost of a step"
        " that admits requests says grouping admissions pays (more than the idle slots lose),"
        " at any gamma including a pinned zero; 'speculating' whenever speculation runs;"
        " 'always' at any gamma, a pinned zero included (vllm-hust-vSpec 0.14.3's rule; the"
        " same as 'speculating' while gamma >= 1).", group="adaptive",
        choices=("auto", "speculating", "always"),
    )
    adaptive_trace: str | None = _opt(
        None, "Write one JSON line per controller decision to this file; given without a path"
        " (or as true / 1), the decisions go to the server log instead (the predecessor's"
        " switch).", group="adaptive", metavar="PATH", bare="log",
    )
    adaptive_state_path: str | None = _opt(
        None, "Keep the controller's measured step costs in this JSON file across restarts: a "
        "restarted engine with the same host, models and batch settings starts from them.",
        group="adaptive", metavar="PATH",
    )
    adaptive_startup: str = _opt(
        "both", "Start-up step costs for a fresh controller (a matching --adaptive-state-path"
        " is preferred): 'profile' times the runner's dummy batches (every power-of-two batch"
        " up to max_num_seqs, every gamma; V1 runner; at most ~20 s); 'calibration' times a few"
        " real decode steps of vSpec's own random-token requests (every batch bucket, every"
        " gamma, gamma 0 as the host plays it; online policy; at most ~30 s), which dummy"
        " batches misprice; 'both' does both (calibration wins); 'off' explores the costs.",
        group="adaptive", choices=("both", "calibration", "profile", "off"),
    )
    adaptive_tuning: dict[str, Any] = _opt(
        {}, "The controller's tuning knobs, key=value,... (a TOML table under [serve"
        ".adaptive_tuning] or an inline table); unset keys keep the policy's defaults. Keys: "
        + _keys(TUNING),
        group="adaptive", metavar="KEY=VALUE,...",
    )

    # --- acceptance (relaxed modes change outputs; opt-in) -------------------------------
    confidence_accept_margin: float | None = _opt(
        None, "RELAXED: accept a draft token whose target logit is within this many logits of"
        " the target's top-1 logit (the predecessor's unit; changes outputs).",
        group="acceptance", minimum=0.0,
    )
    confidence_accept_prob_margin: float | None = _opt(
        None, "RELAXED: accept a draft token whose target probability is within this of the"
        " target's top-1 probability (0..1; changes outputs).", group="acceptance",
        minimum=0.0, maximum=1.0,
    )
    eagle_relaxed_accept_topk: int | None = _opt(
        None, "RELAXED (EAGLE only): accept a draft token in the target's top-K "
        "(changes outputs); 1 is strict top-1 (off).", group="acceptance", minimum=2, maximum=64,
        off=1,
    )
    eagle_relaxed_accept_after_tokens: int = _opt(
        0, "Relaxed top-K applies only from this output token of a request on (the first N "
        "tokens stay strict).", group="acceptance", minimum=0,
    )
    confidence_accept_from_position: int = _opt(
        0, "Confidence margin applies only at draft positions >= this (0 = every position).",
        group="acceptance", minimum=0, maximum=128,
    )
    confidence_accept_after_tokens: int = _opt(
        0, "Confidence margin applies only from this output token of a request on (the first "
        "N tokens stay strict).", group="acceptance", minimum=0,
    )
    confidence_protected_token_ids: list[int] = _opt(
        [], "Token ids never accepted or overridden relaxedly (e.g. digits); TOML array or "
        "comma-separated list.", group="acceptance", metavar="IDS",
    )
    acceptance_protect_eos: bool = _opt(
        True, "In relaxed modes also protect the target's EOS token id(s).", group="acceptance",
    )
    forced_acceptance_length: int | None = _opt(
        None, "MEASUREMENT ONLY, CHANGES OUTPUTS: every greedy verify step accepts exactly N"
        " drafts (all when fewer) whatever the target says, to time a given acceptance length"
        " (the predecessor's SPEED-Bench entry).", group="acceptance", minimum=0,
    )

    # --- draft model / vocabulary --------------------------------------------------------
    draft_allow_tokenizer_mismatch: bool = _opt(
        False, "Start even when the draft's tokenizer differs from the target's (otherwise "
        "refused: token ids would mean different text).", group="draft",
    )
    eagle_draft_active_vocab_size: int | None = _opt(
        None, "Draft LM head computes logits over this many token ids only (the first N of the "
        "ids file, else ids 0..N-1); strict acceptance stays exact; 0 is off.", group="draft",
        minimum=16, off=0,
    )
    eagle_draft_active_vocab_file: str | None = _opt(
        None, "Token-id file (JSON list or one id per line, most frequent first) for the draft's "
        "active vocabulary (build it with vllm-hust-vspec-active-vocab).", group="draft",
        metavar="PATH",
    )
    eagle_draft_lm_head_quant: str = _opt(
        "none", "Draft LM-head quantization (per-channel int8 weights; w8a8 also quantizes the "
        "hidden state per token).", group="draft", choices=("none", "w8a16", "w8a8"),
    )
    eagle_target_active_vocab_ids: str | None = _opt(
        None, "Token-id file: the target's greedy argmax is taken over these ids only (greedy"
        " requests without logprobs, penalties or logits processors; others are refused).",
        group="draft", metavar="PATH",
    )
    shared_tokenizer_padding: bool = _opt(
        True, "Accept a draft that shares the target's tokenizer but pads its vocabulary (ids"
        " past the target's are never proposed); off: the vocabularies must be equal.",
        group="draft",
    )

    confidence_stop: bool = _opt(
        False, "Cut each request's draft at its first low-confidence position.",
        group="draft",
    )
    per_request_lengths: bool = _opt(
        False, "Verify a different number of drafts per request, by how likely each request's "
        "drafts survive (its own acceptance history) against the learned cost of a verified "
        "token; only while requests differ beyond chance. Outputs unchanged. Needs "
        "synchronous scheduling and the V1 model runner.", group="draft",
    )
    confidence_stop_threshold: float | None = _opt(
        None, "Confidence bar of the stop. Rule topk-entropy (default; 0.14.3's): a"
        " position is uncertain when its top-k entropy times confidence_stop_scale exceeds"
        " threshold squared (default 0.3). Rule entropy: entropy in nats above this (default"
        " 1.0). Rule margin: top-1 minus top-2 probability below this (default 0.2).",
        group="draft", minimum=0.0,
    )
    confidence_stop_topk: int | None = _opt(
        None, "Top-k draft probabilities the confidence rule looks at (default 2 for rule"
        " topk-entropy, 4 otherwise).", group="draft", minimum=2, maximum=64,
    )
    confidence_stop_rule: str = _opt(
        "topk-entropy", "Confidence rule of the entropy stop: topk-entropy (0.14.3's:"
        " entropy of the top-k probabilities renormalized, scaled by confidence_stop_scale,"
        " against threshold squared), entropy (vSpec's: top-k entropy with the rest of the"
        " mass as one more outcome, in nats), margin (top-1 minus top-2 probability).",
        group="draft", choices=("topk-entropy", "entropy", "margin"),
    )
    confidence_stop_scale: float | None = _opt(
        None, "Rule topk-entropy: multiplies the entropy before it is compared with threshold"
        " squared; larger stops earlier (0.14.3's knob, default 0.15).",
        group="draft", minimum=0.001, maximum=1.0,
    )

    # --- diagnostics (slow: for correctness checks and active-vocabulary data only) -------
    diagnostics: dict[str, Any] = _opt(
        {}, "Diagnostics traces (slow; docs/diagnostics.md), key=value,... (a TOML table);"
        " each key is also 0.14.3's flag of that name. Keys: "
        + _keys(DIAGNOSTICS),
        group="diagnostics", metavar="KEY=VALUE,...",
    )

    # --- vLLM-Ascend (NPU host) ----------------------------------------------------------
    ascend: dict[str, Any] = _opt(
        {}, "vLLM-Ascend switches, key=value,... (a TOML table); each key is also 0.14.3's flag"
        " of that name. Keys: " + _keys(ASCEND), group="ascend", metavar="KEY=VALUE,...",
    )

    def tuning(self, key: str) -> Any:
        """An ``adaptive_tuning`` value, or its default (None: the policy's own)."""
        return self.adaptive_tuning.get(key, TUNING[key].default)

    def vllm_arg(self, key: str) -> Any:
        """A ``vllm`` value, or its default (None: the host's)."""
        return self.vllm.get(key, VLLM[key].default)

    def ascend_opt(self, key: str) -> Any:
        """An ``ascend`` value (None: unset)."""
        return self.ascend.get(key, ASCEND[key].default)

    def sticky_zero(self) -> bool:
        """True when gamma 0 skips drafting until the cohort ends (modes sticky*)."""
        return self.adaptive_gamma0_mode != "sync"

    def zero_fast_path(self) -> bool:
        """True when sticky gamma-0 steps run like a target-only engine (mode sticky)."""
        return self.adaptive_gamma0_mode == "sticky"

    def startup_profile(self) -> bool:
        """Whether the runner's dummy batches are timed at start-up."""
        return self.adaptive_startup in ("both", "profile")

    def startup_calibration(self) -> bool:
        """Whether real decode steps are timed before serving."""
        return self.adaptive_startup in ("both", "calibration")

    def without_startup_profile(self) -> str:
        """adaptive_startup with the dummy-batch profile dropped."""
        return "calibration" if self.startup_calibration() else "off"

    def effective_gamma(self) -> int:
        """The gamma upper bound, applying the method default when unset."""
        if self.gamma is not None:
            return self.gamma
        return DEFAULT_GAMMA.get(self.method, FALLBACK_GAMMA)

    def refill_batch(self) -> int:
        """Cohort refill size, applying the method default when 0 (1: no refill hold)."""
        if self.adaptive_refill_batch:
            return self.adaptive_refill_batch
        return 8 if self.method == "draft" else 4

    def strict_mtp_graph(self) -> bool:
        """Whether an MTP decode batch missing its graph stops the server (unset: on for
        method mtp, as the predecessor had it)."""
        if self.ascend_opt("mtp_strict_graph") is not None:
            return bool(self.ascend_opt("mtp_strict_graph"))
        return self.method == "mtp"

    def relaxed_acceptance(self) -> bool:
        """True when an opt-in acceptance mode that changes outputs is on."""
        return (self.confidence_accept_margin is not None
                or self.confidence_accept_prob_margin is not None
                or self.eagle_relaxed_accept_topk is not None
                or self.forced_acceptance_length is not None)

    def draft_head_changed(self) -> bool:
        """True when the draft LM head is restricted or quantized (drafts may change, outputs
        under strict acceptance do not)."""
        return (
            self.eagle_draft_active_vocab_size is not None
            or self.eagle_draft_active_vocab_file is not None
            or self.eagle_draft_lm_head_quant != "none"
        )

    def non_defaults(self) -> dict[str, Any]:
        """Options whose value differs from the default (what the launcher exports)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != default_of(f):
                out[f.name] = value
        return out

    def fingerprint(self) -> str:
        """A short stable hash of every non-default option (tells runs with other settings
        apart, e.g. in an appended trace)."""
        text = json.dumps(self.non_defaults(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

@dataclass(frozen=True)
class OptionInfo:
    """Metadata of one option, read from the Settings field."""

    name: str
    kind: str  # "bool" | "int" | "float" | "str" | "list" | "ints" | "table"
    optional: bool
    default: Any
    help: str
    group: str
    choices: tuple[str, ...] | None
    minimum: float | None
    maximum: float | None
    metavar: str | None
    off: Any = None
    bare: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

def default_of(f: dataclasses.Field[Any]) -> Any:
    """The default of a Settings field (calling its factory when it has one)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise AssertionError(f"option {f.name} has no default")

def _kind(annotation: str) -> tuple[str, bool]:
    optional = "None" in annotation
    base = annotation.replace(" | None", "").strip()
    kind = {"bool": "bool", "int": "int", "float": "float", "str": "str", "list[str]": "list",
            "list[int]": "ints", "dict[str, Any]": "table"}
    return kind[base], optional

def options() -> tuple[OptionInfo, ...]:
    """Every option, in declaration order."""
    out = []
    for f in dataclasses.fields(Settings):
        kind, optional = _kind(str(f.type))
        m = f.metadata
        out.append(
            OptionInfo(
                name=f.name, kind=kind, optional=optional, default=default_of(f),
                help=m["help"], group=m["group"], choices=m["choices"],
                minimum=m["minimum"], maximum=m["maximum"], metavar=m["metavar"],
                off=m["off"], bare=m["bare"],
            )
        )
    return tuple(out)

OPTIONS: tuple[OptionInfo, ...] = options()
# Every option by its canonical name (0.14.3's other names: settings/legacy.py).
OPTIONS_BY_NAME: dict[str, OptionInfo] = {o.name: o for o in OPTIONS}
