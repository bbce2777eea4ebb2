"""vSpec's expand_batch_to_tokens keeps the upstream contract in every dtype the sampler uses,
and replaces vLLM's function exactly on the CPU platform without Triton."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm_hust_vspec.host.patching import Patcher  # noqa: E402
from vllm_hust_vspec.host.worker.v1 import cpu_expand  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_expansion_and_replacement(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 7, 3], dtype=dtype)
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    out = cpu_expand.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1)
    assert out.dtype == dtype
    assert out.tolist() == [1, 1, 7, 7, 7, 3]
    kept = cpu_expand.expand_batch_to_tokens(x, cu, 6)
    assert kept.tolist() == [0, 0, 7, 7, 7, 3]


def test_fractional_temperatures_survive() -> None:
    # the host's shim truncated 0.7 to 0 (then "replaced" it by 1)
    x = torch.tensor([0.7, 0.0], dtype=torch.float32)
    out = cpu_expand.expand_batch_to_tokens(x, torch.tensor([1, 3]), 3, 0, 1)
    assert out.tolist() == pytest.approx([0.7, 1.0, 1.0])


def test_rows_without_drafts_and_shape_check() -> None:
    x = torch.tensor([5, 6, 7])
    assert cpu_expand.expand_batch_to_tokens(x, torch.tensor([0, 2, 2]), 2).tolist() == [6, 6]
    with pytest.raises(ValueError, match="rows"):
        cpu_expand.expand_batch_to_tokens(x, torch.tensor([1, 2]), 2)


def test_installed_on_this_cpu_host_and_undone() -> None:
    import vllm.v1.sample.rejection_sampler as rs

    original = rs.expand_batch_to_tokens
    patcher = Patcher("test")
    assert cpu_expand.install_cpu_expand_fix(patcher) == cpu_expand.host_needs_fix()
    if cpu_expand.host_needs_fix():
        assert rs.expand_batch_to_tokens is cpu_expand.expand_batch_to_tokens
    patcher.undo()
    assert rs.expand_batch_to_tokens is original
