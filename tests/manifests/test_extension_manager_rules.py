"""vSpec's manifests against the real vLLM-HUST Extension Managers' rules.

The rules below were read from the source of both manager code lines,
``vLLM-HUST/extension-manager`` and ``intellistream/vllm-hust-ext-manager``: discovery (the
``vllm_hust.extension_bundles`` entry point names a package directory that must hold exactly
one manifest from a fixed list of names, no symlinks), the experimental ``parse_manifest``
(schema versions, fields, patterns, enums) and the run gate (host version from the metadata of
the distribution ``host.name``, ranged protocols must be advertised, an unverified trusted
in-process extension is refused). No release of either manager is installable from the package
index, so the rules are restated here, compactly, and evaluated with the real ``packaging``.

The conflict rule (``core.py`` ``reject_conflicting_plans``) is restated too and applied to
vSpec's discovered manifest beside the real kvcompress wheel's (``tests/_siblings.py``).
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
V02 = DISCOVERED / "v0_2" / "vllm-hust-extension-v0.2.json"  # claim-less, not discovered


@pytest.mark.parametrize("names", [HUST_NAMES, INTELLI_NAMES])
def test_bundle_directory_holds_one_discoverable_manifest(names: tuple[str, ...]) -> None:
    assert [n for n in names if (DISCOVERED / n).exists()] == ["vllm-hust-extension-v0.2.json"]
    assert discover(DISCOVERED, names).name == "vllm-hust-extension-v0.2.json"


def test_discovered_manifest_carries_exclusive_claims_for_claim_aware_managers() -> None:
    for doc in (vllm_hust_manager(DISCOVERED), intellistream_manager(DISCOVERED)):
        assert doc["schema_version"] == "0.3-experimental"
        assert {c["mode"] for c in doc["resource_claims"]} == {"exclusive", "shared"}
    # A parser without claims (vLLM-HUST before 0.3.0) refuses it; it would refuse a
    # 0.2-experimental manifest that carried them as well (unknown field), and no file name
    # reaches the claim-aware managers without also reaching it (test below).
    with pytest.raises(Rejected, match="unsupported schema_version"):
        vllm_hust_manager(DISCOVERED, older=True)
    with_claims = {**json.loads(V02.read_text()),
                   "resource_claims": intellistream_manager(DISCOVERED)["resource_claims"]}
    for schemas in (HUST_OLDER_SCHEMAS, INTELLI_SCHEMAS):
        with pytest.raises(Rejected):
            parse(with_claims, schemas)


def test_no_one_directory_serves_the_claimless_parsers_and_shows_claims(tmp_path: Path) -> None:
    """Every layout of the two forms: the pre-0.3.0 vLLM-HUST parser and a claim-aware
    manager never both accept, with the claims seen, the manifest they discover."""
    claims_doc, plain = json.loads((DISCOVERED / HUST_NAMES[0]).read_text()), V02.read_text()
    wins = []
    for name_a in INTELLI_NAMES:
        for name_b in (None, *INTELLI_NAMES):
            if name_b == name_a:
                continue
            d = tmp_path / f"{name_a}-{name_b}"
            d.mkdir()
            (d / name_a).write_text(json.dumps(claims_doc))
            if name_b:
                (d / name_b).write_text(plain)
            try:
                older = vllm_hust_manager(d, older=True)
                seen = [m(d).get("resource_claims") for m in (vllm_hust_manager,
                                                               intellistream_manager)]
            except Rejected:
                continue
            wins.append((older, seen))
    assert not [w for w in wins if all(w[1])]


@pytest.mark.parametrize("target", [DISCOVERED, V02])
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
    doc = json.loads((DISCOVERED / "vllm-hust-extension-v0.2.json").read_text())
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
    shutil.copy(V02, two / "vllm-hust-extension-v0.3.json")
    with pytest.raises(Rejected, match="exactly one"):
        intellistream_manager(two)
    shutil.copy(V02, two / "extension-bundle-v1.json")
    with pytest.raises(Rejected, match="exactly one"):
        vllm_hust_manager(two)
    only_v03 = tmp_path / "only-v03"  # under a -v0.3 name alone: vLLM-HUST finds nothing
    only_v03.mkdir()
    shutil.copy(DISCOVERED / "vllm-hust-extension-v0.2.json",
                only_v03 / "vllm-hust-extension-v0.3.json")
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


CLAIM_AWARE = [m for m, row in MANAGERS.items() if "0.3-experimental" in row[1]]
# pre-0.3.0 vLLM-HUST builds: no resource_claims field in their model; the CHANGELOG calls
# 0.3.0 "First formally published ECPA release", so these are unreleased development commits
CLAIMLESS = [m for m in MANAGERS if m not in CLAIM_AWARE]


@pytest.mark.parametrize("manager", CLAIMLESS)
def test_claimless_managers_refuse_the_claiming_manifest(manager: str) -> None:
    names, schemas, null_ok, _ = MANAGERS[manager]
    with pytest.raises(Rejected, match="unsupported schema_version"):
        parse(_load(DISCOVERED, names), schemas, null_protocol_range=null_ok)
    # ... and parse the claim-less form, were it the discovered one
    assert parse(json.loads(V02.read_text()), schemas, null_protocol_range=null_ok)


@pytest.mark.parametrize("core_version", CORE_VERSIONS)
@pytest.mark.parametrize("manager", CLAIM_AWARE)
def test_every_claim_aware_manager_runs_vspec_on_the_core_without_hand_edits(
    manager: str, core_version: str, tmp_path: Path
) -> None:
    names, schemas, null_ok, skip_null = MANAGERS[manager]
    doc = parse(_load(DISCOVERED, names), schemas, null_protocol_range=null_ok)
    assert doc["resource_claims"]
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
    doc = json.loads(V02.read_text())
    assert doc["protocols"] == []
    listed = {**doc, "protocols": [{"name": "vllm.general_plugins", "version_range": None}]}
    with pytest.raises(Rejected, match="non-empty string"):
        parse(listed, HUST_OLDER_SCHEMAS, null_protocol_range=False)  # @0439f25c
    status, refusal = run_gate(parse(listed, HUST_SCHEMAS), installed(vllm="0.17.2.post1"),
                               skip_null=False)  # @983ac89b and later vLLM-HUST
    assert status == "unknown" and refusal is not None
    assert run_gate(listed, installed(vllm="0.17.2.post1")) == ("compatible", None)  # intelli


# --- the conflict rule: vSpec beside kvcompress ---------------------------------------------
# core.py ``reject_conflicting_plans`` (intellistream @2694cb11, the same function in
# vLLM-HUST @0061862): claims keyed by (scope, resource); a second claim on a key conflicts
# when either is exclusive. Then every generated_config key of plans of one provider must be
# equal. ``extension enable`` (intellistream cli.py @00c9b336 ``_validate_resource_ownership``)
# checks the claims only; ``run`` and ``extension env`` check whole provider plans, whose
# generated_config (providers/vllm.py @4ce977b ``plan``) holds the activation environment, the
# stored configuration and the declared vLLM plugin names.


def claim_conflict(docs: list[dict[str, Any]]) -> str | None:
    """The refusal of ``extension enable`` for this enabled set, or None."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for doc in docs:
        for c in doc.get("resource_claims", []):
            key = (c["scope"], c["resource"])
            if key in seen and "exclusive" in (seen[key][1], c["mode"]):
                return (f"extensions {seen[key][0]!r} and {doc['extension_id']!r} conflict on "
                        f"{key[0]}:{key[1]} ({seen[key][1]} versus {c['mode']})")
            seen[key] = (doc["extension_id"], c["mode"])
    return None


