"""Release checks behind ./release.sh: source consistency and built-artefact contents.

    python scripts/release_check.py source --root .
    python scripts/release_check.py artefacts --root . [dist/*.whl dist/*.tar.gz]
    python scripts/release_check.py tables [--check]

``source``: one version everywhere (``_version.py``, both manifests' ``extension_version``,
artefact names in dist/), pyproject entry points and license, both manifests valid, and
``MOD_METADATA.json`` valid against its schema, the version, the manifests and the docs.
``artefacts``: the wheel (manifests, schemas, entry points, METADATA, LICENSE, every RECORD
hash) and the sdist (PKG-INFO, manifests, MOD_METADATA.json, LICENSE, the operator scripts,
and every file of scripts/, configs/, profiles/ and docs/), then a SHA256 list. Exit 1 with
each problem named; 2 on usage errors.
``tables``: rewrite the generated tables of the docs from the settings definitions
(README.md's flag reference, docs/migration.md's 0.14.3 names); ``--check``: exit 1 when one is
stale instead.

The package checked is the one under ``--root``'s ``src/``, not whichever copy is installed.
"""

from __future__ import annotations

import argparse
import base64
import configparser
import csv
import hashlib
import importlib.util
import io
import json
import re
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path
from types import ModuleType
from typing import Any

PKG = "vllm_hust_vspec"
DIST = "vllm-hust-vspec"
EXTENSION_ID = "org.vllm-hust.vspec"
# The discovered manifest (alone in the bundle package; schema 0.3-experimental, with the
# resource claims) and its claim-less 0.2-experimental form.
MANIFEST_BUNDLE = f"{PKG}/manifests/vllm-hust-extension-v0.2.json"
MANIFEST_02 = f"{PKG}/manifests/v0_2/vllm-hust-extension-v0.2.json"
MANIFESTS = ((MANIFEST_BUNDLE, "0.3-experimental"), (MANIFEST_02, "0.2-experimental"))
SCHEMAS = (
    f"{PKG}/manifests/schemas/manifest-0.3-experimental.schema.json",
    f"{PKG}/manifests/schemas/manifest-0.2-experimental.schema.json",
    f"{PKG}/manifests/schemas/mod-metadata.schema.json",
)
MOD_METADATA = "MOD_METADATA.json"
LICENSE = "LICENSE"
LICENSE_EXPRESSION = "Apache-2.0"
WHEEL_REQUIRED = (
    f"{PKG}/__init__.py", f"{PKG}/_version.py", f"{PKG}/manifests/__init__.py",
    f"{PKG}/manifests/v0_2/__init__.py", f"{PKG}/metadata.py", MANIFEST_BUNDLE, MANIFEST_02,
    *SCHEMAS,
)
ENTRY_POINTS = {
    ("vllm.general_plugins", "vspec"): "vllm_hust_vspec:register",
    ("vllm_hust.extension_bundles", EXTENSION_ID): "vllm_hust_vspec.manifests",
    ("console_scripts", "vllm-hust-vspec"): "vllm_hust_vspec.cli.launch:main",
}
SDIST_FILES = (
    "PKG-INFO", "pyproject.toml", "README.md", "MANIFEST.in", "manage.sh", "install.sh",
    "uninstall.sh", "release.sh", MOD_METADATA, LICENSE, f"src/{PKG}/_version.py",
    f"src/{MANIFEST_BUNDLE}", f"src/{MANIFEST_02}", *(f"src/{s}" for s in SCHEMAS),
)
SDIST_TREES = ("scripts", "configs", "profiles", "docs")
# A hard dependency on any of these would make pip replace the operator's host stack.
HOST_PACKAGES = re.compile(r"^(vllm|vllm-ascend|vllm_ascend|torch|torch-npu|torch_npu)\b", re.I)


