"""The shipped Extension-Manager manifests: JSON Schemas, PEP 440 / pattern rules, the CLI."""

from __future__ import annotations

import ast
import copy
import json
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _lifecycle import ROOT
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from vllm_hust_vspec import __version__, bundle
from vllm_hust_vspec.cli import launch
from vllm_hust_vspec.cli import manifest as manifest_cli

SCHEMAS = ("0.2-experimental", "0.3-experimental")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


def doc(schema: str) -> dict[str, Any]:
    return bundle.load_manifest(schema)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_manifest_valid_against_its_json_schema(schema: str) -> None:
    js = bundle.load_schema(schema)
    jsonschema.Draft202012Validator.check_schema(js)
    jsonschema.Draft202012Validator(js).validate(doc(schema))
    assert doc(schema)["schema_version"] == schema


def test_schemas_discriminate_the_versions() -> None:
    v03 = jsonschema.Draft202012Validator(bundle.load_schema("0.3-experimental"))
    v02 = jsonschema.Draft202012Validator(bundle.load_schema("0.2-experimental"))
    assert not v02.is_valid(doc("0.3-experimental"))  # 0.3-only fields and schema_version
    assert not v03.is_valid(doc("0.2-experimental"))
    assert not v03.is_valid({**doc("0.3-experimental"), "schema_version": "0.3"})
    downgraded = {k: v for k, v in doc("0.3-experimental").items()
                  if k not in ("resource_claims", "requires_extensions")}
    downgraded["schema_version"] = "0.2-experimental"
    assert downgraded == doc("0.2-experimental")  # same content apart from the 0.3 additions


@pytest.mark.parametrize("schema", SCHEMAS)
def test_pattern_and_pep440_rules(schema: str) -> None:
    d = doc(schema)
    assert ID_PATTERN.match(d["extension_id"]) and d["extension_id"] == "org.vllm-hust.vspec"
    assert ID_PATTERN.match(d["host"]["provider"])
    assert str(Version(d["extension_version"])) == d["extension_version"] == __version__
    ranges = [d["host"]["version_range"]] + [
        p["version_range"] for p in d["protocols"] if p["version_range"] is not None
    ]
    for r in ranges:
        SpecifierSet(r)  # raises on anything that is not PEP 440
    rng = d["host"]["version_range"]
    assert SpecifierSet(rng).prereleases  # names a pre-release, so rc/dev hosts may match
    for ok in ("0.18.0", "0.23.0", "0.32.0", "0.33.1", "0.30.0rc2", "0.33.0.dev4", "0.32.0+cpu",
               "0.17.2rc1.dev5871+g762f85b31.empty", "0.28.1rc1.dev319+g762f85b31.empty",
               "0.17.2.post1"):
        assert bundle.host_in_range(rng, ok) is True, ok
    for bad in ("0.17.1", "0.17.2rc0", "0.34.0", "1.0.0", "0.34.0rc1"):
        assert bundle.host_in_range(rng, bad) is False, bad
    # The documented rule: without a pre-release in the range an rc host never matches.
    assert bundle.host_in_range(">=0.18.0,<0.34", "0.30.0rc2") is False


def test_03_claims_and_activation() -> None:
    d = doc("0.3-experimental")
    claims = {(c["resource"], c["scope"], c["mode"]) for c in d["resource_claims"]}
    assert claims == {
        ("vllm.spec-decode.num-spec-tokens-per-step", "vllm-process", "exclusive"),
        ("vllm.spec-decode.patch-set", "vllm-process", "exclusive"),
        ("vllm.scheduler.schedule", "vllm-process", "shared"),
        ("vllm.scheduler.update-from-output", "vllm-process", "shared"),
        ("vllm.model-registry/qwen2-eagle", "vllm-process", "shared")}
    # nothing on the KV cache: vSpec does not claim what kvcompress claims exclusively
    assert not [c for c in claims if "kv-cache" in c[0]]
    assert d["requires_extensions"] == []
    for schema in SCHEMAS:
        s = doc(schema)
        assert s["activation"]["environment"] == {"HUST_VSPEC_ENABLED": "1"}
        assert s["activation"]["entry_points"] == [{"group": "vllm.general_plugins",
                                                    "name": "vspec"}]
        # no host advertises vllm.general_plugins or the Ascend ABI: listing either (null
        # range or not) makes some managers refuse vSpec (test_extension_manager_rules.py)
        assert s["protocols"] == []
        assert s["host"] == {"provider": "vllm", "name": "vllm",
                             "version_range": ">=0.17.2rc1.dev0,<0.34"}
        assert s["runtime"] == {"type": "python", "process_scope": "vllm-processes",
                                "isolation": "trusted_in_process"}


