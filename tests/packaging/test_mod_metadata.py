"""MOD_METADATA.json: the shipped file validates, broken copies fail naming the key, evidence."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_hust_vspec import __version__, bundle, metadata

ROOT = Path(__file__).resolve().parents[2]
META = ROOT / metadata.FILENAME
MANIFEST_PATHS = [
    ROOT / "src/vllm_hust_vspec/manifests/vllm-hust-extension-v0.2.json",
    ROOT / "src/vllm_hust_vspec/manifests/v0_2/vllm-hust-extension-v0.2.json",
]
NUMBER = re.compile(r"\d+(?:\.\d+)?")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return metadata.load_mod_metadata(META)


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    return metadata.load_manifest_files(MANIFEST_PATHS)


def test_shipped_metadata_is_valid_and_consistent(doc: dict[str, Any],
                                                  manifests: dict[str, dict[str, Any]]) -> None:
    assert metadata.schema_problems(doc) == []
    assert metadata.check_mod_metadata(META, __version__, manifests, docs_root=ROOT) == []
    assert doc["package"]["version"] == __version__
    assert doc["activation"]["extension_id"] == bundle.EXTENSION_ID
    assert doc["activation"]["gate_environment"] == {bundle.GATE_ENV: "1"}
    assert doc["activation"]["default"] == "off"


def test_shipped_metadata_invents_nothing(doc: dict[str, Any]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert doc["package"]["name"] == project["name"] == doc["repository"]["name"]
    # No source names a person or an advisor, nor this repository's URL.
    assert doc["maintainers"]["entity"] == project["authors"][0]["name"]
    assert doc["maintainers"]["people"] == []
    assert doc["advisor_status"] == "unknown"
    assert "url" not in doc["repository"]


def test_label_vocabulary_is_one_list(doc: dict[str, Any]) -> None:
    schema = metadata.load_schema()
    assert tuple(schema["$defs"]["label"]["enum"]) == metadata.EVIDENCE_LABELS
    assert tuple(doc["evidence_labels"]) == metadata.EVIDENCE_LABELS
    assert {e["label"] for e in doc["evidence"]} == set(metadata.EVIDENCE_LABELS)


def _drop_advisor(d: dict[str, Any]) -> None:
    del d["advisor_status"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = d
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return apply


@pytest.mark.parametrize(("mutate", "needle"), [
    (_drop_advisor, "advisor_status: 'advisor_status' is a required property"),
    (_set("advisor_status", "maybe"), "advisor_status: 'maybe' is not one of"),
    (_set("advisor_status", None), "advisor_status:"),
    (_set("package/version", "9.9.9"), "package/version: '9.9.9' != package version"),
    (_set("activation/default", "on"), "activation/default: 'off' was expected"),
    (_set("activation/gate_environment/HUST_VSPEC_ENABLED", "0"),
     "activation/gate_environment/HUST_VSPEC_ENABLED: '1' was expected"),
    (_set("activation/extension_id", "org.vllm-hust.other"), "activation/extension_id:"),
    (_set("evidence/0/label", "measured-on-npu"), "evidence/0/label:"),
    (_set("repository/url", "github.com/nowhere"), "repository/url:"),
], ids=["advisor-missing", "advisor-invalid", "advisor-null", "version-mismatch",
        "default-on", "gate-value", "extension-id", "label", "url-scheme"])
def test_broken_copy_fails_naming_the_key(
        tmp_path: Path, doc: dict[str, Any], manifests: dict[str, dict[str, Any]],
        mutate: Callable[[dict[str, Any]], None], needle: str) -> None:
    bad = copy.deepcopy(doc)
    mutate(bad)
    path = tmp_path / metadata.FILENAME
    path.write_text(json.dumps(bad), encoding="utf-8")
    problems = metadata.check_mod_metadata(path, __version__, manifests, docs_root=ROOT)
    assert any(needle in p for p in problems), problems


def test_manifest_disagreement_is_reported(tmp_path: Path, doc: dict[str, Any],
                                           manifests: dict[str, dict[str, Any]]) -> None:
    changed = copy.deepcopy(manifests)
    first = next(iter(changed))
    changed[first]["extension_version"] = "0.0.1"
    changed[first]["activation"]["environment"] = {}
    problems = metadata.check_mod_metadata(META, __version__, changed)
    assert any("version mismatch" in p and first in p for p in problems), problems
    assert any(p.startswith("activation/gate_environment/HUST_VSPEC_ENABLED") for p in problems)


def test_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    bad = tmp_path / metadata.FILENAME
    bad.write_text("{not json", encoding="utf-8")
    (problem,) = metadata.check_mod_metadata(bad, __version__, {})
    assert "invalid JSON" in problem and str(bad) in problem
    assert "missing.json" in metadata.check_mod_metadata(tmp_path / "missing.json",
                                                         __version__, {})[0]


def _normalised(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("index", range(len(json.loads(META.read_text())["evidence"])))
def test_evidence_entry_is_in_its_doc(doc: dict[str, Any], index: int) -> None:
    entry = doc["evidence"][index]
    path = ROOT / entry["doc"]
    assert path.is_file(), entry
    assert _normalised(entry["anchor"]) in _normalised(path.read_text(encoding="utf-8")), entry
    # The anchor must back the statement: a figure of the anchor recurs in the statement.
    figures = [n for n in NUMBER.findall(entry["anchor"]) if n != "0"]
    if figures:
        assert any(n in entry["statement"] for n in figures), entry


def test_stale_evidence_is_reported(tmp_path: Path, doc: dict[str, Any],
                                    manifests: dict[str, dict[str, Any]]) -> None:
    bad = copy.deepcopy(doc)
    bad["evidence"][0]["anchor"] = "9.999x target-only"
    bad["evidence"][1]["doc"] = "docs/no-such-doc.md"
    path = tmp_path / metadata.FILENAME
    path.write_text(json.dumps(bad), encoding="utf-8")
    problems = metadata.check_mod_metadata(path, __version__, manifests, docs_root=ROOT)
    assert any(p.startswith("evidence/0/anchor:") and "9.999x" in p for p in problems)
    assert any(p.startswith("evidence/1/doc:") and "does not exist" in p for p in problems)
    # Without docs_root (an sdist copy) the anchors are not looked up.
    assert metadata.check_mod_metadata(path, __version__, manifests) == []
