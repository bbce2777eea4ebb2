"""The other plugins installed beside vSpec, what they wrap of vSpec's targets, and the rule
vSpec applies to each known one.

vLLM loads every ``vllm.general_plugins`` entry point in entry-point order (site order, which
nobody controls; ``VLLM_PLUGINS`` only filters), and the Extension Manager discovers bundles
by their own entry-point group. So vSpec cannot rely on loading first or last: its patch layer
composes in either order (host/patching.py), and this module names, before the model loads,
everything that shares a target with it. The rules below were decided by reading each
sibling's released code:

* composes: no shared target, or a shared target both layers wrap without cutting the
  other out;
* composes with a named change: vSpec changes its own behaviour (its refill hold steps aside
  while another admission policy is active);
* refused: the two cannot both be active; the error names both plugins and the variable to
  unset.

An unknown plugin's wrapper on one of vSpec's targets is a warning naming the plugin.
Importing this module imports neither vllm nor torch; :func:`foreign_wrappers` imports the
host modules that are already importable.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata

from vllm_hust_vspec.host.abi.targets import Target, targets

logger = logging.getLogger("vllm_hust_vspec.host")

# Entry-point groups vLLM and the Extension Manager read.
GROUPS = ("vllm.general_plugins", "vllm.platform_plugins", "vllm_hust.extension_bundles",
          "vllm.extension_bundles", "vllm.victim_selector")
# The manager's run gate exports the enabled bundle ids here.
MANAGER_ENV = "VLLMHUST_EXT_ENABLED_BUNDLES"
VSPEC_DIST = "vllm-hust-vspec"
_TRUE = ("1", "true", "yes", "on")
_HOSTS = ("vllm", "vllm_ascend")

COMPOSES = "composes"
CHANGED = "composes with a change"
REFUSED = "refused"


class PluginConflictError(RuntimeError):
    """vSpec and another enabled plugin cannot serve together (names both and the fix)."""


@dataclass(frozen=True)
class Sibling:
    """A vLLM-HUST plugin whose code the rule was decided from."""

    dist: str
    packages: tuple[str, ...]
    enable: tuple[str, ...]  # variables that switch it on (any of them true)
    bundles: tuple[str, ...]  # extension ids the manager enables it by
    touches: str
    rule: str
    why: str
    # Variables that turn the rule into a refusal when true (the plugin's risky mode).
    refuse_when: tuple[str, ...] = ()
    admission_policy: bool = False
    # True when its patches run only through a worker class the launch names.
    by_worker_cls: bool = False
    # Method or global names of vSpec's targets (host/abi/targets.py) its registered code
    # assigns on a class or module of the same role (kvcompress's load_model is the NPU
    # runner's, vSpec's the worker's: the names are compared, the owners only by role).
    shared: tuple[str, ...] = ()


SIBLINGS: tuple[Sibling, ...] = (
    Sibling(
        "vllm-ascend-kvcompress-hust", ("vllm_ascend_kvcompress",),
        ("VLLM_ASCEND_KVCOMPRESS_ENABLED",), ("org.vllm-hust.ascend-kvcompress",),
        "Scheduler.__init__/schedule/update_from_output and KVCacheManager.free/"
        "get_computed_blocks (wrappers without __wrapped__), six NPUModelRunner methods",
        COMPOSES,
        "both wrap the scheduler; vSpec wraps whatever is installed and undoes only its own "
        "layer, in either load order; kvcompress itself admits speculation only for Qwen3.5 "
        "MTP with K=2, and vSpec's gamma never exceeds the configured K",
        shared=("__init__", "schedule", "update_from_output", "execute_model",
                "sample_tokens", "load_model")),
    Sibling(
        "vllm-ascend-split-batch", ("vllm_ascend_split_batch",), ("VLLM_HUST_DBO_ENABLE",),
        ("org.vllm-hust.split-batch-full-graph",),
        "op and model-runner load_model wrappers behind VLLM_HUST_* variables; with "
        "VLLM_HUST_DBO_ENABLE=1 a source rewrite of vllm_ascend.platform, "
        "vllm.v1.worker.gpu_model_runner and vllm_ascend.worker.model_runner_v1 that swaps the "
        "FULL ACLGraphWrapper for UBatchWrapper",
        COMPOSES,
        "at its defaults it shares no target with vSpec; its DBO rewrite either replaces the "
        "FULL graph wrapper vSpec's per-width graphs capture through (split-batch first) or is "
        "dropped by split-batch because vSpec imported the runner modules (vSpec first)",
        refuse_when=("VLLM_HUST_DBO_ENABLE",)),
    Sibling(
        "vllm-hust-dla", ("dla",), (), ("org.vllm-hust.dla",),
        "a preemption victim selector (vllm.victim_selector) and the core's "
        "full_sequence_must_fit admission gate for requests with a predicted length",
        CHANGED,
        "two admission policies on one waiting queue: vSpec's refill hold steps aside (one "
        "log line) while DLA's bundle is enabled",
        admission_policy=True),
    Sibling(
        "vllm-betterscale", ("betterscale",), (), (),
        "--worker-cls betterscale.worker.Worker (an NPUWorker subclass); swaps "
        "acl_graph._graph_params on its no-speculation route, retires the graph-param "
        "singletons in its KV trial, and replaces NPUModelRunner graph methods "
        "(_determine_batch_execution_and_padding, _pad_query_start_loc_for_fia, "
        "_warmup_and_capture, _dummy_run) and CudagraphDispatcher."
        "_create_padded_batch_descriptor",
        REFUSED,
        "vSpec's per-width FULL graphs own acl_graph._graph_params and wrap the same runner "
        "graph methods: with BetterScale's worker, serve vSpec with --graph-mode piecewise "
        "(or drop --worker-cls); without speculation vSpec leaves the scheduler unchanged",
        by_worker_cls=True,
        shared=("_graph_params", "_create_padded_batch_descriptor",
                "_determine_batch_execution_and_padding", "_dummy_run",
                "_pad_query_start_loc_for_fia", "_warmup_and_capture")),
    Sibling(
        "vllm-hust-opset", ("vllm_hust_operator_optimizations",),
        ("VLLM_HUST_OPERATOR_OPTIMIZATIONS",), ("org.vllm-hust.operator-optimizations",),
        "operator rewrites at import of vllm_ascend op modules and a compilation pass",
        COMPOSES, "no target in common with vSpec"),
    Sibling(
        "vllm-hust-clm-lifecycle", ("clm_lifecycle",), (), ("org.vllm-hust.clm-lifecycle",),
        "an event sink on vllm.v1.events.EventBus (no patch)",
        COMPOSES, "no target in common with vSpec"),
    Sibling(
        "vllm-ascend-quantized-kv-cache", ("vllm_ascend_quantized_kv_cache",), (),
        ("org.vllm-hust.ascend-int8-kv-cache",),
        "AscendAttentionBackend.get_impl_cls (an INT8 KV attention backend)",
        COMPOSES, "no target in common with vSpec"),
    Sibling(
        "vllm-ascend-quant-ext", ("vllm_ascend_quant_ext",), ("VLLM_ASCEND_QUANT_EXT_ENABLE",),
        ("org.vllm-hust.ascend-quant-runtime",),
        "quantization scheme registrations in vllm_ascend.quantization",
        COMPOSES, "no target in common with vSpec"),
    Sibling(
        "vllm-hust-bidkv", ("bidkv",), ("BIDKV_UTILITY_ENABLE",), ("org.vllm-hust.bidkv",),
        "a preemption policy the core loads from its bundle (victim choice only); its legacy "
        "Scheduler.__init__ patch ships in a separate distribution and is not registered by "
        "this one",
        COMPOSES, "no target in common with vSpec (preemption order is not admission)"),
)
_BY_DIST = {s.dist: s for s in SIBLINGS}
_BY_PACKAGE = {p: s for s in SIBLINGS for p in s.packages}


def sibling(name: str) -> Sibling | None:
    """The known sibling for a distribution or top-level package name."""
    return _BY_DIST.get(name) or _BY_PACKAGE.get(name)


def _true(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in _TRUE


def _bundles(env: Mapping[str, str]) -> set[str]:
    return {b.strip() for b in env.get(MANAGER_ENV, "").split(",") if b.strip()}


def enabled(sib: Sibling, env: Mapping[str, str] | None = None) -> bool:
    """Whether the sibling's own gate (its variable or the manager's bundle list) is on."""
    env = os.environ if env is None else env
    return any(_true(env, v) for v in sib.enable) or bool(_bundles(env) & set(sib.bundles))


# ---- installed plugins ---------------------------------------------------------------------
@dataclass
class Plugin:
    """One installed distribution with entry points in :data:`GROUPS`."""

    dist: str
    version: str
    entry_points: list[str] = field(default_factory=list)  # "group: name = value"
    known: Sibling | None = None
    enabled: bool | None = None  # None: no known gate (vSpec cannot tell)


def installed_plugins(env: Mapping[str, str] | None = None) -> list[Plugin]:
    """Every other distribution that registers in a group vLLM or the manager reads."""
    env = os.environ if env is None else env
    found: dict[str, Plugin] = {}
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").strip()
        if not name or _norm(name) == _norm(VSPEC_DIST):
            continue
        # the host's own entry points (vLLM's LoRA resolvers) are not another plugin
        eps = [ep for ep in dist.entry_points if ep.group in GROUPS
               and ep.value.partition(".")[0].partition(":")[0] not in _HOSTS]
        if not eps:
            continue
        plugin = found.setdefault(_norm(name), Plugin(name, dist.version))
        plugin.entry_points += [f"{ep.group}: {ep.name} = {ep.value}" for ep in eps
                                if f"{ep.group}: {ep.name} = {ep.value}" not in
                                plugin.entry_points]
        plugin.known = sibling(_norm(name))
        if plugin.known is not None and (plugin.known.enable or plugin.known.bundles):
            plugin.enabled = enabled(plugin.known, env)
    return sorted(found.values(), key=lambda p: p.dist)


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


# ---- wrappers on vSpec's targets ------------------------------------------------------------
@dataclass(frozen=True)
class ForeignWrapper:
    """Another plugin's layer on one of vSpec's targets."""

    target: str
    plugin: str
    via: str  # how the layer below it was found ("" when its inside cannot be seen)
    known: bool


def foreign_wrappers(only_imported: bool = True) -> list[ForeignWrapper]:
    """Other plugins' wrappers now installed on vSpec's targets. ``only_imported``: look only
    at host modules this process has imported already (never import a runner here)."""
    from vllm_hust_vspec.host.patching import host_function

    out: list[ForeignWrapper] = []
    for target in targets():
        if target.kind != "wrap":
            continue
        fn = _lookup(target, only_imported)
        if fn is None:
            continue
        _found, foreign = host_function(fn, target.name)
        for layer in foreign:
            out.append(ForeignWrapper(target.label, layer.by, layer.via,
                                      sibling(_norm(layer.by)) is not None
                                      or sibling(layer.by) is not None))
    return out


def _lookup(target: Target, only_imported: bool) -> object | None:
    mod = sys.modules.get(target.module)
    if mod is None and not only_imported:
        try:
            mod = importlib.import_module(target.module)
        except Exception:  # noqa: BLE001 - an absent host module has nothing to report
            return None
    if mod is None:
        return None
    owner = getattr(mod, target.cls, None) if target.cls else mod
    if owner is None:
        return None
    raw = vars(owner).get(target.name) if hasattr(owner, "__dict__") else None
    return raw if callable(raw) or isinstance(raw, staticmethod | classmethod) else None


# ---- rules ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """What vSpec concludes about one plugin beside it."""

    plugin: str
    rule: str  # COMPOSES, CHANGED, REFUSED, or "unknown"
    message: str


def findings(env: Mapping[str, str] | None = None, *, ascend: bool = False,
             worker_cls: str | None = None, graph_per_gamma: bool = False,
             wrappers: list[ForeignWrapper] | None = None) -> list[Finding]:
    """The rule for every enabled known sibling, and a warning for every unknown plugin whose
    wrapper sits on a vSpec target. ``ascend``: the NPU platform (where split-batch's DBO
    rewrite applies); ``worker_cls``: the worker class the launch names;
    ``graph_per_gamma``: vSpec captures FULL graphs per width."""
    env = os.environ if env is None else env
    out: list[Finding] = []
    for sib in SIBLINGS:
        if sib.by_worker_cls:
            if worker_cls and any(p in worker_cls for p in sib.packages):
                if graph_per_gamma:
                    out.append(Finding(sib.dist, REFUSED, (
                        f"vSpec's per-width FULL graphs and {sib.dist} ({worker_cls}) both "
                        f"own acl_graph._graph_params: {sib.why}")))
                else:
                    out.append(Finding(sib.dist, COMPOSES, sib.why))
            continue
        if not enabled(sib, env):
            continue
        risky = [v for v in sib.refuse_when if _true(env, v)]
        if risky and ascend:
            out.append(Finding(sib.dist, REFUSED, (
                f"vSpec and {sib.dist} with {'='.join((risky[0], '1'))} cannot serve together: "
                f"{sib.why}. Unset {risky[0]} (or HUST_VSPEC_ENABLED)")))
        else:
            out.append(Finding(sib.dist, sib.rule, sib.why))
    for w in wrappers or ():
        if not w.known:
            out.append(Finding(w.plugin, "unknown", (
                f"{w.plugin} wraps {w.target}, which vSpec also patches; vSpec composes with "
                f"it (its layer is kept, and undo removes only vSpec's), but no rule was "
                f"decided from {w.plugin}'s code: check that its wrapper still calls the "
                f"method it wraps")))
    return out


def other_admission_policy(env: Mapping[str, str] | None = None) -> str | None:
    """The enabled sibling that gates admission itself (vSpec's refill hold then steps
    aside), or None."""
    for sib in SIBLINGS:
        if sib.admission_policy and enabled(sib, env):
            return sib.dist
    return None


def worker_cls_from_argv(argv: list[str] | None = None) -> str | None:
    """The ``--worker-cls`` a ``vllm serve`` command line names (the front end loads the
    plugins with these arguments in ``sys.argv``), or None."""
    args = sys.argv if argv is None else argv
    for i, arg in enumerate(args):
        for flag in ("--worker-cls", "--worker_cls"):
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg.partition("=")[2]
    return None


def check_at_startup(*, ascend: bool = False, worker_cls: str | None = None,
                     graph_per_gamma: bool = False) -> list[Finding]:
    """Log the other plugins, their wrappers on vSpec's targets and the rule for each; raise
    :class:`PluginConflictError` for a refused pair (before any model loads). Without
    ``worker_cls`` the command line's ``--worker-cls`` is used."""
    worker_cls = worker_cls or worker_cls_from_argv()
    plugins = installed_plugins()
    if plugins:
        logger.info("vSpec: other plugins installed: %s", "; ".join(
            f"{p.dist} {p.version}"
            + ("" if p.enabled is None else (" (enabled)" if p.enabled else " (not enabled)"))
            for p in plugins))
    wrappers = foreign_wrappers()
    for w in wrappers:
        logger.info("vSpec: %s is wrapped by %s", w.target, w.plugin)
    found = findings(ascend=ascend, worker_cls=worker_cls, graph_per_gamma=graph_per_gamma,
                     wrappers=wrappers)
    refused = [f for f in found if f.rule == REFUSED]
    for f in found:
        if f.rule != REFUSED:
            (logger.warning if f.rule == "unknown" else logger.info)(
                "vSpec beside %s: %s (%s)", f.plugin, f.rule, f.message)
    if refused:
        raise PluginConflictError("; ".join(f"vSpec beside {f.plugin}: {f.message}"
                                            for f in refused))
    return found