def plan_conflict(docs: list[dict[str, Any]],
                  configurations: dict[str, dict[str, Any]]) -> str | None:
    """The refusal of ``run`` / ``extension env`` for this enabled set, or None."""
    if (refusal := claim_conflict(docs)) is not None:
        return refusal
    seen: dict[tuple[str, str], tuple[str, Any]] = {}
    for doc in docs:
        act = doc.get("activation", {})
        plugins = [e["name"] for e in act.get("entry_points", [])
                   if e["group"] in ("vllm.general_plugins", "vllm.platform_plugins")]
        generated = {"environment": act.get("environment", {}),
                     "additional_config": act.get("additional_config", {}),
                     "user_config": configurations.get(doc["extension_id"], {}),
                     "vllm_json_options": {}, "vllm_plugins": plugins}
        for k, v in generated.items():
            key = (doc["host"]["provider"], k)
            if key in seen and seen[key][1] != v:
                return (f"extensions {seen[key][0]!r} and {doc['extension_id']!r} conflict on "
                        f"{key[0]}.{k}")
            seen[key] = (doc["extension_id"], v)
    return None


def kvcompress_bundle() -> Path:
    """The bundle directory of the real kvcompress 0.10.0 wheel."""
    sys.path.insert(0, str(ROOT / "tests"))
    import _siblings

    root = _siblings.path("vllm-ascend-kvcompress-hust")
    return root / "vllm_ascend_kvcompress" / "manifests"


