"""``vllm-hust-vspec manifest [validate|show]``: the bundle manifests without the manager.

Examples::

    vllm-hust-vspec manifest validate                 # both shipped manifests + install + host
    vllm-hust-vspec manifest validate --file my.json  # a manifest file of either schema
    vllm-hust-vspec manifest show                     # the discovered 0.3-experimental manifest
    vllm-hust-vspec manifest show --schema 0.2-experimental   # the same without the claims
    vllm-hust-vspec manifest show --format env        # export lines of the activation env

Exit status: 0 valid, 1 invalid, 2 usage or read error.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_hust_vspec import bundle
from vllm_hust_vspec._version import __version__

FORMATS = ("json", "summary", "summary-json", "path", "env", "activation")


def build_parser() -> argparse.ArgumentParser:
    """Parser for the ``manifest`` subcommand."""
    parser = argparse.ArgumentParser(
        prog="vllm-hust-vspec manifest",
        description="Validate or show vSpec's Extension-Manager manifests "
        f"(schemas: {', '.join(bundle.SPECS)}).",
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="{validate,show}")
    val = sub.add_parser("validate", help="check the manifests, the install and the host range")
    val.add_argument("--schema", choices=(*bundle.SPECS, "all"), default="all",
                     help="which shipped manifest to check (default: all)")
    val.add_argument("--file", type=Path, metavar="PATH",
                     help="validate this manifest file instead of the shipped ones")
    val.add_argument("--no-install-check", action="store_true",
                     help="skip the installed-metadata and host-range checks")
    val.add_argument("--json", action="store_true", help="print a JSON report")
    show = sub.add_parser("show", help="print a shipped manifest")
    show.add_argument("--schema", choices=tuple(bundle.SPECS), default=bundle.DEFAULT_SCHEMA,
                      help=f"schema version (default: {bundle.DEFAULT_SCHEMA})")
    show.add_argument(
        "--format", choices=FORMATS, default="json",
        help="json: the manifest; summary / summary-json: id, versions and file; path: the "
        "file; env: shell export lines of the activation environment; activation: the "
        "activation section as JSON",
    )
    return parser


def _validate(ns: argparse.Namespace) -> int:
    reports: list[bundle.Report] = []
    if ns.file is not None:
        try:
            doc = json.loads(ns.file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"vllm-hust-vspec manifest: error: cannot read {ns.file}: {exc}",
                  file=sys.stderr)
            return 2
        if not isinstance(doc, dict):
            print(f"vllm-hust-vspec manifest: error: {ns.file} must hold a JSON object",
                  file=sys.stderr)
            return 2
        reports.append(bundle.validate_document(doc, str(ns.file), __version__))
    else:
        schemas = tuple(bundle.SPECS) if ns.schema == "all" else (ns.schema,)
        for schema in schemas:
            doc = bundle.load_manifest(schema)
            source = str(bundle.manifest_resource(schema))
            report = bundle.validate_document(doc, source, __version__)
            if doc.get("schema_version") != schema:
                report.problems.append(
                    f"schema_version {doc.get('schema_version')!r} in the {schema} manifest"
                )
            reports.append(report)
        if not ns.no_install_check:
            reports.append(bundle.installation_report(__version__))
    ok = all(r.ok for r in reports)
    if ns.json:
        print(json.dumps({"ok": ok, "reports": [r.as_dict() for r in reports]}, indent=2))
    else:
        for r in reports:
            print(f"{'OK  ' if r.ok else 'FAIL'} [{r.schema_version}] {r.source}")
            for p in r.problems:
                print(f"     problem: {p}")
            for n in r.notes:
                print(f"     note: {n}")
    return 0 if ok else 1


def _show(ns: argparse.Namespace) -> int:
    doc: dict[str, Any] = bundle.load_manifest(ns.schema)
    activation: dict[str, Any] = doc.get("activation", {})
    if ns.format == "json":
        print(json.dumps(doc, indent=2))
    elif ns.format == "path":
        print(bundle.manifest_resource(ns.schema))
    elif ns.format == "activation":
        print(json.dumps(activation, indent=2))
    elif ns.format == "env":
        for key, value in sorted(activation.get("environment", {}).items()):
            print(f"export {key}={shlex.quote(str(value))}")
    else:
        installed = bundle.installed_version(bundle.DISTRIBUTION)
        if ns.format == "summary-json":
            print(json.dumps({
                "extension_id": doc["extension_id"],
                "extension_version": doc["extension_version"],
                "schema_version": doc["schema_version"],
                "installed_version": installed,
                "manifest_path": str(bundle.manifest_resource(ns.schema)),
                "enabled": None,  # only the Extension Manager records enablement
            }, indent=2))
        else:
            print(f"{doc['extension_id']} {doc['extension_version']} "
                  f"schema={doc['schema_version']} installed={installed or 'no'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``vllm-hust-vspec manifest ...``; returns the exit status."""
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        return _validate(ns) if ns.action == "validate" else _show(ns)
    except bundle.ManifestError as exc:
        print(f"vllm-hust-vspec manifest: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
