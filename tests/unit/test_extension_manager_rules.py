"""vSpec's manifests against the real vLLM-HUST Extension Managers' rules.

The rules below were read from the source of both manager code lines,
``vLLM-HUST/extension-manager`` and ``intellistream/vllm-hust-ext-manager``: discovery (the
``vllm_hust.extension_bundles`` entry point names a package directory that must hold exactly
one manifest from a fixed list of names, no symlinks), the experimental ``parse_manifest``
(schema versions, fields, patterns, enums) and the run gate (host version from the metadata of
the distribution ``host.name``, ranged protocols must be advertised, an unverified trusted
in-process extension is refused). No release of either manager is installable from the package
index, so the rules are restated here, compactly, and evaluated with the real ``packaging``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
GROUP = "vllm_hust.extension_bundles"
HUST_NAMES = ("vllm-hust-extension-v0.2.json", "vllm-hust-extension-v1.json",
              "extension-bundle-v1.json")
INTELLI_NAMES = ("vllm-hust-extension-v0.3.json", *HUST_NAMES)
HUST_SCHEMAS = {"1.0", "0.2-experimental", "0.3-experimental", "0.3"}
HUST_OLDER_SCHEMAS = {"1.0", "0.2-experimental"}
INTELLI_SCHEMAS = {"1.0", "0.2-experimental", "0.3-experimental"}

ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
RESOURCE = re.compile(r"^[a-z0-9][a-z0-9._:/-]*$")
REF = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
MODULE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
OPTIONAL = {"components", "activation", "requires_extensions", "resource_claims"}
FIELDS = {"schema_version", "extension_id", "extension_version", "kind", "host", "runtime",
          "lifecycle_owner", "protocols", "implementation", "requires_services"} | OPTIONAL
KINDS = {"in_process_plugin", "scheduler_policy", "kv_connector", "kv_service_adapter",
         "control_plane_extension", "runtime_bridge"}
OWNERS = {"vllm", "host", "external_operator", "kubernetes", "user"}
RUNTIMES = {"python", "external_service", "oci", "kubernetes", "composite"}
CARRIERS = {"host_builtin", "python_entry_point", "python_module", "external_service",
            "oci_image", "helm_values", "kubernetes_manifest", "crd", "controller"}
PLANES = {"api", "scheduler", "worker", "native", "device", "bridge"}
ISOLATIONS = {"trusted_in_process", "process_isolated", "sandboxed_process"}
PERMISSIONS = {"device_access", "filesystem_read", "filesystem_write", "ipc", "network_egress",
               "shared_memory", "subprocess"}
# What hosts advertise (vllm.plugins.extension_capabilities or the legacy constants).
ADVERTISED = {"vllm.preemption-policy", "vllm.batch-admission-policy",
              "vllm.request-processing-hook", "vllm.kv-materialization-runtime-control"}
HOST_VERSIONS = ("0.17.2rc1.dev5871+g762f85b31.empty", "0.28.1rc1.dev319+g762f85b31.empty",
                 "0.17.2.post1", "0.31.0", "0.32.0", "0.33.0")


class Rejected(ValueError):
    """The manager refuses the bundle."""


def need(ok: object, why: str) -> None:
    if not ok:
        raise Rejected(why)


def keys_ok(obj: Any, required: set[str], optional: Iterable[str] = ()) -> bool:
    return isinstance(obj, dict) and required <= set(obj) <= required | set(optional)


def discover(directory: Path, names: tuple[str, ...]) -> Path:
    found = [directory / n for n in names if (directory / n).exists()
             or (directory / n).is_symlink()]
    need(len(found) == 1, f"{directory} must contain exactly one Bundle v1 manifest")
    need(not found[0].is_symlink(), f"{found[0]} is a symlink")
    return found[0]


def parse(doc: dict[str, Any], schemas: set[str], *,
          null_protocol_range: bool = True) -> dict[str, Any]:
    """The experimental ``parse_manifest``; raises :class:`Rejected` (or packaging errors).

    ``null_protocol_range=False``: vLLM-HUST/extension-manager at 0439f25c parses a protocol's
    version_range with ``_specifier`` (src/vllm_hust_ext/manifest.py ``_parse_protocols``), so
    null is "must be a non-empty string"; from 2f458d5a on it is ``_optional_specifier``.
    """
    sv = doc.get("schema_version")
    need(sv in schemas, f"unsupported schema_version {sv!r}")
    need(sv != "1.0", "the Bundle v1 parser is not modelled here")
    need(keys_ok(doc, FIELDS - OPTIONAL, OPTIONAL), "unknown or missing fields")
    need(str(sv).startswith("0.3") or not {"requires_extensions", "resource_claims"} & set(doc),
         "requires_extensions/resource_claims need a 0.3 schema")
    need(isinstance(doc["extension_id"], str) and ID.match(doc["extension_id"]), "extension_id")
    Version(doc["extension_version"])
    need(doc["kind"] in KINDS and doc["lifecycle_owner"] in OWNERS, "kind/lifecycle_owner")
    rt = doc["runtime"]
    need(keys_ok(rt, {"type", "process_scope", "isolation"}) and rt["type"] in RUNTIMES
         and all(isinstance(rt[k], str) and rt[k] for k in ("process_scope", "isolation")),
         "runtime")
    host = doc["host"]
    need(keys_ok(host, {"provider", "name", "version_range"}, {"api_range"})
         and ID.match(host["provider"]), "host")
    SpecifierSet(host["version_range"])
    if host.get("api_range") is not None:
        SpecifierSet(host["api_range"])
    need(isinstance(doc["protocols"], list), "protocols")
    for p in doc["protocols"]:
        need(keys_ok(p, {"name", "version_range"}), "protocol keys")
        need(null_protocol_range or p["version_range"] is not None,
             "protocols[].version_range must be a non-empty string")
        if p["version_range"] is not None:
            SpecifierSet(p["version_range"])
    impl = doc["implementation"]
    need(isinstance(impl, list) and impl and all(
        isinstance(c, dict) and c.get("type") in CARRIERS and len(c) >= 2 for c in impl),
        "implementation")
    need(isinstance(doc["requires_services"], list) and all(keys_ok(
        s, {"service_id", "protocol", "version_range", "endpoint_config"}, {"optional"})
        for s in doc["requires_services"]), "requires_services")
    deps = doc.get("requires_extensions", [])
    need(all(keys_ok(d, {"extension_id", "version_range"}) and ID.match(d["extension_id"])
             and d["version_range"] is not None for d in deps)
         and len({d["extension_id"] for d in deps}) == len(deps), "requires_extensions")
    for d in deps:
        SpecifierSet(d["version_range"])
    claims = doc.get("resource_claims", [])
    need(all(keys_ok(c, {"resource", "scope", "mode"}) and RESOURCE.match(c["resource"])
             and RESOURCE.match(c["scope"]) and c["mode"] in {"exclusive", "shared"}
             for c in claims)
         and len({json.dumps(c, sort_keys=True) for c in claims}) == len(claims),
         "resource_claims")
    comps = doc.get("components") or []
    for c in comps:
        need(keys_ok(c, {"component_id", "contracts", "execution_planes", "isolation",
                         "implementation_ref"}, {"permissions"})
             and ID.match(c["component_id"]) and c["contracts"]
             and len(set(c["contracts"])) == len(c["contracts"])
             and all(k.startswith("vllm.") for k in c["contracts"])
             and set(c["execution_planes"]) <= PLANES and c["isolation"] in ISOLATIONS
             and REF.match(c["implementation_ref"])
             and set(c.get("permissions", [])) <= PERMISSIONS, "component")
    need(len({c["component_id"] for c in comps}) == len(comps), "duplicate component_id")
    act = doc.get("activation", {})
    need(keys_ok(act, set(), {"entry_points", "environment", "additional_config"})
         and all(keys_ok(e, {"group", "name"}) for e in act.get("entry_points", []))
         and all(isinstance(v, str) for v in act.get("environment", {}).values()),
         "activation")
    return doc


def _load(target: Path, names: tuple[str, ...]) -> dict[str, Any]:
    # A directory is discovered; a file is a manifest the manager was pointed at explicitly.
    path = discover(target, names) if target.is_dir() else target
    return json.loads(path.read_text(encoding="utf-8"))


def vllm_hust_manager(target: Path, *, older: bool = False) -> dict[str, Any]:
    """vLLM-HUST/extension-manager (``older``: a release whose parser predates 0.3)."""
    return parse(_load(target, HUST_NAMES), HUST_OLDER_SCHEMAS if older else HUST_SCHEMAS)


def intellistream_manager(target: Path) -> dict[str, Any]:
    """intellistream/vllm-hust-ext-manager."""
    return parse(_load(target, INTELLI_NAMES), INTELLI_SCHEMAS)


def run_gate(doc: dict[str, Any], version_of: Callable[[str], str] = metadata.version,
             host_version: str | None = None, *, skip_null: bool = True,
             configuration: dict[str, Any] | None = None) -> tuple[str, str | None]:
    """(compatibility, refusal or None): ``providers/base.py`` ``assess_compatibility`` and the
    trusted-in-process check of ``cli.py`` ``_run_command``.

    ``host_version`` (or ``configuration["host_version"]``) is the per-extension override the
    manager stores with ``extension configure``. ``skip_null=False``: vLLM-HUST at 983ac89b
    (providers/base.py) looks every listed protocol up among the advertised ones, null range
    or not ("protocol ... version is unavailable"); intellistream at 4ce977b skips null ranges.
    """
    host_version = (configuration or {}).get("host_version", host_version)
    if host_version is None:
        try:
            host_version = version_of(doc["host"]["name"])
        except metadata.PackageNotFoundError:
            host_version = None
    if host_version is None:
        status = "unknown"
    elif Version(host_version) not in SpecifierSet(doc["host"]["version_range"]):
        status = "incompatible"
    elif any((p["version_range"] is not None or not skip_null) and p["name"] not in ADVERTISED
             for p in doc["protocols"]):
        status = "unknown"
    else:
        status = "compatible"
    trusted = "trusted_in_process" in {doc["runtime"]["isolation"]} | {
        c["isolation"] for c in doc.get("components") or []}
    refusal = ("refusing to launch unverified trusted in-process extension"
               if trusted and status != "compatible" else None)
    return status, refusal


def installed(**dists: str) -> Callable[[str], str]:
    def version_of(name: str) -> str:
        if name not in dists:
            raise metadata.PackageNotFoundError(name)
        return dists[name]
    return version_of


def bundle_dir() -> Path:
    """The package directory the wheel's entry point names, checked like the managers do."""
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    ((name, value),) = eps[GROUP].items()
    assert MODULE.match(value), value  # a bare module path, no ':attr'
    spec = importlib.util.find_spec(value)
    assert spec is not None and spec.submodule_search_locations, value  # a package
    directory = Path(list(spec.submodule_search_locations)[0])
    assert name == json.loads(discover(directory, HUST_NAMES).read_text())["extension_id"]
    return directory


