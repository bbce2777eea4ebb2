"""vSpec on the vLLM-HUST core (the production vLLM fork), checked against its released source.

The core (``vllm-hust==0.17.2.post1``) has no per-step K channel, no ``max_num_active_reqs``
and fixed async draft placeholders. These tests read and execute its real code where it is
pure Python (the doctor's static tier; the runner's sync draft copy with the CUDA calls
stubbed) and drive vSpec's own channel on stand-ins of the core's shape (scheduler admission,
placeholders, a K-less proposer whose loops read ``num_speculative_tokens`` /
``num_draft_steps``).
"""

from __future__ import annotations

import ast
import contextlib
import textwrap
import types
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("prometheus_client")
torch = pytest.importorskip("torch")

import _hust_sdist  # noqa: E402

from vllm_hust_vspec.host import abi  # noqa: E402
from vllm_hust_vspec.host.abi.requirements import OWN_K  # noqa: E402
from vllm_hust_vspec.host.engine.hook import SchedulerHook  # noqa: E402
from vllm_hust_vspec.host.engine.scheduler import HOOK_ATTR, _make_schedule_wrapper  # noqa: E402
from vllm_hust_vspec.host.wire import K_FIELD  # noqa: E402
from vllm_hust_vspec.host.worker import k_channel as k_backport  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402


def _sdist() -> str:
    try:
        return str(_hust_sdist.sdist())
    except _hust_sdist.Unavailable as exc:
        pytest.skip(str(exc))


# ---- the doctor on the released core ------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("method", ["draft", "eagle", "mtp"])
def test_the_doctor_passes_on_the_released_core_through_vspecs_own_k_channel(
        method: str) -> None:
    report = abi.check_static(method, True, sources=[_sdist()], use_installed=False)
    results = {r.check.id: r for tier in report.tiers for r in tier.results}
    assert report.ok, abi.render_text(report)
    for check in ("vllm.k_channel", "vllm.dynamic_schedule", "vllm.async_k",
                  "vllm.proposer_k", "vllm.runner_forwards_k"):
        assert results[check].variant == OWN_K, check
    assert results["vllm.scheduler_state"].variant == "admission limit max_num_running_reqs"
    assert results["vllm.zero_fast_path"].variant == "vLLM-HUST core"
    # no dynamic schedule to declare: an optional check, and it says so
    assert results["vllm.declared_schedule"].status == "WARN"
    # Model Runner V2 is an environment opt-in there: its checks do not apply
    assert results["vllm.v2_runner"].variant and "not applicable" in results[
        "vllm.v2_runner"].variant


@pytest.mark.slow
def test_the_installed_upstream_host_keeps_vllms_own_k_channel() -> None:
    pytest.importorskip("vllm")
    report = abi.check_static("eagle", True)
    results = {r.check.id: r for tier in report.tiers for r in tier.results}
    assert report.ok
    assert results["vllm.k_channel"].variant == "vLLM's K channel"
    assert results["vllm.scheduler_state"].variant == "admission limit max_num_active_reqs"


# ---- the runners' synchronous draft copy, executed ---------------------------------------
def _methods(text: str, cls_name: str, wanted: set[str], torch_attr: str) -> dict[str, Any]:
    """Methods of ``cls_name`` compiled from ``text`` with the device stream calls
    (``torch.cuda`` / ``torch.npu``) stubbed for the CPU."""
    tree = ast.parse(text)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls_name)
    device = SimpleNamespace(current_stream=lambda: None,
                             stream=lambda s: contextlib.nullcontext())
    fake_torch = types.SimpleNamespace(is_tensor=torch.is_tensor, Tensor=torch.Tensor,
                                       **{torch_attr: device})
    namespace: dict[str, Any] = {"torch": fake_torch, "SchedulerOutput": object}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            source = textwrap.dedent(ast.get_source_segment(text, node) or "")
            exec(compile(source, f"{cls_name}.py", "exec"), namespace)
    assert wanted <= namespace.keys()
    return {name: namespace[name] for name in wanted}


