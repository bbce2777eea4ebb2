"""Reading option layers: preset/config TOML files and the environment."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from vllm_hust_vspec.settings.coerce import SettingsError, coerce
from vllm_hust_vspec.settings.fields import ENV_PREFIX, METHOD_ALIASES, OPTIONS_BY_NAME
from vllm_hust_vspec.settings.legacy import (
    IGNORED_ENV,
    LEGACY_BY_NAME,
    LEGACY_CONFIG_ENVS,
    LEGACY_ENV_PREFIXES,
    Refused,
    pinned_name,
    translate,
)

# Environment names with the vSpec prefix that are not options (the plugin gate and the model
# lookup sources); anything else with the prefix that is not an option is a typo.
NON_OPTION_ENV = frozenset(
    {
        "ENABLED",
        "EAGLE_MODEL",
        "MODEL_DIR",
        "MODEL_REGISTRY",
        "PRESET_DIR",
        "LOG_LEVEL",
    }
)
CONFIG_ENV = "VSPEC_CONFIG"
PRESET_DIR_ENV = ENV_PREFIX + "PRESET_DIR"
ALIAS_KEY = "alias_of"
BASE_KEY = "inherits"  # a preset layered on top of another (one base, no chains)
PINNED_KEY = "pinned"  # options of a protocol preset that no later layer may change

# Protocols whose preset depends on --method: the predecessor's
# `vllm-hust-vspec --protocol arc-easy --method draft|eagle`.
METHOD_PROTOCOLS: dict[str, dict[str, str]] = {
    "arc-easy": {"draft": "draft-arc-easy", "eagle": "eagle-arc-easy"},
}


@dataclass
class Layer:
    """Option values from one source, with where each came from (for errors and --dry-run)."""

    name: str
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pinned: tuple[str, ...] = ()
    # 0.14.3's names whose value vSpec refuses: old name -> (value as an env string, message)
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    legacy_seen: set[str] = field(default_factory=set)  # 0.14.3's names this layer gives
    # 0.14.3's switches of host options (settings/legacy.py fallback rows): option ->
    # (value or DROP, where); settings/build.py applies them where no source sets the option
    fallbacks: dict[str, tuple[Any, str]] = field(default_factory=dict)

    def refused_or_cleared(self) -> set[str]:
        """0.14.3's names this layer sets (a later accepted value clears an earlier refusal)."""
        return self.legacy_seen

    def put(self, name: str, raw: Any, where: str) -> bool:
        """Read option ``name`` (canonical, or 0.14.3's through settings/legacy.py) with its raw
        value; False when the name is neither."""
        if name in LEGACY_BY_NAME:
            self.refused.pop(name, None)
            self.legacy_seen.add(name)
            try:
                mapped = translate(name, raw, where)
            except Refused as exc:
                self.refused[name] = (_env_str(raw) if isinstance(raw, (str, int, float, bool))
                                      else str(raw), str(exc))
                return True
            if mapped is not None:
                if LEGACY_BY_NAME[name].fallback:
                    self.fallbacks[mapped[0]] = (mapped[1], where)
                else:
                    self.set(mapped[0], mapped[1], where)
            return True
        opt = OPTIONS_BY_NAME.get(name)
        if opt is None:
            return False
        self.set(opt.name, coerce(opt, raw, where), where)
        return True

    def set(self, name: str, value: Any, where: str) -> None:
        """Set a typed value; a table (adaptive_tuning) merges key by key."""
        if isinstance(value, dict):
            value = {**self.values.get(name, {}), **value}
        self.values[name] = value
        self.origins[name] = where


def read_toml_layer(path: str | os.PathLike[str], label: str, *, base_of: Path | None = None
                    ) -> Layer:
    """Read a preset or config TOML: a ``[serve]`` table of options and an ``[env]`` table.

    ``inherits = "PRESET"`` starts from that preset's values and tables (its own keys win);
    the base cannot inherit again. Unknown tables and keys are errors that name the file and
    the key.
    """
    p = Path(path)
    data = _load_toml(p, label)
    if BASE_KEY in data:
        return _inherit(p, data, label, base_of)
    target = alias_target(p, data)
    if target is not None:
        # An alias file only names its preset: read that one, so the two can never drift.
        layer = read_toml_layer(target, label)
        layer.name = f"{label} {p} (alias of {target.stem})"
        return layer
    return read_toml_layer_data(p, data, label)