DISCOVERED = bundle_dir()
V03 = DISCOVERED / "v0_3" / "vllm-hust-extension-v0.3.json"


@pytest.mark.parametrize("names", [HUST_NAMES, INTELLI_NAMES])
def test_bundle_directory_holds_one_discoverable_manifest(names: tuple[str, ...]) -> None:
    assert [n for n in names if (DISCOVERED / n).exists()] == ["vllm-hust-extension-v0.2.json"]
    assert discover(DISCOVERED, names).name == "vllm-hust-extension-v0.2.json"


def test_discovered_manifest_parses_under_every_manager() -> None:
    docs = [vllm_hust_manager(DISCOVERED), vllm_hust_manager(DISCOVERED, older=True),
            intellistream_manager(DISCOVERED)]
    assert {d["schema_version"] for d in docs} == {"0.2-experimental"}


def test_v03_manifest_parses_under_both_newest_parsers() -> None:
    assert vllm_hust_manager(V03)["schema_version"] == "0.3-experimental"
    assert intellistream_manager(V03)["resource_claims"]
    with pytest.raises(Rejected, match="unsupported schema_version"):
        vllm_hust_manager(V03, older=True)  # why it is not the discovered one


@pytest.mark.parametrize("target", [DISCOVERED, V03])
@pytest.mark.parametrize("version", HOST_VERSIONS)
def test_run_gate_compatible_on_every_host(target: Path, version: str) -> None:
    doc = intellistream_manager(target)
    assert run_gate(doc, installed(vllm=version)) == ("compatible", None)


