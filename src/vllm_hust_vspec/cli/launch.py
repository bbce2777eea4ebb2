"""``vllm-hust-vspec``: launch ``vllm serve`` with adaptive speculative decoding.

Examples::

    vllm-hust-vspec --protocol eagle --dry-run
    vllm-hust-vspec --protocol cpu-tiny -- --max-log-len 100
    VSPEC_CONFIG=my.toml vllm-hust-vspec --protocol draft --gamma 6
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence

from vllm_hust_vspec._version import __version__
from vllm_hust_vspec.cli.options import add_settings_arguments, cli_values
from vllm_hust_vspec.host.abi import compat
from vllm_hust_vspec.launch.command import build_serve_command
from vllm_hust_vspec.launch.models import ModelNotFoundError
from vllm_hust_vspec.launch.ownership import (
    LaunchConflictError,
    check_port_free,
    claim_metrics_dir,
)
from vllm_hust_vspec.settings import SettingsError, list_presets, preflight, resolve_settings
from vllm_hust_vspec.settings.sources import METHOD_PROTOCOLS, protocol_preset

EPILOG = """\
precedence (lowest first): preset (--protocol) < VSPEC_CONFIG file < --config file <
HUST_VSPEC_* environment < flags. Legacy SPECSLO_/SPECASCEND_ spellings are read below the new
ones. Arguments after '--' go to 'vllm serve' unchanged.
"""


def build_parser() -> argparse.ArgumentParser:
    """The launcher's parser (also used to generate the README flag reference)."""
    parser = argparse.ArgumentParser(
        prog="vllm-hust-vspec",
        description="Start 'vllm serve' with vSpec adaptive speculative decoding.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"vllm-hust-vspec {__version__}")
    parser.add_argument(
        "--protocol", "--preset", dest="protocol", metavar="NAME",
        help=f"preset to start from: {', '.join(list_presets())}; "
             f"{', '.join(METHOD_PROTOCOLS)} (picks its preset by --method); or a .toml path",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML config over the preset")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command and environment, then exit"
    )
    parser.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    parser.add_argument(
        "--list-presets", action="store_true", help="list the bundled presets and exit"
    )
    add_settings_arguments(parser)
    return parser


# The host packages whose switches compat checks, vLLM-Ascend first: it runs on top of vllm.
HOST_PACKAGES = ("vllm_ascend", "vllm")
NO_HOST = "no vLLM host is installed in this Python (neither vllm nor vllm_ascend is importable)"


class NoHostError(RuntimeError):
    """A launch (not a dry run) in a Python without any vLLM host."""


def installed_host() -> str | None:
    """The host package the launch would run on (``vllm_ascend`` or ``vllm``), or None.

    Only locates the packages (``find_spec``), never imports them: importing vLLM is slow and
    may initialise devices. With no host, a dry run cannot know which host's capabilities
    apply, so it skips the host checks instead of assuming upstream vLLM.
    """
    for name in HOST_PACKAGES:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split at the first ``--``: our flags before, ``vllm serve`` arguments after."""
    args = list(argv)
    if "--" in args:
        i = args.index("--")
        return args[:i], args[i + 1 :]
    return args, []


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exec()s vllm unless --dry-run."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["manifest"]:  # `vllm-hust-vspec manifest ...`: not a serve flag
        from vllm_hust_vspec.cli import manifest

        return manifest.main(args[1:])
    ours, passthrough = split_passthrough(args)
    parser = build_parser()
    ns = parser.parse_args(ours)
    if ns.list_presets:
        print("\n".join(list_presets()))
        return 0
    host = installed_host()
    try:
        cli = cli_values(ns)
        resolved = resolve_settings(
            preset=protocol_preset(ns.protocol, cli.get("method")), config=ns.config, cli=cli,
            env=os.environ,
        )
        preflight(resolved.settings, resolved.origins)
        if host is not None:
            resolved.require_honoured()
            compat.require_supported(resolved.settings, ascend=host == "vllm_ascend",
                                     origins=resolved.origins)
        elif not ns.dry_run:
            raise NoHostError(NO_HOST + "; install vLLM or vLLM-Ascend in this Python, or add "
                              "--dry-run to print the command")
        command = build_serve_command(resolved, os.environ, passthrough)
    except (SettingsError, ModelNotFoundError, compat.UnsupportedSwitchError,
            NoHostError) as exc:
        print(f"vllm-hust-vspec: error: {exc}", file=sys.stderr)
        return 2
    if host is None:
        print(f"vllm-hust-vspec: note: host checks skipped: {NO_HOST}", file=sys.stderr)
    for note in (*resolved.notes, *command.notes):
        print(f"vllm-hust-vspec: note: {note}", file=sys.stderr)
    if ns.dry_run:
        print(command.to_json() if ns.json else command.to_shell())
        return 0
    if ns.json:
        print("vllm-hust-vspec: error: --json needs --dry-run", file=sys.stderr)
        return 2
    env = {**os.environ, **command.env}
    try:
        check_port_free(resolved.settings.host, resolved.settings.port)
        # The lock's descriptor stays open through exec: the server holds it while it lives.
        claim_metrics_dir(env["PROMETHEUS_MULTIPROC_DIR"],
                          clear_stale="PROMETHEUS_MULTIPROC_DIR" not in os.environ)
    except LaunchConflictError as exc:
        print(f"vllm-hust-vspec: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execvpe(command.argv[0], command.argv, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
