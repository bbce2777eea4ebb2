"""vSpec: adaptive speculative decoding for vLLM, as a ``vllm.general_plugins`` plugin.

vLLM calls :func:`register` in every process it starts (API server, EngineCore, workers).
It does nothing, and imports nothing heavy, unless ``HUST_VSPEC_ENABLED=1``.
"""

from __future__ import annotations

import logging
import os
import sys

from vllm_hust_vspec._version import __version__

ENABLE_ENV = "HUST_VSPEC_ENABLED"
logger = logging.getLogger("vllm_hust_vspec")


def is_enabled(env: dict[str, str] | None = None) -> bool:
    """True when the plugin gate variable is set to a true value."""
    value = (os.environ if env is None else env).get(ENABLE_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def register() -> None:
    """The ``vllm.general_plugins`` entry point.

    When enabled: log through the host's logging, build the settings once (from
    ``VSPEC_CONFIG`` and ``HUST_VSPEC_*``), check every file they name, check the host and
    apply the patches for this process. vLLM loads plugins before any model, so a bad setting
    stops the process at once: one error line naming the variable or file key, exit status 2.
    Host errors propagate: a plugin that was asked for and cannot work must stop the server,
    not let it run unpatched.
    """
    if not is_enabled():
        return
    from vllm_hust_vspec.host import apply
    from vllm_hust_vspec.host.abi.compat import UnsupportedSwitchError
    from vllm_hust_vspec.host.logs import adopt_host_logging
    from vllm_hust_vspec.settings import SettingsError, preflight, resolve_settings

    adopt_host_logging()
    try:
        resolved = resolve_settings(env=os.environ)
        preflight(resolved.settings, resolved.origins)
        resolved.require_honoured()
        apply(resolved.settings)
    except (SettingsError, UnsupportedSwitchError) as exc:
        if logger.hasHandlers():
            logger.error("vSpec: %s", exc)
        else:
            print(f"vllm-hust-vspec: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


__all__ = ["ENABLE_ENV", "__version__", "is_enabled", "register"]