def test_run_gate_refuses_without_a_readable_host() -> None:
    doc = vllm_hust_manager(DISCOVERED)
    status, refusal = run_gate(doc, installed())
    assert status == "unknown" and refusal and "unverified trusted in-process" in refusal
    # The core's own distribution is not read; the operator's override is.
    assert run_gate(doc, installed(**{"vllm-hust": "0.17.2.post1"}))[0] == "unknown"
    assert run_gate(doc, installed(), host_version="0.17.2.post1") == ("compatible", None)


def test_old_shapes_fail(tmp_path: Path) -> None:
    doc = json.loads(V03.read_text())
    plain = tmp_path / "plain-0.3.json"
    plain.write_text(json.dumps({**doc, "schema_version": "0.3"}))
    with pytest.raises(Rejected, match="unsupported schema_version"):
        intellistream_manager(plain)
    assert vllm_hust_manager(plain)  # only the newest vLLM-HUST parser takes plain 0.3
    ranged = {**doc, "protocols": [
        {"name": "vllm.general_plugins", "version_range": None},
        {"name": "vllm-ascend.spec-decode.private-abi", "version_range": ">=0.18.0rc0,<0.34"}]}
    status, refusal = run_gate(ranged, installed(vllm="0.32.0"))
    assert status == "unknown" and refusal is not None
    predecessor_range = {**doc, "host": {**doc["host"],
                                         "version_range": ">=0.17.2rc1.dev5871,<0.26"}}
    assert run_gate(predecessor_range, installed(vllm=HOST_VERSIONS[1]))[0] == "incompatible"


