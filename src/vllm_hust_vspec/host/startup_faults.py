"""vSpec's start-up work in the engine and the workers, when it fails: one line naming the
fault, then the host's own failure path.

Each piece of start-up work (the worker check before the weights load, the start-up cost
profile, the scheduler hook with its metrics and trace, the start-up calibration) runs inside
:func:`stage`. An exception leaving it prints one line to stderr,
``vllm-hust-vspec: error: engine start-up failed (<stage>): <Type>: <message>``, and
propagates unchanged: vLLM then ends the process and the front end sees the engine die
(host/frontend/engine_dead.py makes sure it does after the READY handshake too), so ``vllm serve``
exits non-zero instead of serving without the engine it announced.

:func:`inject` is a test-only fault hook, off unless :data:`TEST_FAULT_ENV` names its place:
it lets a test fail real start-up work at a real place of a real server.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Test-only: names the start-up place where :func:`inject` raises. Never set in production.
TEST_FAULT_ENV = "VSPEC_TEST_STARTUP_FAULT"
FAULT_PLACES = ("metrics", "calibration", "trace")
PREFIX = "vllm-hust-vspec: error: engine start-up failed"
_REPORTED = "_vspec_startup_reported"


class InjectedFault(OSError):
    """The fault :func:`inject` raises (an OSError, as the file and metrics writers raise)."""


def inject(place: str) -> None:
    """Raise :class:`InjectedFault` when the test-only :data:`TEST_FAULT_ENV` names ``place``;
    nothing otherwise."""
    if os.environ.get(TEST_FAULT_ENV, "") == place:
        raise InjectedFault(f"fault injected for a test ({TEST_FAULT_ENV}={place})")


def report(what: str, exc: BaseException) -> bool:
    """Print the one line for ``exc`` raised by start-up work ``what`` (once per exception,
    however many stages it leaves); returns whether it printed."""
    if getattr(exc, _REPORTED, False):
        return False
    # an exception type without instance attributes is reported each time
    with contextlib.suppress(AttributeError):
        setattr(exc, _REPORTED, True)
    message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    print(f"{PREFIX} ({what}, pid {os.getpid()}): {type(exc).__name__}: {message}",
          file=sys.stderr, flush=True)
    return True


@contextmanager
def stage(what: str) -> Iterator[None]:
    """Run start-up work ``what``; an exception leaving it is reported and re-raised."""
    try:
        yield
    except Exception as exc:
        report(what, exc)
        raise


__all__ = ["FAULT_PLACES", "PREFIX", "TEST_FAULT_ENV", "InjectedFault", "inject", "report",
           "stage"]
