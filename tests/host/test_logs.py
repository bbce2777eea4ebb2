"""vSpec's lines reach the host's log handlers, and a controller failure is one ERROR line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("vllm")

from vllm_hust_vspec.host.logs import PACKAGE_LOGGER, adopt_host_logging  # noqa: E402


@pytest.fixture
def fresh_logger() -> Iterator[logging.Logger]:
    ours = logging.getLogger(PACKAGE_LOGGER)
    saved = (list(ours.handlers), ours.level, ours.propagate)
    ours.handlers.clear()
    yield ours
    ours.handlers[:] = saved[0]
    ours.setLevel(saved[1])
    ours.propagate = saved[2]


def test_lines_are_formatted_by_the_host(fresh_logger: logging.Logger) -> None:
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging

    # the front end loads plugins before it configures logging: route first, configure later
    assert adopt_host_logging()
    configure_logging(LoggingConfig())
    (handler,) = logging.getLogger("vllm").handlers
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    old = handler.setStream(stream)
    try:
        logging.getLogger("vllm_hust_vspec.host").info("vSpec: hello from the hook")
        logging.getLogger("vllm_hust_vspec.host").debug("vSpec: not made at INFO")
    finally:
        handler.setStream(old)
    (line,) = stream.getvalue().strip().splitlines()
    assert line.endswith("vSpec: hello from the hook")
    assert " INFO " in line and "pid=" in line  # level and process, as vLLM's own lines
    assert not adopt_host_logging()  # idempotent: the route is already there


def test_a_logger_the_user_configured_is_left_alone(fresh_logger: logging.Logger) -> None:
    mine = logging.NullHandler()
    fresh_logger.addHandler(mine)
    assert not adopt_host_logging()
    assert fresh_logger.handlers == [mine]


def test_controller_failure_is_one_error_line(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from vllm_hust_vspec.host.engine.scheduler import SchedulerHook
    from vllm_hust_vspec.settings import Settings

    class Boom:
        def decide(self, batch_size: int, token_budget: int) -> int:
            raise ValueError("bad arm table")

    sched = SimpleNamespace(max_num_scheduled_tokens=64)
    hook = SchedulerHook(sched, Settings(), Boom(), 3)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="vllm_hust_vspec"):
        assert hook.decide(4) == 3 and hook.decide(4) == 3
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert "controller.decide raised ValueError: bad arm table" in message
    assert "gamma=3" in message and errors[0].exc_info is None