def read_toml_layer_data(p: Path, data: dict[str, Any], label: str) -> Layer:
    """The layer of one TOML file's parsed ``data`` (no alias or base handling)."""
    layer = Layer(name=f"{label} {p}")
    for key, value in data.items():
        if key == "description" and isinstance(value, str) or key == BASE_KEY:
            continue
        if key == PINNED_KEY:
            layer.pinned = _pinned_names(p, value)
            continue
        if key == "serve" and isinstance(value, dict):
            for opt_name, raw in sorted(value.items(), key=lambda kv: kv[0] in LEGACY_BY_NAME):
                where = f"{p}: [serve] {opt_name}"
                if not layer.put(opt_name, raw, where):
                    raise SettingsError(f"{where}: unknown key{_suggest(opt_name)}")
        elif key == "env" and isinstance(value, dict):
            for env_name, raw in value.items():
                if not isinstance(raw, (str, int, float, bool)):
                    raise SettingsError(f"{p}: [env] {env_name}: value must be a scalar")
                layer.env[env_name] = _env_str(raw)
        else:
            raise SettingsError(
                f"{p}: unknown key or table {key!r} (expected [serve], [env], description,"
                f" {BASE_KEY}, {PINNED_KEY})"
            )
    return layer


def _inherit(p: Path, data: dict[str, Any], label: str, base_of: Path | None) -> Layer:
    name = data[BASE_KEY]
    if base_of is not None:
        raise SettingsError(f"{p}: {BASE_KEY} in a base preset (of {base_of}); a base is one"
                            " level deep")
    if not isinstance(name, str) or not name:
        raise SettingsError(f"{p}: {BASE_KEY} must be a preset name, got {name!r}")
    candidates = [p.parent / f"{name}.toml", _bundled_dir() / f"{name}.toml"]
    base_path = next((c for c in candidates if c.is_file()), None)
    if base_path is None:
        raise SettingsError(f"{p}: {BASE_KEY} = {name!r} names no preset; available: "
                            f"{', '.join(list_presets())}")
    base = read_toml_layer(base_path, label, base_of=p)
    own = read_toml_layer_data(p, {k: v for k, v in data.items() if k != BASE_KEY}, label)
    return Layer(
        name=f"{label} {p} (on {name})",
        values={**base.values, **own.values,
                **{k: {**base.values[k], **v} for k, v in own.values.items()
                   if isinstance(v, dict) and isinstance(base.values.get(k), dict)}},
        origins={**{k: f"{v} (base of {p.name})" for k, v in base.origins.items()},
                 **own.origins},
        env={**base.env, **own.env},
        notes=[*base.notes, *own.notes],
        pinned=own.pinned,
        refused={**{k: v for k, v in base.refused.items() if k not in own.legacy_seen},
                 **own.refused},
        legacy_seen=base.legacy_seen | own.legacy_seen,
        fallbacks={**base.fallbacks, **own.fallbacks},
    )


def _pinned_names(p: Path, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"{p}: {PINNED_KEY} must be a list of option names")
    unknown = [v for v in value if pinned_name(v) is None]
    if unknown:
        raise SettingsError(f"{p}: {PINNED_KEY} names unknown options {unknown}"
                            " (canonical names, table.key, or 0.14.3's name of a table key)")
    return tuple(str(pinned_name(v)) for v in value)


def _load_toml(p: Path, label: str) -> dict[str, Any]:
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"{label} file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{p}: not valid TOML: {exc}") from None


def alias_target(path: Path, data: Mapping[str, Any]) -> Path | None:
    """The preset file an alias file (``alias_of = "NAME"``) stands for; None if not an alias.

    Aliases keep the predecessor's config names (``configs/qwen25-14b-05b.toml``) working. The
    named preset is looked up beside the alias, then among the bundled presets; an alias of an
    alias is refused, so a lookup is one step and cannot loop.
    """
    if ALIAS_KEY not in data:
        return None
    name = data[ALIAS_KEY]
    extra = sorted(set(data) - {ALIAS_KEY, "description"})
    if not isinstance(name, str) or not name:
        raise SettingsError(f"{path}: {ALIAS_KEY} must be a preset name, got {name!r}")
    if extra:
        raise SettingsError(
            f"{path}: an alias file holds only {ALIAS_KEY} and description; move "
            f"{', '.join(extra)} into {name}.toml or into a --config file"
        )
    for folder in (path.parent, _bundled_dir()):
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            if ALIAS_KEY in _load_toml(candidate, "preset"):
                raise SettingsError(
                    f"{path}: {ALIAS_KEY} = {name!r} is itself an alias; name the real preset"
                )
            return candidate
    raise SettingsError(
        f"{path}: {ALIAS_KEY} = {name!r} names no preset; available: "
        f"{', '.join(list_presets())}"
    )


