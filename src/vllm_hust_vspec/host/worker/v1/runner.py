"""The V1 model runner's side of the per-step gamma (worker process, every rank).

The scheduler's decision arrives inside the scheduler output: a sticky skip flag
(:data:`~vllm_hust_vspec.host.wire.SKIP_ATTR`) makes ``propose_draft_token_ids`` skip the
drafter, and on hosts whose runner does not pass the scheduler's gamma to the proposer (the
vLLM-HUST core) vSpec's own K field does (host/worker/k_channel.py). Before the weights load,
a feature this runner cannot apply stops the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host import startup_faults
from vllm_hust_vspec.host.abi import runners
from vllm_hust_vspec.host.abi.capabilities import MODEL_RUNNER, WORKER
from vllm_hust_vspec.host.patching import Patcher, resolve
from vllm_hust_vspec.host.wire import K_FIELD, SKIP_ATTR
from vllm_hust_vspec.host.worker import k_channel
from vllm_hust_vspec.host.worker.v1 import fast_path

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings


def _make_load_model_wrapper(
    get_settings: Callable[[], Settings],
) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
            # Before the weights load: a feature this runner cannot apply stops the worker.
            with startup_faults.stage("worker check before the model loads"):
                runners.check_worker(get_settings(), self.vllm_config)
            return orig(self, *args, **kwargs)

        return load_model

    return make


def _skipped_drafts(runner: Any, sampled_token_ids: Any) -> Any:
    """What ``propose_draft_token_ids`` returns when the drafter is skipped: no drafts.

    Mirrors the runner's own "input does not fit in the drafter" branch so async bookkeeping
    (valid sampled-token counts) and data-parallel lockstep stay intact.
    """
    if isinstance(sampled_token_ids, list):
        return [[] for _ in sampled_token_ids]
    import torch

    drafter = runner.drafter
    spec_config = runner.speculative_config
    if (
        getattr(runner, "valid_sampled_token_count_event", None) is not None
        and not spec_config.disable_padded_drafter_batch
        and hasattr(drafter, "prepare_next_token_ids_padded")
    ):
        next_ids, counts = drafter.prepare_next_token_ids_padded(
            sampled_token_ids, runner.requests, runner.input_batch,
            runner.discard_request_mask.gpu,
        )
        runner._copy_valid_sampled_token_count(next_ids, counts)
    if runner.parallel_config.data_parallel_size > 1 and hasattr(drafter, "dummy_run"):
        drafter.dummy_run(num_tokens=1)
    return torch.empty(
        (sampled_token_ids.shape[0], 0), dtype=torch.int64, device=sampled_token_ids.device
    )


def _make_propose_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def propose_draft_token_ids(
        self: Any, scheduler_output: Any, sampled_token_ids: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if getattr(scheduler_output, SKIP_ATTR, False):
            return _skipped_drafts(self, sampled_token_ids)
        drafter = self.drafter
        if k_channel.propose_takes_k(drafter) or getattr(scheduler_output, K_FIELD,
                                                           None) is None:
            return orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        # A host whose runner does not hand the scheduler's gamma to the proposer (the
        # vLLM-HUST core): vSpec's own channel, host/worker/k_channel.py.
        return _draft_gamma(self, lambda: orig(self, scheduler_output, sampled_token_ids,
                                               *args, **kwargs), scheduler_output)

    return propose_draft_token_ids


def _draft_gamma(runner: Any, call: Callable[[], Any], scheduler_output: Any) -> Any:
    """Run the runner's K-less drafting so the step drafts the scheduler's gamma."""
    drafter = runner.drafter
    max_k = int(runner.speculative_config.num_speculative_tokens)
    width = max_k if k_channel.reads_stride_max_k(runner) else None
    if not hasattr(drafter, "num_speculative_tokens"):
        # n-gram / suffix proposers have no step loop to shorten: their drafts are cut.
        gamma = k_channel.requested_gamma(scheduler_output, max_k)
        out = call()
        return out if gamma >= max_k else k_channel.keep_first(out, gamma, width)
    gamma = k_channel.requested_gamma(scheduler_output, k_channel.max_k_of(drafter))
    return k_channel.run_at_gamma(drafter, gamma, call, sync_zero=True, width=width)


def install(patcher: Patcher, get_settings: Callable[[], Settings]) -> None:
    """Patch the V1 runner and worker: the worker check before the model loads, the drafter
    skip and gamma channel in ``propose_draft_token_ids``, and the zero-draft fast path."""
    runner_cls = resolve(*MODEL_RUNNER)
    patcher.wrap(runner_cls, "propose_draft_token_ids", _make_propose_wrapper)
    if hasattr(runner_cls, "_copy_draft_token_ids_to_cpu"):
        patcher.wrap(runner_cls, "_copy_draft_token_ids_to_cpu",
                     k_channel.make_draft_copy_wrapper)
    patcher.wrap(resolve(*WORKER), "load_model", _make_load_model_wrapper(get_settings))

    def fast_on() -> bool:
        return get_settings().zero_fast_path()

    patcher.wrap(runner_cls, "execute_model", fast_path.make_execute_wrapper(SKIP_ATTR, fast_on))
    patcher.wrap(runner_cls, "sample_tokens", fast_path.make_sample_wrapper)


__all__ = ["install"]