def load_plugins() -> list[str]:
    """Load the other ``vllm.general_plugins`` as vLLM does in each process (in entry-point
    order, filtered by ``VLLM_PLUGINS``; each plugin gates itself on its own variable), so
    their wrappers can be shown. vSpec's own entry point is left out. Returns the names
    loaded; a plugin that fails to load is logged and skipped."""
    allowed = os.environ.get("VLLM_PLUGINS")
    names = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    loaded = []
    for ep in metadata.entry_points(group="vllm.general_plugins"):
        if ep.value.startswith("vllm_hust_vspec") or (names is not None and ep.name not in names):
            continue
        try:
            ep.load()()
            loaded.append(ep.name)
        except Exception as exc:  # noqa: BLE001 - report, never stop the doctor
            logger.warning("vSpec doctor: plugin %s failed to load: %s", ep.name, exc)
    return loaded


def render_text(env: Mapping[str, str] | None = None) -> str:
    """The doctor's section: other plugins, their wrappers on vSpec's targets, the rules."""
    plugins = installed_plugins(env)
    lines = ["other plugins (entry-point groups " + ", ".join(GROUPS) + "):"]
    if not plugins:
        lines.append("  none installed")
    for p in plugins:
        state = "" if p.enabled is None else (" enabled" if p.enabled else " not enabled")
        lines.append(f"  {p.dist} {p.version}{state}")
        lines += [f"    {ep}" for ep in p.entry_points]
        if p.known is not None:
            gate = ", ".join(p.known.enable + tuple(f"{MANAGER_ENV}~{b}"
                                                    for b in p.known.bundles)) or "--worker-cls"
            lines.append(f"    touches: {p.known.touches}")
            lines.append(f"    enabled by: {gate}")
            lines.append(f"    rule: {p.known.rule}: {p.known.why}")
        else:
            lines.append("    rule: none decided (unknown to vSpec)")
    wrappers = foreign_wrappers(only_imported=False)
    lines.append("foreign wrappers on vSpec's targets"
                 f" ({len(targets())} targets, host modules that import here):")
    if not wrappers:
        lines.append("  none")
    for w in wrappers:
        how = f"via {w.via}" if w.via else "opaque: the host's method is read from its source"
        lines.append(f"  {w.target}: wrapped by {w.plugin} ({how})")
    for f in findings(env, wrappers=wrappers):
        if f.rule == "unknown":
            lines.append(f"warning: {f.message}")
    return "\n".join(lines) + "\n"


__all__ = [
    "COMPOSES", "CHANGED", "GROUPS", "MANAGER_ENV", "REFUSED", "SIBLINGS", "Finding",
    "ForeignWrapper", "Plugin", "PluginConflictError", "Sibling", "check_at_startup",
    "enabled", "findings", "foreign_wrappers", "installed_plugins", "load_plugins",
    "other_admission_policy",
    "render_text", "sibling", "worker_cls_from_argv",
]