def _bundled_dir() -> Path:
    return Path(str(resources.files("vllm_hust_vspec") / "presets"))


def protocol_preset(name: str | None, method: str | None) -> str | None:
    """The preset a ``--protocol`` name stands for, given ``--method``.

    Method-dependent protocols (``arc-easy``) pick one preset per method and need the method;
    every other name is returned unchanged (a preset, an alias or a path).
    """
    if name is None or name not in METHOD_PROTOCOLS:
        return name
    choices = METHOD_PROTOCOLS[name]
    spelled = ", ".join(f"--method {m} ({p})" for m, p in choices.items())
    if not method:
        raise SettingsError(
            f"--protocol {name} needs --method: one of {spelled}"
        )
    canonical = METHOD_ALIASES.get(method, method)
    if canonical not in choices:
        raise SettingsError(
            f"--protocol {name} does not support --method {method}; use one of {spelled}"
        )
    return choices[canonical]


def _env_str(raw: str | int | float | bool) -> str:
    if isinstance(raw, bool):
        return "1" if raw else "0"
    return str(raw)


def read_env_layer(env: Mapping[str, str], prefix: str, strict: bool) -> Layer:
    """Read ``PREFIX<OPTION>`` variables. With ``strict``, an unknown name is an error."""
    layer = Layer(name=f"environment {prefix}*")
    for key in sorted(env, key=lambda k: (k[len(prefix):].lower() in LEGACY_BY_NAME, k)):
        if not key.startswith(prefix):
            continue
        suffix = key[len(prefix) :]
        if suffix in NON_OPTION_ENV:
            continue
        if suffix.startswith(IGNORED_ENV):
            layer.notes.append(
                f"environment {key}: a knob of vllm-hust-vspec 0.14's own runtime that vSpec"
                " does not have; ignored (docs/migration.md)"
            )
            continue
        if not layer.put(suffix.lower(), env[key], f"environment {key}") and strict:
            raise SettingsError(
                f"environment {key}: unknown vSpec option{_suggest(suffix.lower())}"
            )
    return layer


def env_layers(env: Mapping[str, str]) -> list[Layer]:
    """Legacy prefixes first (lower priority), then ``HUST_VSPEC_*``."""
    layers = [read_env_layer(env, p, strict=False) for p in reversed(LEGACY_ENV_PREFIXES)]
    layers.append(read_env_layer(env, ENV_PREFIX, strict=True))
    return layers


def config_layers(env: Mapping[str, str], config: str | None) -> list[Layer]:
    """Config files, lowest priority first: legacy env files, VSPEC_CONFIG, then --config."""
    layers = []
    for name in LEGACY_CONFIG_ENVS:
        if env.get(name):
            layers.append(read_toml_layer(env[name], f"config ({name})"))
    if env.get(CONFIG_ENV):
        layers.append(read_toml_layer(env[CONFIG_ENV], f"config ({CONFIG_ENV})"))
    if config:
        layers.append(read_toml_layer(config, "config (--config)"))
    return layers


def preset_path(name: str, env: Mapping[str, str]) -> Path:
    """Locate preset ``name``: a path, ``$HUST_VSPEC_PRESET_DIR/NAME.toml``, or a bundled one."""
    as_path = Path(name)
    if as_path.suffix == ".toml" and as_path.is_file():
        return as_path
    if env.get(PRESET_DIR_ENV):
        candidate = Path(env[PRESET_DIR_ENV]) / f"{name}.toml"
        if candidate.is_file():
            return candidate
    bundled = resources.files("vllm_hust_vspec") / "presets" / f"{name}.toml"
    if bundled.is_file():
        return Path(str(bundled))
    protocols = ", ".join(f"{n} (with --method)" for n in METHOD_PROTOCOLS)
    raise SettingsError(
        f"unknown preset {name!r}; available: {', '.join(list_presets())}, {protocols} "
        f"(or give a path to a .toml file, or set {PRESET_DIR_ENV})"
    )


def list_presets() -> list[str]:
    """Names of the bundled presets, aliases included (each is a file under presets/)."""
    folder = resources.files("vllm_hust_vspec") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def preset_aliases() -> dict[str, str]:
    """Bundled alias name -> the preset it stands for (the predecessor's config names)."""
    out: dict[str, str] = {}
    for name in list_presets():
        path = _bundled_dir() / f"{name}.toml"
        target = alias_target(path, _load_toml(path, "preset"))
        if target is not None:
            out[name] = target.stem
    return out


def _suggest(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, [*OPTIONS_BY_NAME, *LEGACY_BY_NAME], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