def test_two_manifests_or_a_symlink_are_refused(tmp_path: Path) -> None:
    two = tmp_path / "two"
    shutil.copytree(DISCOVERED, two)
    shutil.copy(V03, two / "vllm-hust-extension-v0.3.json")
    with pytest.raises(Rejected, match="exactly one"):
        intellistream_manager(two)
    shutil.copy(V03, two / "extension-bundle-v1.json")
    with pytest.raises(Rejected, match="exactly one"):
        vllm_hust_manager(two)
    only_v03 = tmp_path / "only-v03"  # a 0.3 manifest alone: vLLM-HUST finds nothing
    only_v03.mkdir()
    shutil.copy(V03, only_v03 / "vllm-hust-extension-v0.3.json")
    with pytest.raises(Rejected, match="exactly one"):
        vllm_hust_manager(only_v03)
    link = tmp_path / "link"
    link.mkdir()
    (link / "vllm-hust-extension-v0.2.json").symlink_to(DISCOVERED
                                                        / "vllm-hust-extension-v0.2.json")
    with pytest.raises(Rejected, match="symlink"):
        intellistream_manager(link)


# --- every stored manager, both deployed core versions, no host_version typed by hand --------
# Each row: the manager code it restates (repository @ commit, file), the file names its
# discovery looks for, the schemas its parser takes, whether a null protocol range parses and
# whether its run gate skips null ranges.
MANAGERS = {
    # manifest.py: 1.0 / 0.2-experimental, protocols parsed with _specifier; no run gate yet
    "vLLM-HUST/extension-manager@0439f25c": (HUST_NAMES, HUST_OLDER_SCHEMAS, False, True),
    # manifest.py: _optional_specifier for protocol ranges
    "vLLM-HUST/extension-manager@2f458d5a": (HUST_NAMES, HUST_OLDER_SCHEMAS, True, True),
    # providers/base.py assess_compatibility: every listed protocol must be advertised
    "vLLM-HUST/extension-manager@983ac89b": (HUST_NAMES, HUST_OLDER_SCHEMAS, True, False),
    # discovery.py @799db6b9 names; docs/manifest-0.3.md @c16351c1: 0.3 and the
    # 0.3-experimental alias; the gate as at 983ac89b
    "vLLM-HUST/extension-manager@0.3.0": (HUST_NAMES, HUST_SCHEMAS, True, False),
    # discovery.py @00c9b336 (v0.3 name first); manifest.py / providers/base.py @4ce977b
    "intellistream/vllm-hust-ext-manager@4ce977b": (INTELLI_NAMES, INTELLI_SCHEMAS, True, True),
}
CORE_VERSIONS = ("0.17.2.post1", "0.28.1.post1.dev66+gd07d4c45e")