def _copy_and_read_back(runner: str) -> tuple[Any, Any]:
    """(``_copy_draft_token_ids_to_cpu``, ``_get_draft_token_ids_cpu``) of a runner whose
    sync copy fills a [max_num_reqs, max K] buffer without a column slice: the vLLM-HUST
    core's GPUModelRunner, or vllm-ascend 0.23's NPUModelRunner (which reads back with the
    GPUModelRunner method it inherits, the core's here)."""
    _sdist()
    core = _methods(_hust_sdist.source_file("vllm/v1/worker/gpu_model_runner.py"),
                    "GPUModelRunner",
                    {"_copy_draft_token_ids_to_cpu", "_get_draft_token_ids_cpu"}, "cuda")
    if runner == "vllm-hust core":
        return core["_copy_draft_token_ids_to_cpu"], core["_get_draft_token_ids_cpu"]
    import tarfile

    import _ascend_sdists

    try:
        path = _ascend_sdists.sdist(_ascend_sdists.RELEASE)
    except _ascend_sdists.Unavailable as exc:
        pytest.skip(str(exc))
    name = f"vllm_ascend-{_ascend_sdists.RELEASE}/vllm_ascend/worker/model_runner_v1.py"
    with tarfile.open(path) as tar:
        member = tar.extractfile(name)
        assert member is not None
        text = member.read().decode()
    npu = _methods(text, "NPUModelRunner", {"_copy_draft_token_ids_to_cpu"}, "npu")
    return npu["_copy_draft_token_ids_to_cpu"], core["_get_draft_token_ids_cpu"]


class _Event:
    def record(self) -> None: ...

    def synchronize(self) -> None: ...


class _Stream:
    def wait_stream(self, other: Any) -> None: ...


def _runner(name: str, wrapped: bool, max_k: int = 3, max_reqs: int = 4) -> Any:
    copy, read_back = _copy_and_read_back(name)
    if wrapped:
        copy = k_backport.make_draft_copy_wrapper(copy)
    cls = type("Runner", (), {"_copy_draft_token_ids_to_cpu": copy,
                              "_get_draft_token_ids_cpu": read_back})
    runner = cls()
    runner.use_async_scheduling = False
    runner.num_spec_tokens = max_k
    runner.draft_token_ids_event = _Event()
    runner.draft_token_ids_copy_stream = _Stream()
    runner.draft_token_ids_cpu = torch.zeros(max_reqs, max_k, dtype=torch.int64)
    runner.input_batch = SimpleNamespace(req_ids=["a", "b"],
                                         sampling_metadata=SimpleNamespace(output_token_ids=[]))
    runner._draft_token_req_ids = None
    return runner


def _sync_frame(runner: Any, gamma: int) -> list[list[int]]:
    runner._draft_token_ids = torch.arange(1, 2 * gamma + 1).view(2, gamma)
    runner._copy_draft_token_ids_to_cpu(SimpleNamespace(has_structured_output_requests=False))
    drafts, req_ids = runner._get_draft_token_ids_cpu()
    assert req_ids == ["a", "b"]
    return drafts


RUNNERS = ["vllm-hust core", "vllm-ascend 0.23"]


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNERS)
def test_the_runner_alone_cannot_hand_a_gamma_below_max_k_to_the_scheduler(name: str) -> None:
    runner = _runner(name, wrapped=False)
    assert _sync_frame(runner, 1) == [[1, 1, 1], [2, 2, 2]]  # broadcast: 3 drafts, not 1
    for gamma in (0, 2):
        with pytest.raises(RuntimeError):
            _sync_frame(runner, gamma)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNERS)
def test_sync_frames_of_gamma_0_1_2_reach_the_scheduler_as_drafted(name: str) -> None:
    runner = _runner(name, wrapped=True)
    assert _sync_frame(runner, 2) == [[1, 2], [3, 4]]
    assert _sync_frame(runner, 0) == [[], []]
    assert _sync_frame(runner, 1) == [[1], [2]]
    assert _sync_frame(runner, 3) == [[1, 2, 3], [4, 5, 6]]  # max K: the whole buffer


