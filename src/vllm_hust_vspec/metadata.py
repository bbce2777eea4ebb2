"""``MOD_METADATA.json``: load it and check it against its JSON Schema and the source tree.

The file sits at the repository root (and in the sdist). It records repository identity,
the responsible maintainers, ``advisor_status``, default-off activation, the rollback
procedure, the plugin's scope and an evidence label for every performance statement of the
docs (see docs/metadata.md). Its schema ships in the package next to the manifest schemas.

The schema covers the shape; :func:`check_mod_metadata` adds what a schema cannot see: the
package version, the Extension-Manager manifests and (given the source tree) that every
evidence anchor still occurs in the doc it cites. Like ``bundle.py`` this imports nothing
from vLLM or vSpec's runtime layers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

FILENAME = "MOD_METADATA.json"
SCHEMA_PACKAGE = "vllm_hust_vspec.manifests"
SCHEMA_FILE = "mod-metadata.schema.json"
GATE_ENV = "HUST_VSPEC_ENABLED"
EVIDENCE_LABELS = (
    "measured-vllm-cpu-tiny",
    "simulated",
    "predecessor-claim-not-reproduced",
    "not-measured-on-npu",
)

_SPACE = re.compile(r"\s+")


def load_schema() -> dict[str, Any]:
    """The draft 2020-12 JSON Schema of ``MOD_METADATA.json`` shipped in the package."""
    res = resources.files(SCHEMA_PACKAGE) / "schemas" / SCHEMA_FILE
    schema: dict[str, Any] = json.loads(res.read_text(encoding="utf-8"))
    return schema


def load_mod_metadata(path: str | Path) -> dict[str, Any]:
    """Parse ``path`` as JSON; ``ValueError`` naming the file when it is not a JSON object."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: invalid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: not a JSON object")
    return doc


def load_manifest_files(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Parsed Extension-Manager manifests keyed by their path (for ``check_mod_metadata``)."""
    return {str(p): json.loads(p.read_text(encoding="utf-8")) for p in paths}


def _location(parts: Any) -> str:
    return "/".join(str(p) for p in parts) or "(top level)"


def schema_problems(doc: Mapping[str, Any]) -> list[str]:
    """JSON Schema errors, each prefixed with the path of the offending key."""
    # Imported here: the runtime plugin must not depend on jsonschema, only the checks do.
    # Unlike the manifests' optional schema pass, a missing jsonschema is a problem: the
    # release check must not pass on a check it did not run.
    try:
        import jsonschema  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return ["(top level): jsonschema is not installed, the schema check cannot run "
                "(pip install jsonschema)"]

    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for err in errors:
        where = _location(err.absolute_path)
        # A missing key is reported on its parent; name the key itself so the message says it.
        if err.validator == "required":
            missing = re.match(r"'([^']+)'", err.message)
            if missing:
                where = _location([*err.absolute_path, missing.group(1)])
        out.append(f"{where}: {err.message}")
    return out


def _normalise(text: str) -> str:
    # Docs wrap lines anywhere, so an anchor is compared with runs of whitespace collapsed.
    return _SPACE.sub(" ", text).strip()


def evidence_problems(doc: Mapping[str, Any], docs_root: Path) -> list[str]:
    """Evidence entries whose doc is missing or no longer contains the entry's anchor."""
    out: list[str] = []
    cache: dict[str, str | None] = {}
    for i, entry in enumerate(doc.get("evidence") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("doc"), str):
            continue
        rel = entry["doc"]
        if rel not in cache:
            f = docs_root / rel
            cache[rel] = _normalise(f.read_text(encoding="utf-8")) if f.is_file() else None
        text = cache[rel]
        if text is None:
            out.append(f"evidence/{i}/doc: {rel} does not exist")
        elif _normalise(str(entry.get("anchor", ""))) not in text:
            out.append(f"evidence/{i}/anchor: {entry.get('anchor')!r} does not occur in {rel} "
                       "(the doc changed: update the statement or its label)")
    return out


def _table(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    # The schema pass reports a non-object; the cross-checks then see an empty table.
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _manifest_problems(doc: Mapping[str, Any], version: str,
                       manifests: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    activation = _table(doc, "activation")
    ext_id = activation.get("extension_id")
    gate = (activation.get("gate_environment") or {}).get(GATE_ENV)
    for where, man in manifests.items():
        if man.get("extension_id") != ext_id:
            out.append(f"activation/extension_id: {ext_id!r} != {where} extension_id "
                       f"{man.get('extension_id')!r}")
        if man.get("extension_version") != version:
            out.append(f"package/version: {where} extension_version "
                       f"{man.get('extension_version')!r} != {version} (version mismatch)")
        env = (man.get("activation") or {}).get("environment") or {}
        if env.get(GATE_ENV) != gate:
            out.append(f"activation/gate_environment/{GATE_ENV}: {gate!r} != {where} "
                       f"activation environment {env.get(GATE_ENV)!r}")
    return out


def check_mod_metadata(path: str | Path, version: str,
                       manifests: Mapping[str, Mapping[str, Any]], *,
                       docs_root: Path | None = None) -> list[str]:
    """Every problem of the ``MOD_METADATA.json`` at ``path``; empty when it is consistent.

    ``version`` is the package version (``_version.py``); ``manifests`` maps a label (e.g. the
    file path) to each parsed Extension-Manager manifest, whose extension id, version and
    activation gate must agree. With ``docs_root`` (the source tree), every evidence entry's
    doc must exist there and contain its anchor. Each message starts with the offending key.
    """
    try:
        doc = load_mod_metadata(path)
    except (OSError, ValueError) as exc:
        return [str(exc)]
    return document_problems(doc, version, manifests, docs_root=docs_root)


def document_problems(doc: Mapping[str, Any], version: str,
                      manifests: Mapping[str, Mapping[str, Any]], *,
                      docs_root: Path | None = None, schema: bool = True) -> list[str]:
    """:func:`check_mod_metadata` for an already parsed document (e.g. read from an sdist).

    ``schema=False`` skips the JSON Schema pass (for a caller that has said why it cannot run).
    """
    out = schema_problems(doc) if schema else []
    pkg = _table(doc, "package")
    if pkg.get("version") != version:
        out.append(f"package/version: {pkg.get('version')!r} != package version {version} "
                   "(version mismatch)")
    out.extend(_manifest_problems(doc, version, manifests))
    if docs_root is not None:
        out.extend(evidence_problems(doc, docs_root))
    return out
