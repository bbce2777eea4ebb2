"""The static doctor on the saved vLLM-Ascend-HUST tree (a partial checkout mixing the main
line's runner with the PEARL line's proposer, rejection sampler and ACL graph wrapper), alone,
with the core (the installed vLLM), and overlaid with upstream vllm-ascend's proposer."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import _ascend_sdists as sd
import pytest

from _ascend_hust_tree import ascend_hust_tree, ascend_hust_upstream_comparison
from vllm_hust_vspec.cli import doctor
from vllm_hust_vspec.host import abi
from vllm_hust_vspec.host.abi.model import CheckResult, Report

PROPOSER = "vllm_ascend/spec_decode/llm_base_proposer.py"
# The pre-release whose runner and proposer both carry K (upstream's dynamic SD).
NATIVE_K_PRERELEASE = "0.30.0rc2"
REJECTION = "vllm_ascend/sample/rejection_sampler.py"


def _checks(report: Report) -> dict[str, CheckResult]:
    return {r.check.id: r for t in report.tiers for r in t.results}


def _fork_only(*sources: Path, method: str = "eagle") -> Report:
    """The fork read alone (no core), every feature, adaptive."""
    return abi.check_static(method, True, sources=[str(s) for s in sources],
                            use_installed=False, features=abi.FEATURES)


def _needs_core() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("no vLLM installed for this Python: the core half of the pair is absent")


def test_partial_tree_reports_what_it_lacks_as_not_in_this_source() -> None:
    report = _fork_only(ascend_hust_tree())
    host = report.host("vllm_ascend")
    assert host is not None and host.partial and host.source == "source tree"
    # The tree records the core commit its main line is verified with.
    assert host.note is not None and "d07d4c45" in host.note
    checks = _checks(report)
    for check_id, module in (("ascend.proposer_class", "spec_decode.eagle_proposer"),
                             ("ascend.k_channel", "spec_decode.eagle_proposer"),
                             ("ascend.spec_decode_factory", "spec_decode")):
        result = checks[check_id]
        assert result.status == "UNREAD", check_id
        assert f"module vllm_ascend.{module}" in result.unread
    # Unread checks are not failures; the saved files themselves pass what they hold.
    assert checks["ascend.rejection_sampler"].status == "PASS"
    assert checks["ascend.runner_propose"].status == "PASS"
    assert not any(r.unread for r in checks.values() if r.check.id.startswith("vllm."))


@pytest.mark.slow
def test_each_shape_implies_its_k_channel() -> None:
    """The main-line runner passes K to a K-less (PEARL-line) _propose: the installer reads
    the proposer, so the channel is the backport, and the doctor says the files disagree."""
    report = _fork_only(ascend_hust_tree())
    checks = _checks(report)
    proposer, runner = checks["ascend.k_shape.proposer"], checks["ascend.k_shape.runner"]
    assert proposer.status == "FACT" and "K-less _propose" in (proposer.variant or "")
    assert "the runner passes K" in (runner.variant or "")
    assert report.decisions["k_channel"] == "backport"
    assert "different code lines" in report.decisions["k_shapes"]
    mismatch = checks["ascend.coherent.runner_propose"]
    assert mismatch.status == "WARN"
    assert any("keyword num_speculative_tokens=" in m for m in mismatch.missing)


@pytest.mark.slow
def test_upstream_proposer_overlaid_makes_the_k_channel_native() -> None:
    """Given first, upstream's proposer replaces the saved one: K-taking, as the runner
    calls it, so the runner/proposer mismatch is gone and the channel is native."""
    report = _fork_only(ascend_hust_upstream_comparison(), ascend_hust_tree())
    checks = _checks(report)
    assert "K-taking _propose" in (checks["ascend.k_shape.proposer"].variant or "")
    assert checks["ascend.coherent.runner_propose"].status == "PASS"
    assert report.decisions["k_channel"] == "native"
    # The tree's other files still come from the tree.
    assert checks["ascend.coherent.rejection_sampler"].status == "WARN"


def test_the_fork_facts_per_step_gamma_needs() -> None:
    facts = {i: r.variant or "" for i, r in _checks(_fork_only(ascend_hust_tree())).items()
             if r.check.fact}
    assert "zero drafts at the configured width" in facts["ascend.gamma.skip_drafting"]
    assert "dynamic_spec.num_verify_tokens" in facts["ascend.gamma.draft_trim"]
    assert facts["ascend.gamma.rejection_init"] == "AscendRejectionSampler(sampler)"
    assert "BatchDescriptor only" in facts["ascend.gamma.graph_key"]
    assert "uniform_decode_query_len" in facts["ascend.gamma.uniform_decode"]
    assert "num_draft_steps" in facts["ascend.gamma.draft_steps"]
    assert facts["ascend.gamma.tree_drafting"].startswith("tree drafting")
    assert "parallel_drafting read" in facts["ascend.gamma.parallel_drafting"]
    assert "decode_threshold" in facts["ascend.gamma.decode_threshold"]
    assert "SpecRhythm" in facts["ascend.gamma.pearl"]


def test_runner_calls_that_do_not_fit_are_named() -> None:
    checks = _checks(_fork_only(ascend_hust_tree()))
    rejection = checks["ascend.coherent.rejection_sampler"]
    assert rejection.status == "WARN"
    assert any("3 positional arguments, where it takes 1 (sampler)" in m
               for m in rejection.missing)
    wrapper = checks["ascend.coherent.graph_wrapper"]
    assert any("keyword update_stream=" in m for m in wrapper.missing)


def _copy(tree: Path, dest: Path) -> Path:
    shutil.copytree(tree / "vllm_ascend", dest / "vllm_ascend")
    return dest


@pytest.mark.slow
def test_findings_follow_the_code(tmp_path: Path) -> None:
    """Edit the copied tree: the findings change with it (read from code, not versions)."""
    tree = _copy(ascend_hust_tree(), tmp_path)
    rej = tree / REJECTION
    rej.write_text(rej.read_text().replace(
        "    def __init__(self, sampler):",
        "    def __init__(self, sampler, speculative_config=None, device=None):", 1))
    (tree / PROPOSER).unlink()
    checks = _checks(_fork_only(tree))
    assert checks["ascend.coherent.rejection_sampler"].status == "PASS"
    assert checks["ascend.gamma.rejection_init"].variant == (
        "AscendRejectionSampler(sampler, speculative_config, device)")
    # Without the proposer file nothing about it can be said, and nothing crashes.
    for check_id in ("ascend.k_shape.proposer", "ascend.gamma.draft_steps",
                     "ascend.gamma.tree_drafting", "ascend.coherent.runner_propose"):
        assert checks[check_id].status == "UNREAD", check_id
        assert "module vllm_ascend.spec_decode.llm_base_proposer" in checks[check_id].unread


@pytest.mark.slow
def test_doctor_on_the_tree_with_the_core_ends_ok(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tree = str(ascend_hust_tree())
    _needs_core()
    assert doctor.main(["--source", tree]) == doctor.EXIT_OK
    out = capsys.readouterr().out
    assert "partial tree" in out and "[source tree]" in out
    assert ("UNREAD ascend.proposer_class: not in this source: module "
            "vllm_ascend.spec_decode.draft_proposer") in out
    assert "result: OK" in out and "not in this source, unverified" in out
    assert doctor.main(["--method", "eagle", "--adaptive", "--all-features",
                        "--source", tree]) == doctor.EXIT_OK
    out = capsys.readouterr().out
    assert "PASS ascend.draft_graph_per_gamma" in out
    assert "decision k_channel: backport" in out
    assert "result: OK" in out
    assert doctor.main(["--json", "--source", tree]) == doctor.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    unread = {c["id"]: c["unread"] for t in doc["tiers"] for c in t["checks"]
              if c["status"] == "UNREAD"}
    assert unread["ascend.proposer_class"] == [
        "module vllm_ascend.spec_decode.draft_proposer"]
    assert doc["ok"] and [h["partial"] for h in doc["hosts"]] == [False, True]


@pytest.mark.slow
@pytest.mark.parametrize("version", [sd.RELEASE, NATIVE_K_PRERELEASE])
def test_facts_on_whole_release_sdists(version: str) -> None:
    """On a whole package nothing is unread, and each line's own shape is reported."""
    try:
        path = sd.sdist(version)
    except sd.Unavailable as exc:
        pytest.skip(f"vllm-ascend sdist not downloadable here: {exc}")
    report = _fork_only(path)
    checks = _checks(report)
    assert not any(r.unread for r in checks.values())
    assert not report.host("vllm_ascend").partial
    facts = {i: r.variant or "" for i, r in checks.items() if r.check.fact}
    if version == sd.RELEASE:
        assert "scheduler_output only" in facts["ascend.k_shape.runner"]
        assert facts["ascend.gamma.skip_drafting"] == "no _skip_drafting"
        assert report.decisions["k_channel"] == "backport"
    else:
        assert "the runner passes K" in facts["ascend.k_shape.runner"]
        assert "dynamic_spec" in facts["ascend.gamma.draft_trim"]
        assert report.decisions["k_shapes"] == "runner and proposer both carry K (native)"
    assert facts["ascend.gamma.pearl"] == "no PEARL engine"
    assert checks["ascend.coherent.runner_propose"].status == "PASS"