def tree_version(root: Path) -> str:
    """``__version__`` from ``src/vllm_hust_vspec/_version.py`` (read, not imported)."""
    text = (root / "src" / PKG / "_version.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise SystemExit(f"release_check: no __version__ in {root}/src/{PKG}/_version.py")
    return match.group(1)


def load_tree_package(root: Path) -> ModuleType:
    """The package of the source tree at ``root`` imported as ``vllm_hust_vspec``, so that its
    submodules come from that tree too (a release checks its own tree, not the installed copy,
    which may be another checkout)."""
    pkg_dir = (root / "src" / PKG).resolve()
    loaded = sys.modules.get(PKG)
    if loaded is not None and Path(str(loaded.__file__)).resolve().parent == pkg_dir:
        return loaded
    spec = importlib.util.spec_from_file_location(
        PKG, pkg_dir / "__init__.py", submodule_search_locations=[str(pkg_dir)])
    if spec is None or spec.loader is None:
        raise SystemExit(f"release_check: no package at {pkg_dir}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[PKG] = module
    spec.loader.exec_module(module)
    return module


def load_bundle(root: Path) -> ModuleType:
    """The source tree's ``vllm_hust_vspec.bundle`` (rules + JSON Schemas)."""
    load_tree_package(root)
    import vllm_hust_vspec.bundle as bundle

    return bundle


def load_metadata_module(root: Path) -> ModuleType:
    """The source tree's ``vllm_hust_vspec.metadata`` (MOD_METADATA.json schema + checks)."""
    load_tree_package(root)
    import vllm_hust_vspec.metadata as metadata

    return metadata


def render_table(text: str, tag: str, table: str) -> str:
    """``text`` with the block between its ``<!-- TAG:begin ... -->`` and ``<!-- TAG:end -->``
    lines replaced by ``table``."""
    head, rest = text.split(f"<!-- {tag}:begin", 1)
    begin, rest = rest.split("\n", 1)
    _, tail = rest.split(f"<!-- {tag}:end -->", 1)
    return f"{head}<!-- {tag}:begin{begin}\n{table}<!-- {tag}:end -->{tail}"


def generated_tables() -> list[tuple[str, str, str]]:
    """(file under the root, block tag, its content) of every generated table."""
    from vllm_hust_vspec.cli.options import flag_reference_markdown
    from vllm_hust_vspec.settings.legacy import migration_markdown

    return [("README.md", "flags", flag_reference_markdown()),
            ("docs/migration.md", "legacy", migration_markdown())]


def tables_main(root: Path, check: bool) -> int:
    """Rewrite the generated tables, or with ``check`` name the stale ones (exit 1)."""
    load_tree_package(root)
    stale = []
    for rel, tag, table in generated_tables():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = render_table(text, tag, table)
        if new == text:
            continue
        if check:
            stale.append(f"{rel} ({tag})")
        else:
            path.write_text(new, encoding="utf-8")
    for name in stale:
        print(f"tables: {name} is stale: run scripts/release_check.py tables", file=sys.stderr)
    return 1 if stale else 0


def mod_metadata_problems(root: Path, version: str, dist_name: str) -> list[str]:
    """``MOD_METADATA.json`` against its schema, the version, both manifests and the docs."""
    path = root / MOD_METADATA
    if not path.is_file():
        return [f"{path}: missing (see docs/metadata.md)"]
    metadata = load_metadata_module(root)
    manifests = metadata.load_manifest_files([root / "src" / rel for rel, _ in MANIFESTS])
    out = [f"{MOD_METADATA}: {p}" for p in
           metadata.check_mod_metadata(path, version, manifests, docs_root=root)]
    name = metadata.load_mod_metadata(path).get("package", {}).get("name")
    if name != dist_name:
        out.append(f"{MOD_METADATA}: package/name {name!r} != pyproject name {dist_name!r}")
    return out


def source_problems(root: Path) -> list[str]:
    """Version single-source and manifest problems of a source tree."""
    out: list[str] = []
    version = tree_version(root)
    bundle = load_bundle(root)
    for rel, schema in MANIFESTS:
        path = root / "src" / rel
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema_version") != schema:
            out.append(f"{path}: schema_version {doc.get('schema_version')!r}, expected {schema}")
        report = bundle.validate_document(doc, str(path), version)
        out.extend(f"{path}: {p}" for p in report.problems)
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    dyn = project.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version", {})
    if dyn.get("attr") != f"{PKG}._version.__version__":
        out.append("pyproject.toml: version must be dynamic from vllm_hust_vspec._version")
    eps = project["project"].get("entry-points", {})
    for (group, name), value in ENTRY_POINTS.items():
        table = project["project"].get("scripts", {}) if group == "console_scripts" else (
            eps.get(group, {}))
        if table.get(name) != value:
            out.append(f"pyproject.toml: entry point {group}:{name} must be {value!r}")
    if project["project"].get("license") != LICENSE_EXPRESSION:
        out.append(f"pyproject.toml: license must be {LICENSE_EXPRESSION!r}")
    if LICENSE not in project["project"].get("license-files", []):
        out.append(f"pyproject.toml: license-files must list {LICENSE!r}")
    if not (root / LICENSE).is_file():
        out.append(f"{root / LICENSE}: missing")
    out.extend(mod_metadata_problems(root, version, project["project"].get("name", "")))
    for dep in project["project"].get("dependencies", []):
        if HOST_PACKAGES.match(dep):
            out.append(f"pyproject.toml: hard dependency {dep!r} would replace the host stack")
    dist = root / "dist"
    for art in sorted(dist.glob("vllm_hust_vspec-*")) if dist.is_dir() else []:
        if art.name not in (wheel_name(version), sdist_name(version)):
            out.append(f"{art}: stale artefact, not version {version}; run ./release.sh build")
    return out


def wheel_name(version: str) -> str:
    """The file name of this version's wheel."""
    return f"{PKG}-{version}-py3-none-any.whl"


def sdist_name(version: str) -> str:
    """The file name of this version's sdist."""
    return f"{PKG}-{version}.tar.gz"


def _record_problems(zf: zipfile.ZipFile, record_path: str) -> list[str]:
    out: list[str] = []
    names = {n for n in zf.namelist() if not n.endswith("/")}
    listed: set[str] = set()
    rows = csv.reader(io.StringIO(zf.read(record_path).decode("utf-8")))
    for row in rows:
        if not row:
            continue
        path, digest, size = (row + ["", ""])[:3]
        listed.add(path)
        if path == record_path:
            continue
        if path not in names:
            out.append(f"RECORD lists {path}, which is not in the wheel")
            continue
        data = zf.read(path)
        algo, _, want = digest.partition("=")
        if algo != "sha256":
            out.append(f"RECORD: {path} has no sha256 hash")
            continue
        got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if got != want:
            out.append(f"RECORD hash mismatch for {path} (the wheel was modified after build)")
        if size and int(size) != len(data):
            out.append(f"RECORD size mismatch for {path}")
    for missing in sorted(names - listed):
        out.append(f"{missing} is in the wheel but not in RECORD")
    return out


def _manifest_problems(doc: Any, where: str, version: str, schema: str,
                       bundle: ModuleType | None) -> list[str]:
    if not isinstance(doc, dict):
        return [f"{where}: not a JSON object"]
    out = []
    if doc.get("schema_version") != schema:
        out.append(f"{where}: schema_version {doc.get('schema_version')!r}, expected {schema}")
    if doc.get("extension_version") != version:
        out.append(f"{where}: extension_version {doc.get('extension_version')!r} != {version} "
                   "(version mismatch)")
    if bundle is not None:
        out.extend(f"{where}: {p}" for p in bundle.validate_document(doc, where, version)
                   .problems)
    return out


def wheel_problems(path: Path, version: str, bundle: ModuleType | None) -> list[str]:
    """Everything wrong with a built wheel."""
    out: list[str] = []
    if path.name != wheel_name(version):
        out.append(f"expected file name {wheel_name(version)}")
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        return [f"{path}: not a zip file ({exc})"]
    with zf:
        names = set(zf.namelist())
        info = f"{PKG}-{version}.dist-info"
        for req in (*WHEEL_REQUIRED, f"{info}/METADATA", f"{info}/RECORD",
                    f"{info}/entry_points.txt", f"{info}/licenses/{LICENSE}"):
            if req not in names:
                out.append(f"{req} is missing")
        if out:
            return out
        direct = [n for n in names if re.fullmatch(rf"{PKG}/manifests/[^/]+\.json", n)]
        if direct != [MANIFEST_BUNDLE]:
            out.append(f"the bundle package must hold exactly one manifest, "
                       f"found {sorted(direct)}")
        meta = Parser().parsestr(zf.read(f"{info}/METADATA").decode("utf-8"))
        if meta["Name"] != DIST or meta["Version"] != version:
            out.append(f"METADATA: Name/Version {meta['Name']} {meta['Version']}, "
                       f"expected {DIST} {version}")
        if meta["License-Expression"] != LICENSE_EXPRESSION:
            out.append(f"METADATA: License-Expression {meta['License-Expression']!r}, "
                       f"expected {LICENSE_EXPRESSION}")
        for req in meta.get_all("Requires-Dist") or []:
            if HOST_PACKAGES.match(req) and "extra ==" not in req:
                out.append(f"METADATA: hard dependency {req!r} would replace the host stack")
        eps = configparser.ConfigParser(delimiters=("=",))
        eps.optionxform = str  # type: ignore[assignment,method-assign]
        eps.read_string(zf.read(f"{info}/entry_points.txt").decode("utf-8"))
        for (group, name), value in ENTRY_POINTS.items():
            got = eps.get(group, name, fallback=None)
            if got is None or got.strip() != value:
                out.append(f"entry_points.txt: {group}:{name} is {got!r}, expected {value!r}")
        for rel, schema in MANIFESTS:
            try:
                doc = json.loads(zf.read(rel))
            except json.JSONDecodeError as exc:
                out.append(f"{rel}: invalid JSON ({exc})")
                continue
            out.extend(_manifest_problems(doc, rel, version, schema, bundle))
        out.extend(_record_problems(zf, f"{info}/RECORD"))
    return out


def sdist_problems(path: Path, version: str, root: Path | None) -> list[str]:
    """Everything wrong with a built sdist."""
    out: list[str] = []
    if path.name != sdist_name(version):
        out.append(f"expected file name {sdist_name(version)}")
    try:
        with tarfile.open(path, "r:gz") as tf:
            return out + _sdist_member_problems(tf, version, root)
    except (tarfile.TarError, OSError) as exc:
        return [f"{path}: not a readable .tar.gz ({exc})"]


def _sdist_member_problems(tf: tarfile.TarFile, version: str,
                           root: Path | None) -> list[str]:
    out: list[str] = []
    top = f"{PKG}-{version}"
    members = {m.name: m for m in tf.getmembers()}
    for req in SDIST_FILES:
        if f"{top}/{req}" not in members:
            out.append(f"{req} is missing")
    if out:
        return out

    def text(rel: str) -> str:
        handle = tf.extractfile(members[f"{top}/{rel}"])
        assert handle is not None
        return handle.read().decode("utf-8")

    if Parser().parsestr(text("PKG-INFO"))["Version"] != version:
        out.append(f"PKG-INFO version is not {version}")
    if f'__version__ = "{version}"' not in text(f"src/{PKG}/_version.py"):
        out.append(f"_version.py is not {version} (version mismatch)")
    manifests = {}
    for rel, schema in MANIFESTS:
        manifests[f"src/{rel}"] = json.loads(text(f"src/{rel}"))
        out.extend(_manifest_problems(manifests[f"src/{rel}"], f"src/{rel}", version,
                                      schema, None))
    if root is not None:
        try:
            mod = json.loads(text(MOD_METADATA))
        except json.JSONDecodeError as exc:
            out.append(f"{MOD_METADATA}: invalid JSON ({exc})")
        else:
            # The docs are checked by source-check; here the sdist's own copy must still
            # match its schema, its version and its manifests. Like the manifests' schema
            # pass in this mode, the schema is skipped (said, not silently) without
            # jsonschema; source-check fails without it.
            have_schema = importlib.util.find_spec("jsonschema") is not None
            if not have_schema:
                print(f"check: note: jsonschema not installed: {MOD_METADATA} schema check "
                      "skipped (./release.sh source-check runs it)", file=sys.stderr)
            out.extend(f"{MOD_METADATA}: {p}" for p in load_metadata_module(root)
                       .document_problems(mod, version, manifests, schema=have_schema))
    for tree in SDIST_TREES:
        have = {n[len(top) + 1:] for n in members if n.startswith(f"{top}/{tree}/")
                and members[n].isfile()}
        if root is None:
            if not have and tree != "profiles":
                out.append(f"{tree}/ is missing")
            continue
        want = {str(p.relative_to(root)) for p in (root / tree).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
        for missing in sorted(want - have):
            out.append(f"{missing} is missing (rebuild: ./release.sh build)")
    return out


def sha256_lines(paths: list[Path]) -> list[str]:
    """``sha256sum``-style lines."""
    return [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in paths]


def main(argv: list[str] | None = None) -> int:
    """CLI; see the module docstring."""
    parser = argparse.ArgumentParser(prog="release_check.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("source", "artefacts", "tables"))
    parser.add_argument("files", nargs="*", type=Path, help="artefacts (default: dist/*)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--check", action="store_true",
                        help="tables: exit 1 when a generated table is stale, write nothing")
    ns = parser.parse_intermixed_args(argv)
    root = ns.root.resolve()
    if ns.mode == "tables":
        return tables_main(root, ns.check)
    if ns.mode == "source":
        problems = source_problems(root)
        for p in problems:
            print(f"source-check: {p}", file=sys.stderr)
        if not problems:
            print(f"source-check: version {tree_version(root)} is consistent")
        return 1 if problems else 0
    files: list[Path] = ns.files
    problems = []
    if not files:
        files = sorted((root / "dist").glob("*")) if (root / "dist").is_dir() else []
        if len(files) != 2:
            print(f"check: dist/ must hold exactly the wheel and the sdist, found "
                  f"{[f.name for f in files]}; run ./release.sh build", file=sys.stderr)
            return 1
    version = tree_version(root)
    bundle = load_bundle(root)
    for f in files:
        if f.name.endswith(".whl"):
            problems += [f"{f.name}: {p}" for p in wheel_problems(f, version, bundle)]
        elif f.name.endswith(".tar.gz"):
            problems += [f"{f.name}: {p}" for p in sdist_problems(f, version, root)]
        else:
            problems.append(f"{f}: neither a wheel nor an sdist")
    for p in problems:
        print(f"check: FAIL {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check: OK {', '.join(f.name for f in files)} (version {version})")
    print("SHA256:")
    print("\n".join(sha256_lines(files)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
