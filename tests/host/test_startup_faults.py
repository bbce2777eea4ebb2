"""Start-up faults of vSpec's engine-side work: one line each, the exception unchanged, the
test-only fault hook off by default; the engine clients' dead path fails waiting utility
calls (host/frontend/engine_dead.py) instead of leaving them waiting forever."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_hust_vspec.host import startup_faults as startup
from vllm_hust_vspec.host.engine.metrics import make_metrics
from vllm_hust_vspec.host.engine.trace import TraceWriter
from vllm_hust_vspec.host.frontend import engine_dead


def test_a_stage_prints_one_line_and_reraises(capsys: pytest.CaptureFixture[str]) -> None:
    with (pytest.raises(ValueError, match="bad") as info, startup.stage("outer"),
          startup.stage("inner work")):
        raise ValueError("bad\nthing")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1  # the inner stage reported it, the outer one did not again
    assert err[0].startswith(f"{startup.PREFIX} (inner work, pid ")
    assert err[0].endswith("): ValueError: bad; thing")
    assert isinstance(info.value, ValueError)
    with startup.stage("fine"):
        pass
    assert capsys.readouterr().err == ""


def test_the_fault_hook_is_off_unless_its_variable_names_the_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(startup.TEST_FAULT_ENV, raising=False)
    for place in startup.FAULT_PLACES:
        startup.inject(place)  # nothing
    TraceWriter(tmp_path / "t.jsonl").close()
    monkeypatch.setenv(startup.TEST_FAULT_ENV, "trace")
    startup.inject("calibration")
    with pytest.raises(startup.InjectedFault, match="VSPEC_TEST_STARTUP_FAULT=trace"):
        startup.inject("trace")
    # through the trace writer's own error: the option and the path named
    with pytest.raises(OSError, match=r"adaptive_trace: cannot open .*t2\.jsonl"):
        TraceWriter(tmp_path / "sub" / "t2.jsonl")
    assert not (tmp_path / "sub").exists()


def test_metrics_that_cannot_be_created_name_the_metrics_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "prom"))
    monkeypatch.setenv(startup.TEST_FAULT_ENV, "metrics")
    with pytest.raises(OSError, match=r"vspec_ metrics .*PROMETHEUS_MULTIPROC_DIR=.*prom"):
        make_metrics(CollectorRegistry())
    monkeypatch.delenv(startup.TEST_FAULT_ENV)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    assert make_metrics(CollectorRegistry()).gamma_steps is not None


# ---- the engine clients' dead path --------------------------------------------------------
@pytest.fixture
def dead_error() -> type[Exception]:
    """vLLM's EngineDeadError (skips without the host)."""
    exceptions = pytest.importorskip("vllm.v1.engine.exceptions")
    return exceptions.EngineDeadError  # type: ignore[no-any-return]


def test_async_utility_calls_fail_once_the_output_task_ends(dead_error: type[Exception]) -> None:
    async def scenario() -> None:
        stop = asyncio.Event()

        async def receiver() -> None:  # the client's output task until the engine dies
            await stop.wait()

        results: dict[int, Any] = {}
        client = SimpleNamespace(resources=SimpleNamespace(output_queue_task=None),
                                 utility_results=results)

        def ensure(self: Any) -> None:
            if self.resources.output_queue_task is None:
                self.resources.output_queue_task = asyncio.create_task(receiver())

        wrapped = engine_dead.make_ensure_output_task_wrapper(ensure)
        loop = asyncio.get_running_loop()
        waiting, answered = loop.create_future(), loop.create_future()
        results.update({1: waiting, 2: answered})
        wrapped(client)
        wrapped(client)  # a second call adds no second callback
        answered.set_result("ok")
        await asyncio.sleep(0)
        assert not waiting.done()
        stop.set()  # the engine's dead message ends the receiver
        with pytest.raises(dead_error):
            await asyncio.wait_for(waiting, 5)
        assert answered.result() == "ok" and results == {}
        late = loop.create_future()  # a call made after the receiver ended fails at once
        results[3] = late
        wrapped(client)
        with pytest.raises(dead_error):
            await asyncio.wait_for(late, 5)

    asyncio.run(scenario())


def test_sync_utility_calls_fail_once_the_output_thread_ends(dead_error: type[Exception]
                                                            ) -> None:
    stop = threading.Event()

    class Client:
        def __init__(self) -> None:
            self.utility_results: dict[int, Future[Any]] = {}
            self.output_queue_thread = threading.Thread(target=stop.wait, daemon=True)
            self.output_queue_thread.start()

    init = engine_dead.make_sync_init_wrapper(Client.__init__)
    client = Client.__new__(Client)
    init(client)
    future: Future[Any] = Future()
    client.utility_results[7] = future
    stop.set()
    with pytest.raises(dead_error):
        future.result(timeout=5)
    assert client.utility_results == {}


@pytest.mark.slow
def test_install_wraps_both_engine_clients(dead_error: type[Exception]) -> None:
    from vllm.v1.engine.core_client import AsyncMPClient, SyncMPClient

    from vllm_hust_vspec.host.patching import Patcher, is_patched

    patcher = Patcher("test-engine-dead")
    try:
        assert engine_dead.install(patcher)
        assert is_patched(AsyncMPClient, "_ensure_output_queue_task")
        assert is_patched(SyncMPClient, "__init__")
    finally:
        patcher.undo()
    assert not is_patched(AsyncMPClient, "_ensure_output_queue_task")