# ---- the scheduler side: vSpec's own channel ------------------------------------------------
class _Req:
    def __init__(self, rid: str) -> None:
        self.request_id = rid
        self.spec_token_ids: list[int] = []

    def is_finished(self) -> bool:
        return False


class CoreShapedScheduler:
    """The core's Scheduler as far as vSpec touches it: no dynamic_sd_lookup, no
    max_num_active_reqs (admission compares len(running) == max_num_running_reqs and asserts
    len(running) <= it), an output without num_spec_tokens_to_schedule and, like its
    AsyncScheduler, fixed [-1] * K placeholders on every scheduled decode."""

    def __init__(self, running: int, waiting: int, slots: int, k: int = 3) -> None:
        self.requests = {f"r{i}": _Req(f"r{i}") for i in range(running + waiting)}
        reqs = list(self.requests.values())
        self.running, self.waiting = reqs[:running], reqs[running:]
        self.max_num_running_reqs = slots
        self.max_num_scheduled_tokens = 256
        self.finished_req_ids: set[str] = set()
        self._spec_token_placeholders = [-1] * k

    def has_unfinished_requests(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> Any:
        num = {}
        for r in self.running:
            num[r.request_id] = 1 + len(r.spec_token_ids)
        while self.waiting:
            if len(self.running) == self.max_num_running_reqs:
                break
            r = self.waiting.pop(0)
            self.running.append(r)
            num[r.request_id] = 8
        assert len(self.running) <= self.max_num_running_reqs
        spec = {r.request_id: r.spec_token_ids for r in self.running if r.spec_token_ids}
        for r in self.running:  # AsyncScheduler._update_after_schedule
            r.spec_token_ids = self._spec_token_placeholders
        return SimpleNamespace(num_scheduled_tokens=num,
                               total_num_scheduled_tokens=sum(num.values()),
                               scheduled_spec_decode_tokens=spec, scheduled_new_reqs=[],
                               num_invalid_spec_tokens=None)


class _Ctrl:
    def __init__(self, gammas: list[int]) -> None:
        self.gammas = gammas
        self.asked: list[int] = []

    def decide(self, batch_size: int, token_budget: int) -> int:
        self.asked.append(batch_size)
        return self.gammas[len(self.asked) - 1]

    def observe(self, feedback: Any) -> None: ...

    def settled(self) -> bool:
        return False


def _attach(sched: Any, ctrl: Any, **settings: Any) -> Any:
    hook = SchedulerHook(sched, Settings(**settings), ctrl, 3)
    hook.own_channel = True  # what attach() picks for a scheduler without dynamic_sd_lookup
    setattr(sched, HOOK_ATTR, hook)
    return _make_schedule_wrapper(type(sched).schedule)


def test_own_channel_publishes_gamma_and_sizes_the_async_placeholders() -> None:
    sched = CoreShapedScheduler(running=2, waiting=0, slots=4)
    ctrl = _Ctrl([2, 0, 3])
    schedule = _attach(sched, ctrl, adaptive_gamma0_mode="sync")
    real = [7, 8, 9]
    sched.requests["r1"].spec_token_ids = real  # drafts the worker made: never touched
    for gamma in (2, 0, 3):
        out = schedule(sched)
        assert getattr(out, K_FIELD) == gamma
        assert [len(r.spec_token_ids) for r in sched.running] == [gamma, gamma]
    assert ctrl.asked == [2, 2, 2]
    assert real == [7, 8, 9]


def test_refill_holds_through_max_num_running_reqs_on_the_core() -> None:
    sched = CoreShapedScheduler(running=3, waiting=5, slots=4)  # 1 free, refill 4: hold
    schedule = _attach(sched, _Ctrl([2] * 20), adaptive_refill_batch=4,
                       adaptive_refill_hold="speculating")
    schedule(sched)  # the core's own assert (len(running) <= limit) holds while held
    hook = getattr(sched, HOOK_ATTR)
    assert hook.refill.held and len(sched.running) == 3 and sched.max_num_running_reqs == 4
    sched.running.pop()
    sched.running.pop()  # two finish: 3 free < a cohort of 4: still held
    schedule(sched)
    assert hook.refill.held and len(sched.running) == 1 and sched.max_num_running_reqs == 4
    sched.running.pop()  # the last one finishes: a cohort of 4 is admitted
    schedule(sched)
    assert not hook.refill.held and len(sched.running) == 4


# ---- the worker side: a K-less proposer of the vLLM-Ascend-HUST shape ----------------------
class HustShapedProposer:
    """Loops and buffers over num_draft_steps (tree depth, else K), set in __init__; drafts
    come out as [B, num_speculative_tokens]."""

    def __init__(self, k: int, tree_depth: int | None = None) -> None:
        self.num_speculative_tokens = k
        self.num_draft_steps = tree_depth if tree_depth is not None else k
        self.steps_run = 0

    def propose(self, batch: int) -> Any:
        cols = []
        for step in range(self.num_draft_steps):
            self.steps_run += 1
            cols.append(torch.full((batch, 1), step + 1))
        return torch.cat(cols, dim=1)[:, : self.num_speculative_tokens]


@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_a_k_less_proposer_drafts_exactly_gamma_steps(gamma: int) -> None:
    p = HustShapedProposer(3)
    out = k_backport.run_at_gamma(p, gamma, lambda: p.propose(2), sync_zero=True, width=None)
    assert p.steps_run == gamma and out.shape == (2, gamma)
    assert (p.num_speculative_tokens, p.num_draft_steps) == (3, 3)  # restored


def test_gamma_0_in_sync_mode_drafts_one_step_and_hands_back_none() -> None:
    p = HustShapedProposer(3)
    out = k_backport.run_at_gamma(p, 0, lambda: p.propose(2), sync_zero=True, width=3)
    assert p.steps_run == 1
    assert out.tolist() == [[0, 0, 0], [0, 0, 0]]  # padded for a stride-K async reader


def test_a_tree_depth_is_not_taken_for_k() -> None:
    p = HustShapedProposer(3, tree_depth=2)
    with k_backport.drafting_steps(p, 1):
        assert (p.num_speculative_tokens, p.num_draft_steps) == (1, 2)
    assert (p.num_speculative_tokens, p.num_draft_steps) == (3, 2)


class HustAscendProposer(HustShapedProposer):
    """vLLM-Ascend-HUST's K-less ``_propose(..., scheduler_output=None, ...)``."""

    use_async_scheduling = False

    def _propose(self, *, target_token_ids: Any = None, scheduler_output: Any = None,
                 common_attn_metadata: Any = None) -> Any:
        return self.propose(2)


@pytest.mark.parametrize("runner_shape", ["k-less call", "k-native call"])
def test_the_ascend_backport_drafts_gamma_steps_on_both_runner_shapes(runner_shape: str) -> None:
    from vllm_hust_vspec.host.worker.ascend.proposer import make_propose_backport

    backport = make_propose_backport(HustAscendProposer._propose, lambda: "sync")
    for gamma in (2, 1, 0, 3):
        p = HustAscendProposer(3)
        sched = SimpleNamespace(**{K_FIELD: gamma})
        extra = {"num_speculative_tokens": gamma} if runner_shape == "k-native call" else {}
        if extra:  # that runner's scheduler output carries no vSpec field
            sched = SimpleNamespace()
        out = backport(p, target_token_ids=torch.zeros(2), scheduler_output=sched, **extra)
        assert out.shape == (2, gamma)
        assert p.steps_run == max(gamma, 1)  # gamma 0 (sync): one step, dropped
        assert (p.num_speculative_tokens, p.num_draft_steps) == (3, 3)
