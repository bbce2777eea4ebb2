"""The predecessor's (vllm-hust-vSpec 0.14) host-capability switches that vSpec does not
realise on this host: asked for, they stop the plugin at registration (before any model loads)
with one error naming each switch and what the host lacks, as the predecessor did. Never a
silent no-op.

Each entry says why, per host kind: on upstream vLLM these are vLLM-Ascend/ACL-graph features
(or, for the EAGLE tree, an upstream equivalent vSpec's per-step gamma cannot drive); on
vLLM-Ascend they need the vllm-ascend-hust ABI or a vSpec implementation that does not exist
yet (docs/hosts.md lists them).
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


_ASCEND_TODO = "vSpec implements no such path for vLLM-Ascend; unset the switch"
_FULL_MODES = ("full", "full-decode-only", "full-and-piecewise")

SWITCHES: tuple[HostSwitch, ...] = (
    HostSwitch(
        "--eagle-tree-width", lambda s: s.eagle_tree_width is not None,
        "upstream vLLM's EAGLE tree (speculative_config.speculative_token_tree) drafts one "
        "fixed tree, which vSpec's per-step gamma cannot drive; pass the tree through "
        "--speculative-config with --no-adaptive-speculation and without vSpec",
        "the fixed-width tree, its target widths and tree graph commit come from the "
        "vllm-ascend-hust ABI, which this vllm-ascend does not provide",
    ),
    HostSwitch(
        "--eagle-uniform-state-kernel", lambda s: s.eagle_uniform_state_kernel,
        "a vllm-ascend-hust NPU kernel; upstream vLLM has none",
        "the uniform-state kernel comes from the vllm-ascend-hust ABI, which this vllm-ascend "
        "does not provide",
    ),
    HostSwitch(
        "--eagle-spec-metadata-cache", lambda s: s.eagle_spec_metadata_cache,
        "a cache on vLLM-Ascend's async ACL-graph EAGLE path; upstream vLLM builds its "
        "metadata per step and has no such cache",
        _ASCEND_TODO,
    ),
    HostSwitch(
        "--eagle-zero-draft-kv-first-step", lambda s: s.eagle_zero_draft_kv_first_step,
        "a fix on vLLM-Ascend's draft KV path; upstream vLLM's proposers write the first "
        "draft step's KV themselves",
        _ASCEND_TODO,
    ),
    HostSwitch(
        "--graph-event-ordering", lambda s: s.graph_event_ordering,
        "ACL-graph device-event ordering (vllm_ascend.compilation.acl_graph); upstream vLLM "
        "orders CUDA graphs on one stream",
        _ASCEND_TODO,
    ),
    HostSwitch(
        "--merged-full", lambda s: bool(s.merged_full),
        "a merged FULL draft graph is vLLM-Ascend's (ACLGraphWrapper(_run_merged_draft)); "
        "upstream vLLM has no merged draft graph",
        "vllm-ascend captures its merged FULL draft graph only under FULL graphs; use "
        "--graph-mode full-decode-only (or full-and-piecewise, full)",
        ascend_asked=lambda s: s.merged_full is True and s.graph_mode not in _FULL_MODES,
    ),
    HostSwitch(
        "--no-merged-full", lambda s: False,
        "(honoured: upstream vLLM has no merged draft graph to turn off)",
        "under FULL graphs vllm-ascend always drafts through its merged FULL draft graph (per "
        "gamma with graph-per-gamma) and has no switch to turn it off; drop --no-merged-full "
        "or use --graph-mode piecewise",
        ascend_asked=lambda s: s.merged_full is False and s.graph_mode in _FULL_MODES,
    ),
    HostSwitch(
        "--merged-full-max-batch", lambda s: s.merged_full_max_batch is not None,
        "it sizes the merged FULL draft graph (--merged-full), which this host lacks",
        "it sizes the merged FULL draft graph (--merged-full); " + _ASCEND_TODO,
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
            where = (origins or {}).get(option)
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