def test_kvcompress_manifest_is_what_the_docs_say() -> None:
    kvc = discover(kvcompress_bundle(), INTELLI_NAMES)
    assert kvc.name == "vllm-hust-extension-v0.3.json"
    doc = intellistream_manager(kvcompress_bundle())
    assert doc["resource_claims"] == [{"resource": "vllm-ascend.kv-cache.mutation",
                                       "scope": "vllm-process", "mode": "exclusive"}]
    assert doc["activation"]["environment"] == {"VLLM_ASCEND_KVCOMPRESS_ENABLED": "1"}
    text = (ROOT / "docs" / "extension-manager.md").read_text()
    assert "`vllm-ascend.kv-cache.mutation`" in text


@pytest.mark.parametrize("manager", list(MANAGERS))
def test_each_manager_beside_kvcompress(manager: str) -> None:
    """What docs/extension-manager.md says per manager, from its rules."""
    names, schemas, null_ok, _ = MANAGERS[manager]

    def load(target: Path) -> dict[str, Any] | str:
        try:
            return parse(_load(target, names), schemas, null_protocol_range=null_ok)
        except Rejected as exc:
            return str(exc)

    vspec, kvc = load(DISCOVERED), load(kvcompress_bundle())
    # kvcompress ships only a -v0.3 file name: vLLM-HUST discovery never finds it
    if "intellistream" not in manager:
        assert isinstance(kvc, str) and "exactly one" in kvc
    if manager in CLAIMLESS:
        assert isinstance(vspec, str) and "unsupported schema_version" in vspec
        return
    assert isinstance(vspec, dict) and vspec["resource_claims"]
    if isinstance(kvc, str):
        return
    # both discovered: enabling the pair is approved (no claim in common) ...
    assert claim_conflict([kvc, vspec]) is None and claim_conflict([vspec, kvc]) is None
    # ... and run refuses any two vllm-provider bundles whose activation environments differ,
    # claims or not
    refusal = plan_conflict([kvc, vspec], {"org.vllm-hust.vspec": {"host_version": "0.23.0"}})
    assert refusal is not None and refusal.endswith("conflict on vllm.environment")


def test_claims_refuse_what_vspec_owns() -> None:
    """The claims can refuse: a sibling claiming the per-step K, or the scheduler exclusively."""
    vspec = intellistream_manager(DISCOVERED)
    kvc = intellistream_manager(kvcompress_bundle())
    for resource in ("vllm.spec-decode.num-spec-tokens-per-step", "vllm.scheduler.schedule"):
        rival = {**kvc, "resource_claims": [
            {"resource": resource, "scope": "vllm-process", "mode": "exclusive"}]}
        refusal = claim_conflict([rival, vspec])
        assert refusal is not None and resource in refusal
    # a shared claim on a method vSpec wraps compositionally composes, as at runtime
    sharer = {**kvc, "resource_claims": [
        {"resource": "vllm.scheduler.schedule", "scope": "vllm-process", "mode": "shared"}]}
    assert claim_conflict([sharer, vspec]) is None
    # kvcompress's own claim on the KV cache is not one vSpec makes
    kv_claims = {c["resource"] for c in kvc["resource_claims"]}
    assert not kv_claims & {c["resource"] for c in vspec["resource_claims"]}
