"""One typed settings object, built in one place (see build.py for the precedence)."""

from vllm_hust_vspec.settings.build import (
    ResolvedSettings,
    check_consistency,
    load_settings,
    resolve_settings,
)
from vllm_hust_vspec.settings.coerce import SettingsError, render_env_value
from vllm_hust_vspec.settings.fields import OPTIONS, OPTIONS_BY_NAME, OptionInfo, Settings
from vllm_hust_vspec.settings.preflight import preflight
from vllm_hust_vspec.settings.sources import list_presets, preset_path

__all__ = [
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "OptionInfo",
    "ResolvedSettings",
    "Settings",
    "SettingsError",
    "check_consistency",
    "list_presets",
    "load_settings",
    "preflight",
    "preset_path",
    "render_env_value",
    "resolve_settings",
]