def test_discovery_package_holds_exactly_one_manifest_and_no_code() -> None:
    pkg = resources.files("vllm_hust_vspec.manifests")
    direct = sorted(p.name for p in pkg.iterdir() if p.name.endswith(".json"))
    assert direct == ["vllm-hust-extension-v0.2.json"]
    # the discovered manifest is the 0.3-experimental one (claims included)
    assert doc("0.3-experimental") == json.loads(pkg.joinpath(direct[0]).read_text())
    v02 = resources.files("vllm_hust_vspec.manifests.v0_2")
    assert sorted(p.name for p in v02.iterdir() if p.name.endswith(".json")) == [
        "vllm-hust-extension-v0.2.json"]
    assert not pkg.joinpath("v0_3").is_dir()
    for init in (pkg / "__init__.py", v02 / "__init__.py"):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _mutate(schema: str, path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(doc(schema))
    target: Any = d
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return d


V03 = "0.3-experimental"
BAD = [
    (V03, ("extension_id",), "Org.VSpec", "extension_id"),
    (V03, ("extension_version",), "1.0-final-ish", "extension_version"),
    (V03, ("extension_version",), "9.9.9", "version mismatch"),
    (V03, ("host", "version_range"), ">=0.18,<0.34", "pre-release"),
    (V03, ("host", "version_range"), "0.18 to 0.34", "version range"),
    (V03, ("activation", "environment"), {}, "HUST_VSPEC_ENABLED"),
    (V03, ("resource_claims",), [{"resource": "a", "scope": "vllm-process", "mode": "x"}],
     "mode"),
    (V03, ("resource_claims", 0, "mode"), "shared", "vSpec's claims"),
    (V03, ("resource_claims",), [], "vSpec's claims"),
    ("0.2-experimental", ("resource_claims",), [], "unknown field"),
    (V03, ("kind",), "scheduler_policy", "kind"),
    (V03, ("schema_version",), "0.3", "write '0.3-experimental'"),
    ("0.2-experimental", ("protocols",),
     [{"name": "vllm.general_plugins", "version_range": None}], "leave protocols empty"),
    (V03, ("protocols",),
     [{"name": "vllm-ascend.spec-decode.private-abi", "version_range": ">=0.18.0rc0,<0.34"}],
     "leave protocols empty"),
    (V03, ("protocols",), [{"name": "vllm.kv-materialization-runtime-control",
                            "version_range": None}], "null is rejected"),
    ("0.2-experimental", ("components", 0, "contracts"), ["general_plugins"], "contracts"),
    (V03, ("requires_extensions",), [{"extension_id": "a", "version_range": None}],
     "version range"),
]


@pytest.mark.parametrize(("schema", "path", "value", "needle"), BAD)
def test_rules_reject_bad_manifests(schema: str, path: tuple[str | int, ...], value: Any,
                                    needle: str) -> None:
    problems = bundle.rule_problems(_mutate(schema, path, value), __version__)
    assert problems and any(needle in p for p in problems), problems


def test_duplicate_claim_and_schema_errors() -> None:
    d = copy.deepcopy(doc(V03))
    d["resource_claims"].append(dict(d["resource_claims"][0]))
    assert any("duplicate" in p for p in bundle.rule_problems(d, __version__))
    assert bundle.schema_problems(d, V03)  # uniqueItems in the JSON Schema too
    bad_id = _mutate(V03, ("extension_id",), "-bad")
    assert any(p.startswith("extension_id") for p in bundle.schema_problems(bad_id, V03) or [])
    d = copy.deepcopy(doc("0.2-experimental"))
    d["components"].append(dict(d["components"][0]))
    assert any("duplicate" in p for p in bundle.rule_problems(d, __version__))


def test_cli_validate_and_show(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert manifest_cli.main(["validate", "--no-install-check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # one status word per manifest at the start of its line (the paths may contain "OK":
    # a CI checkout under /tmp/tmp.XXXXllOK once did)
    assert [line.split()[0] for line in lines] == ["OK", "OK"], lines
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_mutate(V03, ("extension_version",), "0.0.1")))
    assert manifest_cli.main(["validate", "--file", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and "version mismatch" in json.dumps(report)
    assert manifest_cli.main(["show", "--schema", V03]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == V03
    assert manifest_cli.main(["show", "--format", "path"]) == 0  # the discovered manifest
    assert Path(capsys.readouterr().out.strip()).name == "vllm-hust-extension-v0.2.json"
    assert manifest_cli.main(["validate", "--file", str(tmp_path / "missing.json")]) == 2


def test_launcher_dispatches_manifest_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch.main(["manifest", "show", "--format", "env"]) == 0
    assert capsys.readouterr().out.strip() == "export HUST_VSPEC_ENABLED=1"


@pytest.mark.slow
def test_source_check_detects_version_mismatch(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    pkg = tree / "src" / "vllm_hust_vspec"
    pkg.mkdir(parents=True)
    for name in ("__init__.py", "_version.py", "bundle.py"):
        shutil.copy(ROOT / "src" / "vllm_hust_vspec" / name, pkg / name)
    shutil.copytree(ROOT / "src" / "vllm_hust_vspec" / "manifests", pkg / "manifests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    # source-check also checks MOD_METADATA.json (against the docs) and the LICENSE.
    shutil.copy(ROOT / "src" / "vllm_hust_vspec" / "metadata.py", pkg / "metadata.py")
    for name in ("MOD_METADATA.json", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "docs", tree / "docs")
    cmd = [sys.executable, str(ROOT / "scripts" / "release_check.py"), "source", "--root",
           str(tree)]
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    (pkg / "_version.py").write_text('__version__ = "0.1.1"\n')
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 1
    assert "version mismatch" in res.stderr and "vllm-hust-extension-v0.2.json" in res.stderr