def _handed_over_configuration(tmp_path: Path, core_version: str) -> dict[str, Any]:
    """What ``manage.sh enable`` stores in the manager for a core installed as ``vllm-hust``:
    the real script, a Python whose only host is that distribution, a logging manager."""
    site = tmp_path / "site"
    dist = site / f"vllm_hust-{core_version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-hust\n"
                                   f"Version: {core_version}\n")
    python = tmp_path / "venv" / "bin" / "python"
    interpreter = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, timeout=120)
    bindir, log = tmp_path / "bin", tmp_path / "ext.log"
    bindir.mkdir()
    manager = bindir / "vllm-hust-ext"
    # logs each call; for `configure --file F` also the file's content (gone after the call)
    manager.write_text('#!/bin/sh\necho "$*" >> "$EXT_LOG"\nwhile [ $# -gt 0 ]; do\n'
                       '  if [ "$1" = --file ]; then cat "$2" >> "$EXT_LOG"; fi; shift\ndone\n')
    manager.chmod(0o755)
    config = tmp_path / "ext-config.json"  # the manager's state: vSpec enabled, no override
    config.write_text(json.dumps({"schema_version": 2, "extensions": {
        "org.vllm-hust.vspec": {"enabled": True, "configuration": {"launch_options": {}}}}}))
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": str(site), "EXT_LOG": str(log),
           "VLLM_HUST_EXT_CONFIG": str(config), "HOME": str(tmp_path)}
    out = subprocess.run([str(ROOT / "manage.sh"), "--python", str(python), "enable"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == "extension enable org.vllm-hust.vspec", lines
    assert lines[1].startswith("extension configure --file ") and lines[1].endswith(
        " org.vllm-hust.vspec"), lines
    return json.loads(lines[2])


@pytest.mark.parametrize("core_version", CORE_VERSIONS)
@pytest.mark.parametrize("manager", list(MANAGERS))
def test_every_manager_runs_vspec_on_the_core_without_hand_edits(
    manager: str, core_version: str, tmp_path: Path
) -> None:
    names, schemas, null_ok, skip_null = MANAGERS[manager]
    doc = parse(_load(DISCOVERED, names), schemas, null_protocol_range=null_ok)
    assert discover(DISCOVERED, names).name == "vllm-hust-extension-v0.2.json"
    core = installed(**{"vllm-hust": core_version})  # no `vllm` distribution to read
    # as the manager finds it: nothing to read under host.name "vllm"
    assert run_gate(doc, core, skip_null=skip_null)[0] == "unknown"
    configuration = _handed_over_configuration(tmp_path, core_version)
    assert configuration == {"host_version": core_version, "launch_options": {}}
    assert run_gate(doc, core, skip_null=skip_null, configuration=configuration) == (
        "compatible", None)


def test_null_protocol_ranges_fail_under_some_manager() -> None:
    """Why vSpec lists no protocol: each form of a null-ranged entry is refused somewhere."""
    doc = json.loads((DISCOVERED / "vllm-hust-extension-v0.2.json").read_text())
    assert doc["protocols"] == []
    listed = {**doc, "protocols": [{"name": "vllm.general_plugins", "version_range": None}]}
    with pytest.raises(Rejected, match="non-empty string"):
        parse(listed, HUST_OLDER_SCHEMAS, null_protocol_range=False)  # @0439f25c
    status, refusal = run_gate(parse(listed, HUST_SCHEMAS), installed(vllm="0.17.2.post1"),
                               skip_null=False)  # @983ac89b and later vLLM-HUST
    assert status == "unknown" and refusal is not None
    assert run_gate(listed, installed(vllm="0.17.2.post1")) == ("compatible", None)  # intelli
