"""``vllm-hust-vspec-doctor``: does this host have every API vSpec's patches touch?

Two tiers. Static: find the host packages (installed, a checkout, or an sdist given with
``--source``) and check every class, method and parameter with ``ast``, importing nothing.
A checkout holding only some of a package's files (no ``__init__.py``) is read as far as it
goes: a check that needs a file it lacks is reported as not in this source. For vllm-ascend
the doctor also reports what the code does with per-step gamma (FACT lines) and runner calls
that do not fit the classes they call (a tree mixing code lines). Live (unless
``--source-only``/``--source``): import the host and check names and
signatures. Exit status: 0 when every required check passes, 1 when a required API is
missing or no host was found at all (neither ``vllm`` nor ``vllm_ascend`` installed for this
Python, and no ``--source``: nothing was checked, so nothing may pass), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from vllm_hust_vspec.host.abi import (
    FEATURES,
    METHODS,
    Report,
    SourceError,
    check_live,
    check_static,
    compat,
    merge,
    neighbours,
    render_text,
    runners,
    targets,
)
from vllm_hust_vspec.settings.legacy import LEGACY

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The doctor's command line."""
    ap = argparse.ArgumentParser(
        prog="vllm-hust-vspec-doctor",
        description="Check that the installed vLLM / vllm-ascend host has every API vSpec "
        "patches for a speculative method.",
    )
    ap.add_argument("--method", choices=METHODS, default="draft",
                    help="speculative method to check (default: draft)")
    ap.add_argument("--adaptive", action="store_true",
                    help="also check the per-step gamma channel (adaptive speculation)")
    ap.add_argument("--feature", action="append", default=[], choices=FEATURES,
                    help="also check the host capability a switch needs (repeatable): "
                    "graph_per_gamma (--graph-mode full*), mtp_strict_graph, acceptance")
    ap.add_argument("--all-features", action="store_true", help="check every --feature")
    ap.add_argument("--source", action="append", default=[], metavar="PATH",
                    help="read a host package from PATH (sdist .tar.gz, wheel .whl, checkout "
                    "root or package directory, also a partial tree without __init__.py) "
                    "instead of the installed one; repeatable (two partial trees of one "
                    "package are read as one, the first given winning); implies "
                    "--source-only")
    ap.add_argument("--source-only", action="store_true",
                    help="static tier only: never import the host")
    ap.add_argument("--with-plugins", action="store_true",
                    help="load the other vllm.general_plugins first, as vLLM does (each gates "
                    "itself on its own variable), to show which of vSpec's targets they wrap")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap


def run(args: argparse.Namespace) -> Report:
    """Run the requested tiers and return the merged report."""
    features = tuple(FEATURES) if args.all_features else tuple(dict.fromkeys(args.feature))
    if getattr(args, "with_plugins", False) and not (args.source_only or args.source):
        neighbours.load_plugins()
    static = check_static(args.method, args.adaptive, sources=args.source, features=features)
    live = None
    if not (args.source_only or args.source):
        live = check_live(args.method, args.adaptive, features=features, facts=True)
    return merge(static, live)


def host_found(report: Report) -> bool:
    """True when some host package was located (installed, or read from ``--source``)."""
    return any(h.installed for h in report.hosts)


def no_host_message() -> str:
    """Why a doctor run without any host fails, and how to point it at one."""
    return (
        "no vLLM host found: neither vllm nor vllm_ascend is installed for "
        f"{sys.executable}, so nothing was checked. Run the doctor with the Python that "
        "serves (e.g. the venv's bin/vllm-hust-vspec-doctor), or point it at a host with "
        "--source PATH (an sdist .tar.gz, a wheel .whl, a checkout or the package directory; "
        "repeatable for vllm and vllm-ascend)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except SourceError as exc:
        print(f"vllm-hust-vspec-doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    found = host_found(report)
    rows = runners.table_rows()
    if args.json:
        doc = report.as_dict()
        doc["host_found"] = found
        if not found:
            doc["ok"] = False
            doc["error"] = no_host_message()
        doc["runners"] = [{"feature": name, **cells} for name, cells in rows]
        doc["predecessor_switches"] = [
            {"flag": sw.flag, "upstream": sw.upstream, "vllm_ascend": sw.ascend}
            for sw in compat.SWITCHES] + [
            {"flag": row.flag, "upstream": row.note, "vllm_ascend": row.note}
            for row in LEGACY if row.new is None]
        doc.update(_neighbours_doc())
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        sys.stdout.write(_report_text(report, found))
        sys.stdout.write(_runner_text(rows))
        sys.stdout.write(_switch_text())
        sys.stdout.write(neighbours.render_text())
    if not found:
        print(f"vllm-hust-vspec-doctor: error: {no_host_message()}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK if report.ok else EXIT_FAIL


def _report_text(report: Report, found: bool) -> str:
    """The PASS/FAIL lines; without any host the closing result line says FAILED, never
    "OK (0 checks)"."""
    text = render_text(report)
    if found:
        return text
    head = text.rstrip("\n").rpartition("\n")[0]
    return f"{head}\nresult: FAILED (no vLLM host found; see the error below)\n"


def _neighbours_doc() -> dict[str, object]:
    """Other plugins, their wrappers on vSpec's targets and the rule for each (JSON)."""
    plugins = neighbours.installed_plugins()
    wrappers = neighbours.foreign_wrappers(only_imported=False)
    return {
        "other_plugins": [
            {"distribution": p.dist, "version": p.version, "entry_points": p.entry_points,
             "enabled": p.enabled, "rule": p.known.rule if p.known else None,
             "why": p.known.why if p.known else None} for p in plugins],
        "foreign_wrappers": [
            {"target": w.target, "plugin": w.plugin, "via": w.via, "known": w.known}
            for w in wrappers],
        "patched_targets": [t.label for t in targets.targets()],
    }


def _switch_text() -> str:
    """The predecessor's host switches: why each fails closed on either host."""
    out = ["predecessor switches this host cannot honour (asked for, the launch stops):"]
    for sw in compat.SWITCHES:
        out += [f"  {sw.flag}", f"    upstream vLLM: {sw.upstream}",
                f"    vLLM-Ascend: {sw.ascend}"]
    for row in LEGACY:
        if row.new is None:  # refused on every host (settings/legacy.py)
            out += [f"  {row.flag}", f"    any host: {row.note}"]
    return "\n".join(out) + "\n"


def _runner_text(rows: list[tuple[str, dict[str, str]]]) -> str:
    """The worker-feature table: what each model runner does with each feature."""
    out = ["worker features by model runner (the checks above are the V1 runner's; Model "
           "Runner V2 is vLLM's CUDA default since 0.32, and the worker checks the runner it "
           "builds before its model loads):"]
    for name, cells in rows:
        out.append(f"  {name}")
        out += [f"    {runner}: {cell}" for runner, cell in cells.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
