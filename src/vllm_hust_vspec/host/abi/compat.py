"""Host-capability switches that depend on the host kind: asked for where the host cannot honour
them, they stop the plugin at registration (before any model loads) with one error naming each
switch and what the host lacks. Never a silent no-op.

Each entry says why, per host kind (docs/hosts.md lists them). Switches no host honours are
refused when the settings are read (settings/legacy.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings


class UnsupportedSwitchError(RuntimeError):
    """A switch asks for a host capability this host (or this vSpec) does not have."""


@dataclass(frozen=True)
class HostSwitch:
    """One switch: when it is asked for, and why it cannot apply upstream / on Ascend."""

    flag: str
    asked: Callable[[Settings], bool]
    upstream: str
    ascend: str
    # When the switch cannot apply on vLLM-Ascend, if that differs from ``asked``.
    ascend_asked: Callable[[Settings], bool] | None = None

    def asked_on(self, settings: Settings, *, ascend: bool) -> bool:
        """The settings ask for what this host kind cannot honour."""
        if ascend and self.ascend_asked is not None:
            return self.ascend_asked(settings)
        return self.asked(settings)


_FULL_MODES = ("full", "full-decode-only", "full-and-piecewise")

SWITCHES: tuple[HostSwitch, ...] = (
    HostSwitch(
        "--merged-full", lambda s: bool(s.ascend_opt("merged_full")),
        "a merged FULL draft graph is vLLM-Ascend's (ACLGraphWrapper(_run_merged_draft)); "
        "upstream vLLM has no merged draft graph",
        "vllm-ascend captures its merged FULL draft graph only under FULL graphs; use "
        "--graph-mode full-decode-only (or full-and-piecewise, full)",
        ascend_asked=lambda s: (s.ascend_opt("merged_full") is True
                                and s.graph_mode not in _FULL_MODES),
    ),
    HostSwitch(
        "--no-merged-full", lambda s: False,
        "(honoured: upstream vLLM has no merged draft graph to turn off)",
        "under FULL graphs vllm-ascend always drafts through its merged FULL draft graph (per "
        "gamma with graph-per-gamma) and has no switch to turn it off; drop --no-merged-full "
        "or use --graph-mode piecewise",
        ascend_asked=lambda s: (s.ascend_opt("merged_full") is False
                                and s.graph_mode in _FULL_MODES),
    ),
)


def unsupported(settings: Settings, *, ascend: bool,
                origins: Mapping[str, str] | None = None) -> list[str]:
    """One line per switch the settings ask for that cannot apply on this host; with
    ``origins`` (option -> where it was set) each line says where the switch came from."""
    out = []
    for sw in SWITCHES:
        if sw.asked_on(settings, ascend=ascend):
            option = sw.flag.removeprefix("--").removeprefix("no-").replace("-", "_")
            where = (origins or {}).get(option) or (origins or {}).get("ascend")
            out.append(f"{sw.flag}: {sw.ascend if ascend else sw.upstream}"
                       + (f" (set by {where})" if where else ""))
    return out


def require_supported(settings: Settings, *, ascend: bool,
                      origins: Mapping[str, str] | None = None) -> None:
    """Raise :class:`UnsupportedSwitchError` naming every such switch (and, given
    ``origins``, the file, variable or flag that set it)."""
    lines = unsupported(settings, ascend=ascend, origins=origins)
    if lines:
        host = "vLLM-Ascend" if ascend else "upstream vLLM"
        raise UnsupportedSwitchError(
            f"vSpec on {host}: these switches ask for host capabilities that are not there:\n"
            + "\n".join(f"  * {line}" for line in lines)
        )


__all__ = ["SWITCHES", "HostSwitch", "UnsupportedSwitchError", "require_supported",
           "unsupported"]
