"""Diagnostics traces (host/worker/v1/diagnostics.py) without an engine: bounds of every trace, the
never-blocking writer, the argmax trim at max_tokens, fail-closed checks, what is patched."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from vllm_hust_vspec import host  # noqa: E402
from vllm_hust_vspec.cli import active_vocab  # noqa: E402
from vllm_hust_vspec.host.abi.capabilities import MODEL_RUNNER  # noqa: E402
from vllm_hust_vspec.host.patching import is_patched, resolve  # noqa: E402
from vllm_hust_vspec.host.worker.v1 import diagnostics as diag  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def _clean() -> object:
    host.undo()
    yield
    host.undo()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _runner(req_ids: list[str], outputs: dict[str, tuple[int | None, list[int]]]) -> Any:
    requests = {
        rid: SimpleNamespace(sampling_params=SimpleNamespace(max_tokens=limit),
                             output_token_ids=list(out))
        for rid, (limit, out) in outputs.items()
    }
    return FakeRunner(input_batch=SimpleNamespace(req_ids=req_ids), requests=requests)


class FakeRunner(SimpleNamespace):
    """Weak-referenceable, as a real runner is."""

    __slots__ = ("__weakref__",)


def test_budget_stops_at_steps_and_bytes() -> None:
    by_steps = diag.Budget("opt", max_steps=2, max_bytes=100)
    assert [by_steps.admit(1) for _ in range(3)] == [True, True, False]
    by_bytes = diag.Budget("opt", max_steps=10, max_bytes=10)
    assert [by_bytes.admit(6), by_bytes.admit(6), by_bytes.admit(1)] == [True, False, False]
    assert by_bytes.summary() == {"steps": 1, "bytes": 6, "truncated": True}


def test_draft_log_schedule() -> None:
    limits = diag.Limits(log_first=3, log_every=5)
    assert [s for s in range(20) if diag.should_log(s, limits)] == [0, 1, 2, 3, 8, 13, 18]
    default = [s for s in range(200) if diag.should_log(s)]
    assert default == [*range(17), 80, 144]  # first 16, then every 64th


def test_writer_never_blocks_and_counts_drops() -> None:
    gate = threading.Event()
    writer = diag.Writer(capacity=2)
    assert writer.submit(gate.wait)  # the thread holds this one
    accepted = [writer.submit(lambda: None) for _ in range(5)]
    assert accepted.count(False) >= 2 and writer.dropped == accepted.count(False)
    gate.set()
    writer.close()
    assert not writer.submit(lambda: None)


def test_argmax_trace_bound_and_closing_line(tmp_path: Path) -> None:
    limits = diag.Limits(argmax_steps=3, argmax_batch=2)
    path = tmp_path / "sub" / "argmax.jsonl"  # folder created
    runner = _runner(["a", "b"], {"a": (None, [1] * 10), "b": (None, [2] * 10)})
    d = diag.RunnerDiagnostics({diag.ARGMAX_OPTION: str(path)}, runner, limits)
    for _ in range(5):
        d.on_sampled(["a", "b"], [[1], [2]])
    d.close()
    d.close()  # idempotent
    lines = _lines(path)
    assert lines[0]["trace"] == diag.ARGMAX_FORMAT
    assert [r["step"] for r in lines[1:-1]] == [0, 1, 2]
    assert lines[-1] == {"end": True, "steps": 3, "bytes": lines[-1]["bytes"],
                         "truncated": True, "dropped_writes": 0}
    assert d.step == 5  # steps keep counting past the bound


def test_argmax_trim_at_max_tokens_and_skip_empty(tmp_path: Path) -> None:
    path = tmp_path / "argmax.jsonl"
    # after bookkeeping "a" holds 5 tokens of max 4: of its 3 new ones only 2 were committed
    runner = _runner(["a", "b", "c"], {"a": (4, [7, 8, 9, 10, 11]), "b": (None, [5]),
                                       "c": (3, [1, 2, 3, 4])})
    d = diag.RunnerDiagnostics({diag.ARGMAX_OPTION: str(path)}, runner)
    d.on_sampled(["a", "b", "c", "d"], [[9, 10, 11], [5], [4], []])
    d.close()
    (record,) = _lines(path)[1:-1]
    assert record == {"step": 0, "req_ids": ["a", "b"], "token_ids": [[9, 10], [5]]}
    counts = active_vocab.count_trace(path)
    assert counts == {9: 1, 10: 1, 5: 1}


def test_draft_io_and_hidden_traces_with_bounds(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    limits = diag.Limits(io_steps=2, hidden_steps=10, hidden_bytes=3 * 4 * 4 * 2, log_first=1,
                         log_every=2, log_requests=1)
    runner = _runner(["r0", "r1"], {})
    d = diag.RunnerDiagnostics({"eagle_draft_trace": True,
                                "eagle_draft_io_trace_dir": str(tmp_path / "io"),
                                "eagle_target_hidden_trace_dir": str(tmp_path / "h")},
                               runner, limits, method="eagle")
    hidden = torch.ones(3, 4)
    inputs = {"target_token_ids": torch.tensor([1, 2, 3]),
              "target_positions": torch.tensor([0, 1, 2]),
              "target_hidden_states": hidden, "next_token_ids": torch.tensor([4, 5])}
    with caplog.at_level("INFO", logger="vllm_hust_vspec.diagnostics"):
        for _ in range(4):
            d.on_propose(2, inputs, torch.tensor([[6, 7], [8, 9]]))
            hidden.add_(1)  # the runner reuses its buffer: saved copies must not change
            d.on_sampled(["r0", "r1"], [[1], [1]])
    d.close()
    (io_file,) = (tmp_path / "io").glob("draft_io-*.jsonl")
    io = _lines(io_file)
    assert io[0]["trace"] == diag.DRAFT_IO_FORMAT and io[0]["method"] == "eagle"
    assert len(io) == 2 + 2 and io[-1]["truncated"] is True
    assert io[1]["draft_token_ids"] == [[6, 7], [8, 9]] and io[1]["next_token_ids"] == [4, 5]
    assert [r["step"] for r in io[1:-1]] == [0, 1]
    files = sorted((tmp_path / "h").glob("hidden-*.pt"))
    assert len(files) == 2  # 2 x 48 bytes fit the 96-byte bound, the third not
    first = torch.load(files[0])
    assert torch.equal(first["hidden_states"], torch.ones(3, 4)) and first["k"] == 2
    logged = [r.getMessage() for r in caplog.records if "vSpec draft step" in r.getMessage()]
    assert [m.split()[3] for m in logged] == ["0", "1", "3"]
    assert "(+1 more)" in logged[0] and "r0=[6, 7]" in logged[0]


def test_unwritable_path_names_the_option(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(diag.DiagnosticsError, match=diag.ARGMAX_OPTION):
        diag.RunnerDiagnostics({diag.ARGMAX_OPTION: str(blocker / "x.jsonl")}, None)


def test_settings_checks_fail_closed() -> None:
    assert diag.check_settings(Settings(), ascend=False) == {}
    with pytest.raises(diag.DiagnosticsError, match="eagle_draft_trace.*ngram"):
        diag.check_settings(Settings(method="ngram", diagnostics={"eagle_draft_trace": True}),
                            ascend=False)
    # the argmax trace needs no drafter
    assert diag.check_settings(Settings(
        method="ngram", diagnostics={"eagle_target_argmax_trace_path": "x"}),
                               ascend=False)
    with pytest.raises(diag.DiagnosticsError, match="vLLM-Ascend"):
        diag.check_settings(Settings(method="eagle", diagnostics={"eagle_draft_trace": True}),
                            ascend=True)


def test_runner_checks_fail_closed() -> None:
    class Traced:
        def propose(self) -> None: ...

    Traced.propose.__vspec_diagnostics__ = True  # type: ignore[attr-defined]

    class Other:
        def propose(self) -> None: ...

    opts = {"eagle_draft_trace": True}
    diag.check_runner(opts, SimpleNamespace(drafter=Traced()), (Traced,))
    with pytest.raises(diag.DiagnosticsError, match="eagle_draft_trace.*Other"):
        diag.check_runner(opts, SimpleNamespace(drafter=Other()), (Traced,))
    with pytest.raises(diag.DiagnosticsError, match="NoneType"):
        diag.check_runner(opts, SimpleNamespace(drafter=None), (Traced,))
    with pytest.raises(diag.DiagnosticsError, match="synchronous scheduling"):
        diag.check_runner({diag.ARGMAX_OPTION: "x"},
                          SimpleNamespace(drafter=None, use_async_scheduling=True), ())


@pytest.mark.slow
def test_nothing_patched_without_options() -> None:
    runner = resolve(*MODEL_RUNNER)
    host.apply(Settings(method="eagle"))
    assert not is_patched(runner, "_bookkeeping_sync")
    assert not is_patched(runner, "shutdown")


@pytest.mark.slow
def test_patches_with_options_and_undo() -> None:
    runner = resolve(*MODEL_RUNNER)
    eagle = resolve("vllm.v1.spec_decode.eagle", "EagleProposer")
    draft = resolve("vllm.v1.spec_decode.draft_model", "DraftModelProposer")
    host.apply(Settings(method="eagle", diagnostics={"eagle_draft_trace": True}))
    for owner, name in ((runner, "__init__"), (runner, "_bookkeeping_sync"),
                        (runner, "shutdown"), (eagle, "propose"), (draft, "propose")):
        assert is_patched(owner, name), name
    host.undo()
    assert "propose" not in vars(eagle) and not is_patched(runner, "shutdown")
    host.apply(Settings(method="draft", diagnostics={"eagle_target_argmax_trace_path": "x"}))
    assert is_patched(runner, "_bookkeeping_sync") and not is_patched(eagle, "propose")


@pytest.mark.slow
def test_apply_refuses_ngram_draft_traces_leaving_nothing_patched() -> None:
    from vllm import ModelRegistry

    from vllm_hust_vspec.host import models

    before = set(ModelRegistry.get_supported_archs())
    try:
        with pytest.raises(diag.DiagnosticsError, match="eagle_draft_io_trace_dir"):
            host.apply(Settings(method="ngram",
                                diagnostics={"eagle_draft_io_trace_dir": "/tmp/unused"}))
        assert not host.applied()
        assert not is_patched(resolve(*MODEL_RUNNER), "shutdown")
    finally:
        # host.apply does not unregister the models _apply_methods registered before a later
        # install in it raised (reported); keep the registry clean for the other tests
        models.unregister_models(
            [a for a in models.QWEN2_EAGLE_ARCHS if a not in before])


def test_active_vocab_knows_the_format_name() -> None:
    assert active_vocab.ARGMAX_FORMAT == diag.ARGMAX_FORMAT
