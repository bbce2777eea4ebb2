"""Command-line flags generated from the Settings definitions (one spelling per option)."""

from __future__ import annotations

import argparse
from typing import Any

from vllm_hust_vspec.settings import OPTIONS, OptionInfo, SettingsError
from vllm_hust_vspec.settings.coerce import coerce
from vllm_hust_vspec.settings.legacy import LEGACY, old_names_of

# argparse destination of a 0.14.3 flag: its raw value reaches resolve_settings under the old
# name, which settings/legacy.py translates there (one place, the same as TOML keys and env).
_LEGACY_DEST = "legacy__"

GROUP_TITLES = {
    "serve": "serving options",
    "adaptive": "adaptive controller options",
    "acceptance": "acceptance options (relaxed modes change outputs)",
    "draft": "draft model and vocabulary options",
    "ascend": "vLLM-Ascend options",
    "diagnostics": "diagnostics (slow; correctness checks and active-vocabulary data only)",
}


def _typed(opt: OptionInfo) -> Any:
    def parse(raw: str) -> Any:
        try:
            return coerce(opt, raw, f"flag {opt.flag}")
        except SettingsError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = opt.kind
    return parse


def _typed_part(opt: OptionInfo) -> Any:
    def parse(raw: str) -> list[int]:
        try:
            value = coerce(opt, raw, f"flag {opt.flag}")
        except SettingsError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return list(value)

    parse.__name__ = opt.kind
    return parse


class _JoinInts(argparse.Action):
    """Concatenate the integer lists of every word given after an ``ints`` flag."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, [i for part in values or [] for i in part])


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per option; unset flags stay absent from the namespace."""
    groups = {name: parser.add_argument_group(title) for name, title in GROUP_TITLES.items()}
    for opt in OPTIONS:
        group = groups[opt.group]
        text = f"{opt.help} [env {opt.env}; default {describe_default(opt)}]"
        if opt.kind == "bool":
            group.add_argument(
                opt.flag, dest=opt.name, action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS, help=text,
            )
        elif opt.kind == "ints":
            # The predecessor's spelling (--ids 15 16) and vSpec's (--ids 15,16) both parse.
            group.add_argument(
                opt.flag, dest=opt.name, nargs="*", type=_typed_part(opt),
                action=_JoinInts, default=argparse.SUPPRESS, metavar=opt.metavar or "ID",
                help=text,
            )
        else:
            group.add_argument(
                opt.flag, dest=opt.name, type=_typed(opt),
                default=argparse.SUPPRESS,
                **({"nargs": "?", "const": opt.bare} if opt.bare is not None else {}),
                metavar=opt.metavar or (opt.name.upper() if not opt.choices else None),
                choices=None, help=text + (f" (one of: {', '.join(opt.choices)})"
                                           if opt.choices else ""),
            )
    legacy = parser.add_argument_group(
        "0.14.3's option names (accepted; docs/migration.md gives each one's vSpec name)")
    for row in LEGACY:
        dest = _LEGACY_DEST + row.old
        if row.read_kind() == "bool":
            legacy.add_argument(row.flag, dest=dest, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        elif row.read_kind() == "ints":
            legacy.add_argument(row.flag, dest=dest, nargs="*", default=argparse.SUPPRESS,
                                help=argparse.SUPPRESS)
        else:
            legacy.add_argument(row.flag, dest=dest, default=argparse.SUPPRESS,
                                help=argparse.SUPPRESS)


def describe_default(opt: OptionInfo) -> str:
    """Human spelling of an option's default for --help and the README."""
    if opt.name == "gamma":
        return "4 (6 for mtp)"
    if opt.default is None:
        return "unset"
    if isinstance(opt.default, bool):
        return "on" if opt.default else "off"
    if opt.default in ([], {}):
        return "none"
    return str(opt.default)


def cli_values(ns: argparse.Namespace) -> dict[str, Any]:
    """The options the user actually gave on the command line."""
    out = {o.name: getattr(ns, o.name) for o in OPTIONS if hasattr(ns, o.name)}
    out.update({row.old: getattr(ns, _LEGACY_DEST + row.old) for row in LEGACY
                if hasattr(ns, _LEGACY_DEST + row.old)})
    return out


def flag_reference_markdown() -> str:
    """The README flag reference table, generated from the option definitions."""
    lines = []
    for group, title in GROUP_TITLES.items():
        lines += [f"**{title.capitalize()}**", "", "| flag / TOML key / env | default | meaning |",
                  "|---|---|---|"]
        for opt in OPTIONS:
            if opt.group != group:
                continue
            flag = f"`{opt.flag}`" + (f" / `--no-{opt.flag[2:]}`" if opt.kind == "bool" else "")
            meaning = opt.help + (f" One of: {', '.join(opt.choices)}." if opt.choices else "")
            olds = old_names_of(opt.name)
            if olds:
                meaning += " 0.14.3's names: " + ", ".join(
                    f"`--{a.replace('_', '-')}`" for a in olds) + " (docs/migration.md)."
            lines.append(
                f"| {flag}<br>`{opt.name}`<br>`{opt.env}` | {describe_default(opt)} | {meaning} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
